#include "examples/char_lm/train.h"

#include <algorithm>
#include <cstdlib>
#include <chrono>
#include <cstdio>
#include <filesystem>
#include <fstream>

#include "core/autograd.h"
#include "examples/char_lm/checkpoint.h"
#include "examples/char_lm/data.h"
#include "examples/char_lm/sample.h"
#include "nn/gpt.h"
#include "optim/adam.h"
#include "optim/clip_grad.h"
#include "optim/schedule.h"

namespace ag::char_lm {

namespace {
using Clock = std::chrono::steady_clock;

double elapsed_ms(Clock::time_point since) {
  return std::chrono::duration<double, std::milli>(Clock::now() - since).count();
}

std::string duration_text(double seconds) {
  char buffer[32];
  const int s = static_cast<int>(seconds);
  std::snprintf(buffer, sizeof buffer, "%dm%02ds", s / 60, s % 60);
  return buffer;
}

// Mean loss over eval_iters batches of each split. The batches come from a
// generator of their own, the same at every evaluation: evaluating never moves
// the training stream (so a resumed run draws the same batches) and every
// evaluation scores the same windows.
EvalRecord evaluate(nn::GPT& model, const Dataset& data, const TrainConfig& c, int64_t iter) {
  NoGradGuard no_grad;
  model.eval();
  auto mean_loss = [&](const std::vector<int64_t>& tokens, uint64_t stream) {
    Generator gen(c.seed + stream);
    double total = 0;
    Tensor x, y;
    for (int64_t i = 0; i < c.eval_iters; ++i) {
      get_batch(tokens, c.batch_size, c.block_size, gen, x, y);
      total += model.loss(x.to(c.device), y.to(c.device)).item();
    }
    return total / static_cast<double>(c.eval_iters);
  };
  EvalRecord record{iter, mean_loss(data.train, 2), mean_loss(data.val, 3)};
  model.train();
  return record;
}

nn::GPTConfig model_config(const TrainConfig& c, int64_t vocab_size) {
  return {vocab_size, c.block_size, c.n_layer, c.n_head, c.n_embd, c.dropout, c.gelu, c.attention};
}

// The options that define a run: a resumed run must keep them all (only
// max_iters, where output goes, logging and the device may change), or it
// would not continue the same run.
Metadata run_options(const TrainConfig& c) {
  auto number = [](double v) {
    char buffer[32];
    std::snprintf(buffer, sizeof buffer, "%.17g", v);
    return std::string(buffer);
  };
  return {{"n-layer", std::to_string(c.n_layer)},   {"n-head", std::to_string(c.n_head)},
          {"n-embd", std::to_string(c.n_embd)},     {"block-size", std::to_string(c.block_size)},
          {"batch-size", std::to_string(c.batch_size)}, {"dropout", number(c.dropout)},
          {"gelu", c.gelu == GeluApprox::Erf ? "erf" : "tanh"},
          {"lr", number(c.lr)},                     {"min-lr", number(c.min_lr)},
          {"warmup-iters", std::to_string(c.warmup_iters)}, {"lr-decay-iters", std::to_string(c.lr_decay_iters)},
          {"beta1", number(c.beta1)},               {"beta2", number(c.beta2)},
          {"weight-decay", number(c.weight_decay)}, {"grad-clip", number(c.grad_clip)},
          {"eval-interval", std::to_string(c.eval_interval)}, {"eval-iters", std::to_string(c.eval_iters)},
          {"seed", std::to_string(c.seed)}};
}

void check_same_run(const Metadata& saved, const TrainConfig& c) {
  std::string differences;
  for (const auto& [option, value] : run_options(c)) {
    const auto found = saved.find(option);
    if (found != saved.end() && found->second != value)
      differences += "\n  --" + option + ": the run has " + found->second + ", this call gives " + value;
  }
  AG_CHECK(differences.empty(), "train --resume: '" << c.out_dir << "' holds a run with other options (pass the run's "
                                                       "own; only --max-iters, output, logging and --device may change):"
                                                    << differences);
}

// The log of a resumed run keeps only the rows from before the checkpoint:
// the crashed or stopped run may have logged past it.
void truncate_log(const std::string& path, int64_t start) {
  std::ifstream in(path);
  std::string kept, line;
  while (std::getline(in, line))
    if (kept.empty() || std::strtoll(line.c_str(), nullptr, 10) < start) kept += line + "\n";
  std::ofstream(path, std::ios::trunc) << kept;
}
}  // namespace

TrainResult train(const TrainConfig& c) {
  AG_CHECK(c.eval_interval > 0 && c.eval_iters > 0 && c.log_interval > 0 && c.max_iters >= 0 && c.batch_size > 0,
           "train: eval_interval, eval_iters, log_interval and batch_size must be positive, max_iters non-negative");
  const std::string data_path = resolve_data_path(c.data_path);
  const Dataset data = make_dataset(read_text(data_path), c.block_size);
  std::error_code error;
  std::filesystem::create_directories(c.out_dir, error);
  AG_CHECK(!error, "train: cannot create the output directory '" << c.out_dir << "': " << error.message());

  // The model: fresh from the seed, or the checkpoint's weights on --resume.
  std::unique_ptr<nn::GPT> model;
  int64_t model_iter = -1;
  if (c.resume) {
    LoadedModel loaded = load_model(model_path(c.out_dir), DType::Float32, c.dropout);
    model_iter = loaded.iter;
    AG_CHECK(loaded.tokenizer.chars() == data.tokenizer.chars(),
             "train --resume: the checkpoint's vocabulary differs from that of '" << data_path << "'");
    model = std::move(loaded.model);
    model->set_attention_impl(c.attention);
  } else {
    Generator init(c.seed);
    model = std::make_unique<nn::GPT>(model_config(c, data.tokenizer.vocab_size()), init);
  }
  model->to(c.device);
  model->train();
  const std::vector<NamedTensor> params = model->named_parameters();
  optim::AdamW optimizer(optim::decay_groups(params, c.weight_decay), {c.lr, c.beta1, c.beta2, 1e-8});

  Generator batches(c.seed + 1);
  manual_seed(c.seed + 4);  // dropout masks draw from the default generator
  int64_t start = 0;
  if (c.resume) {
    const TrainState state = load_train_state(train_state_path(c.out_dir), optimizer);
    check_same_run(state.options, c);
    AG_CHECK(state.iter == model_iter,
             "train --resume: '" << c.out_dir << "' holds weights from iteration " << model_iter
                                 << " but training state from iteration " << state.iter
                                 << " (a crash between the two writes?); cannot continue that run");
    start = state.iter;
    batches.set_state(state.batch_seed, state.batch_offset);
    default_generator().set_state(state.dropout_seed, state.dropout_offset);
  }
  const auto save_checkpoint = [&](int64_t iter) {
    save_model(model_path(c.out_dir), *model, data.tokenizer, iter);
    save_train_state(train_state_path(c.out_dir),
                     {iter, batches.seed(), batches.offset(), default_generator().seed(), default_generator().offset(),
                      run_options(c)},
                     optimizer);
  };

  const std::string log_path = c.out_dir + "/log.csv";
  if (c.resume) truncate_log(log_path, start);
  std::ofstream log(log_path, c.resume ? std::ios::app : std::ios::trunc);
  AG_CHECK(log, "train: cannot write '" << log_path << "'");
  if (!c.resume) log << "iter,kind,loss,lr,ms_per_iter\n";
  if (!c.quiet)
    std::printf("char_lm: %lld parameters, vocab %lld, %zu train / %zu val tokens from %s\n",
                static_cast<long long>(model->num_parameters()), static_cast<long long>(data.tokenizer.vocab_size()),
                data.train.size(), data.val.size(), data_path.c_str());

  const optim::CosineSchedule schedule{c.lr, c.min_lr, c.warmup_iters, c.lr_decay_iters};
  TrainResult result;
  std::vector<double> iter_ms;
  auto window_start = Clock::now();
  int64_t window_iters = 0;
  for (int64_t iter = start;; ++iter) {
    // Evaluate and checkpoint at the start of every eval_interval-th iteration
    // and at the end. A resumed run already did it for `start`.
    if ((iter % c.eval_interval == 0 || iter == c.max_iters) && !(c.resume && iter == start)) {
      const EvalRecord e = evaluate(*model, data, c, iter);
      result.evals.push_back(e);
      log << iter << ",train," << e.train_loss << ",,\n" << iter << ",val," << e.val_loss << ",,\n" << std::flush;
      if (!c.quiet) std::printf("eval iter %5lld: train loss %.4f, val loss %.4f\n", static_cast<long long>(iter), e.train_loss, e.val_loss);
      save_checkpoint(iter);
      window_start = Clock::now();  // evaluation time is not training time
      window_iters = 0;
    }
    if (iter >= c.max_iters) break;

    const auto t0 = Clock::now();
    const double lr = optim::warmup_cosine_lr(iter, schedule);
    optimizer.set_lr(lr);
    Tensor x, y;
    get_batch(data.train, c.batch_size, c.block_size, batches, x, y);
    const Tensor loss = model->loss(x.to(c.device), y.to(c.device));
    optimizer.zero_grad();
    loss.backward();
    optim::clip_grad_norm(params, c.grad_clip);
    optimizer.step();
    const double loss_value = loss.item();
    iter_ms.push_back(elapsed_ms(t0));
    result.batch_losses.push_back(loss_value);
    ++window_iters;

    if (iter % c.log_interval == 0 || iter + 1 == c.max_iters) {
      const double ms = elapsed_ms(window_start) / static_cast<double>(window_iters);
      log << iter << ",batch," << loss_value << "," << lr << "," << ms << "\n";
      if (!c.quiet)
        std::printf("iter %5lld/%lld | loss %.4f | lr %.2e | %6.1f ms/iter | %7.0f tok/s | ETA %s\n",
                    static_cast<long long>(iter), static_cast<long long>(c.max_iters), loss_value, lr, ms,
                    1000.0 * static_cast<double>(c.batch_size * c.block_size) / ms,
                    duration_text(ms * static_cast<double>(c.max_iters - iter - 1) / 1000).c_str());
      std::fflush(stdout);
      window_start = Clock::now();
      window_iters = 0;
    }
  }
  if (!iter_ms.empty()) {
    std::nth_element(iter_ms.begin(), iter_ms.begin() + iter_ms.size() / 2, iter_ms.end());
    result.ms_per_iter = iter_ms[iter_ms.size() / 2];
  }
  if (c.sample_tokens > 0) {
    result.sample = generate(*model, data.tokenizer, "", {c.sample_tokens, 0.8, 200, c.seed});
    if (!c.quiet) std::printf("\n--- sample (%lld characters) ---\n%s\n---\n", static_cast<long long>(c.sample_tokens), result.sample.c_str());
  }
  return result;
}

}  // namespace ag::char_lm
