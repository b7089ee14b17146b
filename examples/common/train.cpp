#include "examples/common/train.h"

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
#include "examples/common/checkpoint.h"
#include "examples/common/text_data.h"
#include "examples/common/sample.h"
#include "examples/common/loss_log.h"
#include "examples/common/program_header.h"
#include "examples/common/timing.h"
#include "optim/adam.h"
#include "optim/data_parallel.h"

namespace ag::char_lm {

void TrainConfig::check() const {
  model.check();
  optim.check();
  check_option_ranges(run);
  optim::check_precision(optim.precision, run.device);
}

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

// Checks every option and their relations, before anything is written; on
// --resume a value the run's checkpoint holds is blamed on it (check_resumed_options).
// The process grid's checks too (optim::ProcessGrid), before any collective, so
// that every process of a run that cannot start says why and ends.
void check_options(const TrainConfig& c, const dist::Communicator& comm, const std::optional<ResumedOptions>& resumed) {
  if (resumed) check_resumed_options(c, *resumed);
  else c.check();
  const int64_t P = c.run.context_parallel;
  optim::ProcessGrid::check(comm.size(), P, c.optim.batch_size, c.model.block_size);
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

}  // namespace

// The batches come from a generator of their own, the same at every
// evaluation: evaluating never moves the training stream (so a resumed run
// draws the same batches) and every evaluation scores the same windows. Each
// process scores its shard of every batch; the shards are equal, so the mean of
// their means is the batches' mean.
EvalRecord evaluate(nn::GPT& model, const text::Dataset& data, const TrainConfig& c, int64_t iter,
                    const optim::ProcessGrid& grid) {
  NoGradGuard no_grad;
  model.eval();
  // Context-parallel, a window must split into 2P chunks: a validation split shorter than a block
  // is scored on windows cut down to that.
  const int64_t split_into = grid.ring() ? 2 * grid.context_parallel() : 1;
  const int64_t window = data.eval_window - data.eval_window % split_into;
  auto mean_loss = [&](const text::TokenIds& tokens, uint64_t stream) {
    Generator gen(c.optim.seed + stream);
    Tensor total;
    Tensor x, y;
    for (int64_t i = 0; i < c.run.eval_iters; ++i) {
      text::get_batch(tokens, c.optim.batch_size, window, gen, x, y);
      const Tensor loss = model.loss(grid.part(x).to(c.run.device), grid.part(y).to(c.run.device));
      total = total.defined() ? add(total, loss) : loss;
    }
    grid.world().all_reduce_sum(total);
    return total.item() / static_cast<double>(c.run.eval_iters * grid.world().size());  // one wait for the device
  };
  EvalRecord record{iter, mean_loss(data.train, 2), mean_loss(data.val, 3)};
  model.train();
  return record;
}

namespace {
// --- resume: what a run starts from ----------------------------------------------------------

// A run's inputs, read and checked before anything is written: the text, and on
// --resume the checkpoint it continues.
struct RunInputs {
  std::string data_path;
  text::Dataset data;
  Metadata description;                        // what every process must agree on (run_description)
  std::string resumed_unit;                    // on --resume: the checkpoint it continues from,
  std::optional<SafetensorsFile> saved_state;  // its training state,
  std::vector<std::string> passed_over;        // and the incomplete checkpoints passed over for it
};

// The options (on --resume merged with the run's own) and the text, all
// checked before --out is touched.
RunInputs read_inputs(TrainConfig& c, const dist::Communicator& comm) {
  RunInputs in;
  std::optional<ResumedOptions> resumed;
  if (c.run.resume) {
    in.resumed_unit = find_checkpoint(c.run.out, &in.passed_over);
    in.saved_state = load_train_state(train_state_path(in.resumed_unit));
    resumed = resume_options(c, *in.saved_state);
  }
  in.data_path = text::resolve_data_path(c.run.data);
  const std::string text = text::read_text(in.data_path);
  in.data = text::make_dataset(text, c.model.block_size);
  c.model.vocab_size = in.data.tokenizer.vocab_size();
  c.run.data = in.data_path;  // remembered with the run, so --resume finds the text without --data
  check_options(c, comm, resumed);
  if (!c.run.resume) check_output_directory("train", c.run.out, OutputKind::Run, c.run.overwrite, "--resume to continue it, ");
  in.description = run_description(c, text, in.saved_state);
  return in;
}

// Makes --out ready (rank 0 writes it), then runs the first collectives: every
// process checks it trains the same run, then binds its GPU.
void prepare_output(const TrainConfig& c, const RunInputs& in, dist::Communicator& comm) {
  const std::string& out = c.run.out;
  if (comm.rank() == 0) {
    std::error_code error;
    std::filesystem::create_directories(out, error);
    AG_CHECK(!error, "train: cannot create the output directory '" << out << "': " << error.message());
    remove_stale_temporaries(out);
    if (!c.run.resume && c.run.overwrite) clear_run(out);
  }
  // Checked after the temporaries are gone: a run killed while writing its last unit is complete, and this
  // is the call that tidies it.
  if (c.run.resume) {
    const int64_t saved_iter = train_state_iter(*in.saved_state);
    AG_CHECK(c.run.max_iters > saved_iter,
             "train --resume: the run's checkpoint '" << in.resumed_unit << "' is at iteration " << saved_iter
                                                       << " already, and --max-iters " << c.run.max_iters
                                                       << " is not past it: nothing to train (give a larger --max-iters "
                                                          "to continue it)");
  }
  dist::check_same_on_every_process(comm, in.description, "train");
  comm.use_device(c.run.device);
}

// The model: fresh from the seed, or the checkpoint's weights on --resume
// (with the iteration they were saved at).
LoadedModel initial_model(const TrainConfig& c, const RunInputs& in) {
  if (!c.run.resume) {
    Generator init(c.optim.seed);
    LoadedModel fresh;
    fresh.model = std::make_unique<nn::GPT>(c.model, init);
    return fresh;
  }
  LoadedModel loaded = load_model(model_path(in.resumed_unit), DType::Float32, c.model);
  AG_CHECK(loaded.tokenizer.chars() == in.data.tokenizer.chars(),
           "train --resume: the checkpoint's vocabulary differs from that of '" << in.data_path << "'");
  // The training state's model options decide the step's shapes and FLOPs; the weights', the function.
  Metadata from_weights, from_state;
  write_options(loaded.model->config(), from_weights, {OptionKind::Model}, KeyStyle::Dashed);
  write_options(c.model, from_state, {OptionKind::Model}, KeyStyle::Dashed);
  for (const auto& [key, value] : from_weights)
    AG_CHECK(from_state.at(key) == value, "train --resume: '" << in.resumed_unit << "': model.safetensors has " << key
                                                              << " = " << value << " but train_state.safetensors "
                                                              << from_state.at(key) << "; cannot continue that run");
  return loaded;
}

// --- evaluation and logging: log.csv, loss.svg and the progress lines -------------------------

// What a run reports: log.csv and loss.svg in --out (rank 0), and the
// progress lines on stdout (unless quiet).
class Progress {
 public:
  // cuda_graph: the step's cuda_graph_status(), for the header on CUDA.
  Progress(const TrainConfig& c, const RunInputs& in, int64_t start, const nn::GPT& model, const std::string& cuda_graph,
           const optim::ProcessGrid& grid);
  // An evaluation: its two log rows, the chart redrawn, its line.
  void evaluated(const EvalRecord& e);
  // How long a step took; the ETA is from the mean of the last 50.
  void step_took(double ms);
  // A log line's step: its row and its line, with the speed and the ETA.
  void logged(int64_t iter, double loss, double lr);

 private:
  void print_start(const RunInputs& in, int64_t start, const nn::GPT& model, const std::string& cuda_graph,
                   const optim::ProcessGrid& grid) const;

  const TrainConfig& c_;
  const bool root_;
  const std::string log_path_;
  std::ofstream log_;  // rank 0's
  const int64_t tokens_per_step_;
  const double flops_per_step_;
  std::deque<double> recent_ms_;  // the last steps' times, for the ETA
};

Progress::Progress(const TrainConfig& c, const RunInputs& in, int64_t start, const nn::GPT& model,
                   const std::string& cuda_graph, const optim::ProcessGrid& grid)
    : c_(c), root_(grid.world().rank() == 0), log_path_(c.run.out + "/log.csv"),
      tokens_per_step_(c.optim.batch_size * c.optim.grad_accum * c.model.block_size),
      flops_per_step_(static_cast<double>(
          nn::training_step_flops(c.model, c.optim.batch_size * c.optim.grad_accum, c.model.block_size))) {
  if (root_) {
    if (c.run.resume) truncate_log(log_path_, start);
    log_.open(log_path_, c.run.resume ? std::ios::app : std::ios::trunc);
    AG_CHECK(log_, "train: cannot write '" << log_path_ << "'");
    if (!c.run.resume) log_ << "iter,kind,loss,lr,ms_per_iter\n";
  }
  if (!c.quiet) print_start(in, start, model, cuda_graph, grid);
}

void Progress::print_start(const RunInputs& in, int64_t start, const nn::GPT& model, const std::string& cuda_graph,
                           const optim::ProcessGrid& grid) const {
  std::printf("char_lm: %lld parameters, vocab %lld, %zu train / %zu val tokens from %s\n",
              static_cast<long long>(model.num_parameters()), static_cast<long long>(in.data.tokenizer.vocab_size()),
              in.data.train.size(), in.data.val.size(), in.data_path.c_str());
  std::printf("%s\n", cli::header(model.config(), c_.run.device, c_.optim.precision).c_str());
  if (c_.run.device == Device::CUDA) std::printf("cuda graph: %s\n", cuda_graph.c_str());
  for (const std::string& unit : in.passed_over) std::printf("passing over the incomplete checkpoint %s\n", unit.c_str());
  if (c_.run.resume) std::printf("resuming from iteration %lld (%s)\n", static_cast<long long>(start), in.resumed_unit.c_str());
  else std::printf("writing checkpoints and log.csv to %s/\n", c_.run.out.c_str());
  std::printf("%lld tokens and %.2f GFLOP per step (batch %lld x %lld micro-batches x %lld tokens)\n",
              static_cast<long long>(tokens_per_step_), flops_per_step_ / 1e9, static_cast<long long>(c_.optim.batch_size),
              static_cast<long long>(c_.optim.grad_accum), static_cast<long long>(c_.model.block_size));
  if (in.data.eval_window < c_.model.block_size)
    std::printf("evaluating on windows of %lld tokens: the validation split is shorter than a block\n",
                static_cast<long long>(in.data.eval_window));
  const dist::Communicator& comm = grid.world();
  if (grid.ring())
    std::printf("%d processes (%s) as %s: each computes %lld of every batch's %lld sequences, %lld of each one's "
                "%lld positions (%s)\n",
                comm.size(), comm.describe().c_str(), grid.describe().c_str(),
                static_cast<long long>(c_.optim.batch_size / grid.data().size()), static_cast<long long>(c_.optim.batch_size),
                static_cast<long long>(c_.model.block_size / grid.context_parallel()),
                static_cast<long long>(c_.model.block_size),
                c_.model.attention == AttentionFunction::Softmax ? "ring attention" : "chunk states gathered over the group");
  else if (comm.size() > 1)
    std::printf("data-parallel on %d processes (%s): each computes %lld of every batch's %lld sequences\n",
                comm.size(), comm.describe().c_str(), static_cast<long long>(c_.optim.batch_size / comm.size()),
                static_cast<long long>(c_.optim.batch_size));
}

void Progress::evaluated(const EvalRecord& e) {
  if (root_) log_ << e.iter << ",train," << e.train_loss << ",,\n" << e.iter << ",val," << e.val_loss << ",,\n" << std::flush;
  if (root_) write_loss_chart(log_path_, c_.run.out + "/loss.svg");
  if (!c_.quiet) std::printf("eval iter %5lld: train loss %.4f, val loss %.4f\n", static_cast<long long>(e.iter), e.train_loss, e.val_loss);
}

void Progress::step_took(double ms) {
  recent_ms_.push_back(ms);
  if (recent_ms_.size() > 50) recent_ms_.pop_front();
}

void Progress::logged(int64_t iter, double loss, double lr) {
  const double ms = std::accumulate(recent_ms_.begin(), recent_ms_.end(), 0.0) / static_cast<double>(recent_ms_.size());
  if (root_) log_ << iter << ",batch," << loss << "," << lr << "," << ms << "\n";
  if (!c_.quiet)
    std::printf("iter %5lld/%lld | loss %.4f | lr %.2e | %6.1f ms/iter | %7.0f tok/s | %6.1f GFLOP/s | ETA %s\n",
                static_cast<long long>(iter), static_cast<long long>(c_.run.max_iters), loss, lr, ms,
                1000.0 * static_cast<double>(tokens_per_step_) / ms, flops_per_step_ / ms / 1e6,
                duration_text(ms * static_cast<double>(c_.run.max_iters - iter - 1) / 1000).c_str());
  std::fflush(stdout);
}

// --- the loop and checkpointing ---------------------------------------------------------------

// What the loop changes and a checkpoint saves: the model, its optimiser and
// training step (data-parallel over the processes), the training batches'
// generator, and the default generator (dropout masks).
class Trainer {
 public:
  Trainer(const TrainConfig& c, const text::Dataset& data, std::unique_ptr<nn::GPT> model, const optim::ProcessGrid& grid);
  Trainer(const Trainer&) = delete;  // the step's loss points into it
  Trainer& operator=(const Trainer&) = delete;

  // --resume: the optimiser and the generators as the checkpoint saved them,
  // after checking its weights (from `model_iter`) match. Returns the iteration to start from.
  int64_t resume(const RunInputs& in, int64_t model_iter);
  // Iterations [start, max_iters), evaluating and checkpointing on the way.
  TrainResult run(int64_t start, Progress& progress);
  nn::GPT& model() { return *model_; }
  const optim::TrainStep& step() const { return step_; }

 private:
  EvalRecord evaluate_and_checkpoint(int64_t iter, Progress& progress);
  void checkpoint(int64_t iter, double val_loss) const;  // rank 0
  std::vector<optim::Batch> draw_step_batches();         // this process's shards of the step's micro-batches

  const TrainConfig& c_;
  const text::Dataset& data_;
  const optim::ProcessGrid& grid_;
  dist::Communicator& comm_;  // grid_.world
  std::unique_ptr<nn::GPT> model_;  // on the run's device, in training mode
  optim::AdamW optimizer_;
  optim::TrainStep step_;
  Generator batches_;  // the same on every process: all draw each whole batch
  std::vector<int64_t> separator_;  // --documents: the separator's ids, or empty
};

std::unique_ptr<nn::GPT> ready_to_train(std::unique_ptr<nn::GPT> model, Device device) {
  model->to(device);
  model->train();
  return model;
}

Trainer::Trainer(const TrainConfig& c, const text::Dataset& data, std::unique_ptr<nn::GPT> model,
                 const optim::ProcessGrid& grid)
    : c_(c), data_(data), grid_(grid), comm_(grid.world()), model_(ready_to_train(std::move(model), c.run.device)),
      optimizer_(optim::decay_groups(model_->named_parameters(), c.optim.weight_decay),
                 {c.optim.lr, c.optim.beta1, c.optim.beta2, 1e-8}),
      step_(optimizer_, c.optim, [this](const Tensor& x, const Tensor& y, std::span<const int64_t> y_host) {
              if (separator_.empty()) return model_->loss(x, y, Reduction::Sum, -100, y_host);
              // --documents: the window's document mask for this forward only (the backward keeps what it reads)
              model_->set_documents(text::document_ids(x, separator_).to(x.device()));
              const Tensor loss = model_->loss(x, y, Reduction::Sum, -100, y_host);
              model_->set_documents(Tensor());
              return loss;
            },
            c.run.device),
      batches_(c.optim.seed + 1),
      separator_(text::separator_ids(c.run.documents, data.tokenizer, data.train, c.model.block_size)) {
  optim::replicate(model_->parameters(), comm_);
  optim::make_data_parallel(step_, comm_);  // over all N processes: each holds its positions' loss terms
  if (!separator_.empty()) step_.disable_cuda_graph("--documents (each batch's document mask is made on the host)");
  if (grid.ring()) step_.disable_cuda_graph("--context-parallel (ring attention's exchanges are driven from the host)");
  manual_seed(optim::replica_seed(c.optim.seed + 4, comm_));  // dropout masks draw from the default generator
  model_->set_context_parallel(grid.ring());
}

int64_t Trainer::resume(const RunInputs& in, int64_t model_iter) {
  const TrainState state = restore_train_state(*in.saved_state, optimizer_);
  AG_CHECK(state.iter == model_iter,
           "train --resume: '" << in.resumed_unit << "' holds weights from iteration " << model_iter
                               << " but training state from iteration " << state.iter
                               << " (a crash between the two writes?); cannot continue that run");
  batches_.set_state(state.batch_seed, state.batch_offset);
  default_generator().set_state(optim::replica_seed(state.dropout_seed, comm_), state.dropout_offset);
  return state.iter;
}

TrainResult Trainer::run(int64_t start, Progress& progress) {
  TrainResult result;
  std::vector<double> iter_ms, collective_ms;
  std::vector<Tensor> pending_losses;  // on the device until the next log line
  for (int64_t iter = start;; ++iter) {
    // Evaluate and checkpoint at the start of every eval_interval-th iteration
    // and at the end. A resumed run already did it for `start`.
    if ((iter % c_.run.eval_interval == 0 || iter == c_.run.max_iters) && !(c_.run.resume && iter == start))
      result.evals.push_back(evaluate_and_checkpoint(iter, progress));
    if (iter >= c_.run.max_iters) break;

    const auto t0 = Clock::now();
    const std::vector<optim::Batch> micro = draw_step_batches();
    const double collective_ms_before = comm_.collective_ms();
    const optim::StepResult r = step_.run(iter, micro);
    collective_ms.push_back(comm_.collective_ms() - collective_ms_before);
    // On the CPU the check is free, so every step; on CUDA it waits for the device, so at log lines and saves.
    if (c_.run.device == Device::CPU || c_.run.detect_anomaly) step_.check_finite(c_.run.detect_anomaly ? &micro : nullptr);
    pending_losses.push_back(r.loss.reshape({1}));
    iter_ms.push_back(elapsed_ms(t0));
    progress.step_took(iter_ms.back());

    if (iter % c_.run.log_interval == 0 || iter + 1 == c_.run.max_iters) {
      step_.check_finite();
      collect_losses(pending_losses, result.batch_losses, comm_);
      progress.logged(iter, result.batch_losses.back(), r.lr);
    }
  }
  collect_losses(pending_losses, result.batch_losses, comm_);
  // The steps after the first 10 when more than 20 ran (the first ones warm the allocator, cuBLAS and the
  // caches), as bench/torch_char_lm.py times PyTorch's.
  const std::vector<double> steady(iter_ms.begin() + (iter_ms.size() > 20 ? 10 : 0), iter_ms.end());
  result.ms_per_iter = median(steady);
  result.collective_ms_per_iter = median(collective_ms);
  return result;
}

std::vector<optim::Batch> Trainer::draw_step_batches() {
  std::vector<optim::Batch> micro(c_.optim.grad_accum);
  for (optim::Batch& b : micro) {
    text::get_batch(data_.train, c_.optim.batch_size, c_.model.block_size, batches_, b.x, b.y);
    b = {grid_.part(b.x), grid_.part(b.y)};
  }
  return micro;
}

EvalRecord Trainer::evaluate_and_checkpoint(int64_t iter, Progress& progress) {
  const EvalRecord e = evaluate(*model_, data_, c_, iter, grid_);
  progress.evaluated(e);
  step_.check_finite();  // a diverged run never saves
  if (comm_.rank() == 0) checkpoint(iter, e.val_loss);
  return e;
}

void Trainer::checkpoint(int64_t iter, double val_loss) const {
  save_checkpoint(c_.run.out, iter, val_loss, *model_, data_.tokenizer,
                  {iter, batches_.seed(), batches_.offset(), default_generator().seed(), default_generator().offset()},
                  c_, optimizer_, c_.run.keep_checkpoints);
}
}  // namespace

// The parts in order: the inputs (on --resume, the run's options and
// checkpoint), --out, the model and its step, the log, the loop, the sample.
TrainResult train(TrainConfig c) {
  // Data-parallel when an MPI launcher started several processes (optim/data_parallel.h).
  dist::Communicator& comm = dist::world();
  const bool root = comm.rank() == 0;  // only rank 0 prints, logs and writes checkpoints
  if (!root) c.quiet = true;

  const RunInputs in = read_inputs(c, comm);
  prepare_output(c, in, comm);
  LoadedModel initial = initial_model(c, in);
  const optim::ProcessGrid grid(comm, c.run.context_parallel);
  Trainer trainer(c, in.data, std::move(initial.model), grid);
  const int64_t start = c.run.resume ? trainer.resume(in, initial.iter) : 0;
  Progress progress(c, in, start, trainer.model(), trainer.step().cuda_graph_status(), grid);
  TrainResult result = trainer.run(start, progress);
  trainer.model().set_context_parallel(nullptr);  // rank 0 samples alone

  if (c.run.sample_tokens > 0 && root) {
    SampleOptions sampling;
    sampling.tokens = c.run.sample_tokens;
    sampling.seed = c.optim.seed;
    sampling.max_context = sampling.tokens + 1;  // a model that reads past block_size gives the whole sample (after its start token)
    result.sample = generate(trainer.model(), in.data.tokenizer, "", sampling);
    if (!c.quiet) std::printf("\n--- sample (%lld characters) ---\n%s\n---\n", static_cast<long long>(c.run.sample_tokens), result.sample.c_str());
  }
  return result;
}

}  // namespace ag::char_lm
