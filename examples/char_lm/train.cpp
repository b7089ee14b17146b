#include "examples/char_lm/train.h"

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <deque>
#include <filesystem>
#include <fstream>
#include <numeric>

#include "core/autograd.h"
#include "dist/communicator.h"
#include "examples/char_lm/checkpoint.h"
#include "examples/char_lm/data.h"
#include "examples/char_lm/inspect.h"
#include "examples/char_lm/sample.h"
#include "examples/common/command_line.h"
#include "optim/adam.h"
#include "optim/data_parallel.h"

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

// Checks every option and their relations, before anything is written.
void check_options(const TrainConfig& c, const dist::Communicator& comm) {
  c.model.check();
  c.optim.check();
  check_option_ranges(c.run);
  optim::check_divisible(c.optim.batch_size, comm);
}

// What every process of a data-parallel run must agree on, or their
// collectives would not match: the options (but the paths, which may differ
// between machines), the text, and the checkpoint a resumed run starts from.
Metadata run_description(const TrainConfig& c, const std::string& text, const std::optional<SafetensorsFile>& saved_state) {
  Metadata description;
  TrainConfig::for_each_table(c, [&](const auto& table) {
    write_options(table, description, {OptionKind::Model, OptionKind::Derived, OptionKind::Run, OptionKind::Setting,
                                       OptionKind::Local}, KeyStyle::Dashed);
  });
  description.erase("data");
  description.erase("out");
  description["text fingerprint"] = std::to_string(dist::fingerprint(text));
  if (saved_state) description["checkpoint iteration"] = std::to_string(train_state_iter(*saved_state));
  return description;
}

// The log of a resumed run keeps the rows from before the checkpoint and the
// checkpoint's own evaluation: the crashed or stopped run may have logged past it.
void truncate_log(const std::string& path, int64_t start) {
  std::ifstream in(path);
  std::string kept, line;
  while (std::getline(in, line)) {
    const int64_t iter = std::strtoll(line.c_str(), nullptr, 10);
    const bool evaluation = line.find(",train,") != std::string::npos || line.find(",val,") != std::string::npos;
    if (kept.empty() || iter < start || (iter == start && evaluation)) kept += line + "\n";
  }
  std::ofstream(path, std::ios::trunc) << kept;
}

// Reads the losses the steps left on the device, at once (one wait, not one
// per step), each the sum of the processes' shares (one all-reduce).
void collect_losses(std::vector<Tensor>& pending, std::vector<double>& losses, dist::Communicator& comm) {
  if (pending.empty()) return;
  const Tensor shares = concat(pending, 0);
  comm.all_reduce_sum(shares);
  const std::vector<double> values = shares.to_vector();
  losses.insert(losses.end(), values.begin(), values.end());
  pending.clear();
}

double median(std::vector<double> values) {
  if (values.empty()) return 0;
  std::nth_element(values.begin(), values.begin() + values.size() / 2, values.end());
  return values[values.size() / 2];
}
}  // namespace

// The batches come from a generator of their own, the same at every
// evaluation: evaluating never moves the training stream (so a resumed run
// draws the same batches) and every evaluation scores the same windows. Each
// process scores its shard of every batch; the shards are equal, so the mean of
// their means is the batches' mean.
EvalRecord evaluate(nn::GPT& model, const Dataset& data, const TrainConfig& c, int64_t iter, dist::Communicator& comm) {
  NoGradGuard no_grad;
  model.eval();
  auto mean_loss = [&](const TokenIds& tokens, uint64_t stream) {
    Generator gen(c.optim.seed + stream);
    Tensor total;
    Tensor x, y;
    for (int64_t i = 0; i < c.run.eval_iters; ++i) {
      get_batch(tokens, c.optim.batch_size, c.model.block_size, gen, x, y);
      const Tensor loss = model.loss(optim::shard(x, comm).to(c.run.device), optim::shard(y, comm).to(c.run.device));
      total = total.defined() ? add(total, loss) : loss;
    }
    comm.all_reduce_sum(total);
    return total.item() / static_cast<double>(c.run.eval_iters * comm.size());  // one wait for the device
  };
  EvalRecord record{iter, mean_loss(data.train, 2), mean_loss(data.val, 3)};
  model.train();
  return record;
}

TrainResult train(TrainConfig c) {
  // Data-parallel when an MPI launcher started several processes (optim/data_parallel.h).
  dist::Communicator& comm = dist::world();
  const bool root = comm.rank() == 0;  // only rank 0 prints, logs and writes checkpoints
  if (!root) c.quiet = true;

  // --- options: on --resume merged with the run's own; all checked before --out is touched.
  const std::string out = c.run.out;
  std::optional<SafetensorsFile> saved_state;
  std::string resumed_unit;  // the checkpoint a resumed run continues from
  std::vector<std::string> passed_over;
  if (c.run.resume) {
    resumed_unit = find_checkpoint(out, &passed_over);
    saved_state = load_train_state(train_state_path(resumed_unit));
    resume_options(c, *saved_state);
  }
  const std::string data_path = resolve_data_path(c.run.data);
  const std::string text = read_text(data_path);
  const Dataset data = make_dataset(text, c.model.block_size);
  c.model.vocab_size = data.tokenizer.vocab_size();
  c.run.data = data_path;  // remembered with the run, so --resume finds the text without --data
  check_options(c, comm);
  if (!c.run.resume) check_output_directory("train", out, OutputKind::Run, c.run.overwrite, "--resume to continue it, ");

  if (root) {
    std::error_code error;
    std::filesystem::create_directories(out, error);
    AG_CHECK(!error, "train: cannot create the output directory '" << out << "': " << error.message());
    remove_stale_temporaries(out);
    if (!c.run.resume && c.run.overwrite) clear_run(out);
  }
  // Checked after the temporaries are gone: a run killed while writing its last unit is complete, and this
  // is the call that tidies it.
  if (c.run.resume) {
    const int64_t saved_iter = train_state_iter(*saved_state);
    AG_CHECK(c.run.max_iters > saved_iter,
             "train --resume: the run's checkpoint '" << resumed_unit << "' is at iteration " << saved_iter
                                                       << " already, and --max-iters " << c.run.max_iters
                                                       << " is not past it: nothing to train (give a larger --max-iters "
                                                          "to continue it)");
  }
  // The first collectives: every process checks it trains the same run, then binds its GPU.
  dist::check_same_on_every_process(comm, run_description(c, text, saved_state), "train");
  comm.use_device(c.run.device);

  // --- the model: fresh from the seed, or the checkpoint's weights on --resume.
  std::unique_ptr<nn::GPT> model;
  int64_t model_iter = -1;
  if (c.run.resume) {
    LoadedModel loaded = load_model(model_path(resumed_unit), DType::Float32, c.model);
    AG_CHECK(loaded.tokenizer.chars() == data.tokenizer.chars(),
             "train --resume: the checkpoint's vocabulary differs from that of '" << data_path << "'");
    model_iter = loaded.iter;
    // The training state's model options decide the step's shapes and FLOPs; the weights', the function.
    Metadata from_weights, from_state;
    write_options(loaded.model->config(), from_weights, {OptionKind::Model}, KeyStyle::Dashed);
    write_options(c.model, from_state, {OptionKind::Model}, KeyStyle::Dashed);
    for (const auto& [key, value] : from_weights)
      AG_CHECK(from_state.at(key) == value, "train --resume: '" << resumed_unit << "': model.safetensors has " << key
                                                                << " = " << value << " but train_state.safetensors "
                                                                << from_state.at(key) << "; cannot continue that run");
    model = std::move(loaded.model);
  } else {
    Generator init(c.optim.seed);
    model = std::make_unique<nn::GPT>(c.model, init);
  }
  model->to(c.run.device);
  model->train();
  optim::AdamW optimizer(optim::decay_groups(model->named_parameters(), c.optim.weight_decay),
                         {c.optim.lr, c.optim.beta1, c.optim.beta2, 1e-8});
  optim::replicate(model->parameters(), comm);
  optim::TrainStep step(optimizer, c.optim,
                        [&](const Tensor& x, const Tensor& y) { return model->loss(x, y, Reduction::Sum); },
                        c.run.device);
  optim::make_data_parallel(step, comm);

  Generator batches(c.optim.seed + 1);  // the same on every process: all draw each whole batch
  manual_seed(optim::replica_seed(c.optim.seed + 4, comm));  // dropout masks draw from the default generator
  int64_t start = 0;
  if (c.run.resume) {
    const TrainState state = restore_train_state(*saved_state, optimizer);
    AG_CHECK(state.iter == model_iter,
             "train --resume: '" << resumed_unit << "' holds weights from iteration " << model_iter
                                 << " but training state from iteration " << state.iter
                                 << " (a crash between the two writes?); cannot continue that run");
    start = state.iter;
    batches.set_state(state.batch_seed, state.batch_offset);
    default_generator().set_state(optim::replica_seed(state.dropout_seed, comm), state.dropout_offset);
  }
  const auto checkpoint = [&](int64_t iter, double val_loss) {
    save_checkpoint(out, iter, val_loss, *model, data.tokenizer,
                    {iter, batches.seed(), batches.offset(), default_generator().seed(), default_generator().offset()}, c,
                    optimizer, c.run.keep_checkpoints);
  };

  const std::string log_path = out + "/log.csv";
  std::ofstream log;
  if (root) {
    if (c.run.resume) truncate_log(log_path, start);
    log.open(log_path, c.run.resume ? std::ios::app : std::ios::trunc);
    AG_CHECK(log, "train: cannot write '" << log_path << "'");
    if (!c.run.resume) log << "iter,kind,loss,lr,ms_per_iter\n";
  }
  const int64_t tokens_per_step = c.optim.batch_size * c.optim.grad_accum * c.model.block_size;
  const double flops_per_step = static_cast<double>(
      nn::training_step_flops(c.model, c.optim.batch_size * c.optim.grad_accum, c.model.block_size));
  if (!c.quiet) {
    std::printf("char_lm: %lld parameters, vocab %lld, %zu train / %zu val tokens from %s\n",
                static_cast<long long>(model->num_parameters()), static_cast<long long>(data.tokenizer.vocab_size()),
                data.train.size(), data.val.size(), data_path.c_str());
    std::printf("%s\n", cli::header(model->config(), c.run.device).c_str());
    for (const std::string& unit : passed_over) std::printf("passing over the incomplete checkpoint %s\n", unit.c_str());
    if (c.run.resume) std::printf("resuming from iteration %lld (%s)\n", static_cast<long long>(start), resumed_unit.c_str());
    else std::printf("writing checkpoints and log.csv to %s/\n", out.c_str());
    std::printf("%lld tokens and %.2f GFLOP per step (batch %lld x %lld micro-batches x %lld tokens)\n",
                static_cast<long long>(tokens_per_step), flops_per_step / 1e9, static_cast<long long>(c.optim.batch_size),
                static_cast<long long>(c.optim.grad_accum), static_cast<long long>(c.model.block_size));
    if (comm.size() > 1)
      std::printf("data-parallel on %d processes (%s): each computes %lld of every batch's %lld sequences\n",
                  comm.size(), comm.describe().c_str(), static_cast<long long>(c.optim.batch_size / comm.size()),
                  static_cast<long long>(c.optim.batch_size));
  }

  TrainResult result;
  std::vector<double> iter_ms, collective_ms;
  std::vector<Tensor> pending_losses;  // on the device until the next log line
  std::deque<double> recent_ms;        // the last iterations' times, for the ETA
  for (int64_t iter = start;; ++iter) {
    // Evaluate and checkpoint at the start of every eval_interval-th iteration
    // and at the end. A resumed run already did it for `start`.
    if ((iter % c.run.eval_interval == 0 || iter == c.run.max_iters) && !(c.run.resume && iter == start)) {
      const EvalRecord e = evaluate(*model, data, c, iter, comm);
      result.evals.push_back(e);
      if (root) log << iter << ",train," << e.train_loss << ",,\n" << iter << ",val," << e.val_loss << ",,\n" << std::flush;
      if (root) write_loss_chart(log_path, out + "/loss.svg");
      if (!c.quiet) std::printf("eval iter %5lld: train loss %.4f, val loss %.4f\n", static_cast<long long>(iter), e.train_loss, e.val_loss);
      step.check_finite();  // a diverged run never saves
      if (root) checkpoint(iter, e.val_loss);
    }
    if (iter >= c.run.max_iters) break;

    const auto t0 = Clock::now();
    std::vector<optim::Batch> micro(c.optim.grad_accum);
    for (optim::Batch& b : micro) {
      get_batch(data.train, c.optim.batch_size, c.model.block_size, batches, b.x, b.y);
      b = {optim::shard(b.x, comm), optim::shard(b.y, comm)};
    }
    const double collective_ms_before = comm.collective_ms();
    const optim::StepResult r = step.run(iter, micro);
    collective_ms.push_back(comm.collective_ms() - collective_ms_before);
    // On the CPU the check is free, so every step; on CUDA it waits for the device, so at log lines and saves.
    if (c.run.device == Device::CPU || c.run.detect_anomaly) step.check_finite(c.run.detect_anomaly ? &micro : nullptr);
    pending_losses.push_back(r.loss.reshape({1}));
    iter_ms.push_back(elapsed_ms(t0));
    recent_ms.push_back(iter_ms.back());
    if (recent_ms.size() > 50) recent_ms.pop_front();

    if (iter % c.run.log_interval == 0 || iter + 1 == c.run.max_iters) {
      step.check_finite();
      collect_losses(pending_losses, result.batch_losses, comm);
      const double ms = std::accumulate(recent_ms.begin(), recent_ms.end(), 0.0) / static_cast<double>(recent_ms.size());
      const double loss = result.batch_losses.back();
      if (root) log << iter << ",batch," << loss << "," << r.lr << "," << ms << "\n";
      if (!c.quiet)
        std::printf("iter %5lld/%lld | loss %.4f | lr %.2e | %6.1f ms/iter | %7.0f tok/s | %6.1f GFLOP/s | ETA %s\n",
                    static_cast<long long>(iter), static_cast<long long>(c.run.max_iters), loss, r.lr, ms,
                    1000.0 * static_cast<double>(tokens_per_step) / ms, flops_per_step / ms / 1e6,
                    duration_text(ms * static_cast<double>(c.run.max_iters - iter - 1) / 1000).c_str());
      std::fflush(stdout);
    }
  }
  collect_losses(pending_losses, result.batch_losses, comm);
  result.ms_per_iter = median(iter_ms);
  result.collective_ms_per_iter = median(collective_ms);
  if (c.run.sample_tokens > 0 && root) {
    SampleOptions sampling;
    sampling.tokens = c.run.sample_tokens;
    sampling.seed = c.optim.seed;
    result.sample = generate(*model, data.tokenizer, "", sampling);
    if (!c.quiet) std::printf("\n--- sample (%lld characters) ---\n%s\n---\n", static_cast<long long>(c.run.sample_tokens), result.sample.c_str());
  }
  return result;
}

}  // namespace ag::char_lm
