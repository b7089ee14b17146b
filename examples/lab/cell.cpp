#include "examples/lab/cell.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <filesystem>
#include <limits>
#include <map>

#include "core/autograd.h"
#include "core/caching_allocator.h"
#include "cuda/context.h"
#include "examples/common/files.h"
#include "examples/common/memory.h"
#include "examples/common/timing.h"
#include "examples/lab/graph_tasks.h"
#include "examples/lab/report.h"
#include "nn/kv_cache.h"
#include "optim/adam.h"

namespace ag::lab {

namespace {
using Clock = std::chrono::steady_clock;
constexpr double kNaN = std::numeric_limits<double>::quiet_NaN();
// The held-out examples' generator: a stream no training batch draws from (Zoology: another seed).
constexpr uint64_t kHeldOutStream = 0x5EED0000;
// The fixed training set's seed (--train-examples), from the run's: its examples' streams are its own.
constexpr uint64_t kTrainSetStream = 0x7A15E700;


// Where a cell's batches come from: the task's generator (fresh examples, or batch k of the
// fixed set), or the text's windows.
class Batches {
 public:
  Batches(const Cell& cell, const TextData* text) : cell_(cell), T_(cell.model.block_size) {
    if (cell.task.task == Task::Text) data_ = text::make_dataset(text->text, T_);
  }
  // Batch k of the run (k counted over its micro-batches), from `gen` unless the set is fixed.
  void train(int64_t k, int64_t B, Generator& gen, Tensor& x, Tensor& y) const {
    if (cell_.budget.train_examples > 0 && cell_.task.task != Task::Text)
      fixed_set_batch(cell_.task, T_, fixed_set(cell_), k, x, y);
    else draw(B, gen, x, y, false);
  }
  void held_out(int64_t B, Generator& gen, Tensor& x, Tensor& y) const { draw(B, gen, x, y, true); }

 private:
  void draw(int64_t B, Generator& gen, Tensor& x, Tensor& y, bool held_out) const {
    if (cell_.task.task == Task::Text) text::get_batch(held_out ? data_.val : data_.train, B, T_, gen, x, y);
    else synthetic_batch(cell_.task, T_, B, gen, x, y);
  }
  const Cell& cell_;
  int64_t T_;
  text::Dataset data_;
};

// A graph task's attention mask for the batch x (examples/lab/graph_tasks.h), read from its tokens.
void set_graph(nn::GPT& model, const Cell& cell, const Tensor& x) {
  if (is_graph_task(cell.task.task)) model.set_adjacency(graph_attention_mask(cell.task, x.to(Device::CPU)));
}

// The held-out score over `examples` examples, in chunks no larger than a
// training batch: scoring then never needs more memory than a training step
// (which holds the same logits and their gradient), so the cell's peak_mb is
// the training's.
Score score(nn::GPT& model, const Batches& batches, const Cell& cell, int64_t examples, Device device) {
  NoGradGuard no_grad;
  model.eval();
  const int64_t T = cell.model.block_size, V = model.config().vocab_size, chunk = cell.optim.batch_size;
  Generator gen(cell.optim.seed + kHeldOutStream);
  int64_t scored = 0, correct = 0;
  double loss = 0;
  for (int64_t first = 0; first < examples; first += chunk) {
    const int64_t B = std::min(chunk, examples - first);
    Tensor x, y;
    batches.held_out(B, gen, x, y);
    set_graph(model, cell, x);
    // The head at the scored positions alone (all of them for text): at V = 8192 a chunk's
    // full logits [B, T, V] would be far the largest tensor of the run.
    const std::vector<int64_t> all = y.to_indices();
    std::vector<int64_t> rows, targets;
    for (int64_t row = 0; row < B * T; ++row)
      if (all[row] != kIgnore) rows.push_back(row), targets.push_back(all[row]);
    const int64_t n = static_cast<int64_t>(rows.size());
    const Tensor logits = model.logits_at(x.to(device), rows).to(Device::CPU);  // [n, V], float32
    // The chunk's cross-entropy summed over its scored positions: the training step's loss op.
    loss += cross_entropy(logits, Tensor::from_indices(targets, {n}), kIgnore, Reduction::Sum).item();
    const float* values = logits.data<float>();
    for (int64_t i = 0; i < n; ++i) {
      const float *begin = values + i * V, *end = begin + V;
      correct += std::max_element(begin, end) - begin == targets[i];
      ++scored;
    }
  }
  model.train();
  return {static_cast<double>(correct) / static_cast<double>(scored), loss / static_cast<double>(scored)};
}

// The training step's schedule, fitted to the run whatever its length and
// rate: warmup over its first budget.warmup, the cosine decay to lr·final_lr at its end.
optim::TrainOptions run_schedule(const Cell& cell, double lr) {
  const Budget& budget = cell.budget;
  optim::TrainOptions o = cell.optim;
  o.lr = lr;
  o.min_lr = lr * budget.final_lr;
  o.warmup_iters = static_cast<int64_t>(budget.warmup * static_cast<double>(run_steps(cell)));
  o.lr_decay_iters = run_steps(cell);
  return o;
}
}  // namespace

FixedSet fixed_set(const Cell& cell) {
  return {.seed = cell.optim.seed + kTrainSetStream, .examples = cell.budget.train_examples, .batch = cell.optim.batch_size};
}

int64_t run_steps(const Cell& cell) {
  const Budget& b = cell.budget;
  if (b.epochs == 0 || b.train_examples == 0) return b.max_iters;
  const int64_t batches = b.epochs * fixed_set(cell).batches_per_epoch();
  return (batches + cell.optim.grad_accum - 1) / cell.optim.grad_accum;
}

std::string curve_csv(const std::vector<CurvePoint>& curve) {
  const size_t every = std::max<size_t>(1, curve.size() / 500);
  std::string text = "seconds,step,loss,accuracy\n";
  for (size_t i = 0; i < curve.size(); ++i) {
    const CurvePoint& p = curve[i];
    if (i % every != 0 && std::isnan(p.accuracy) && i + 1 != curve.size()) continue;
    text += option_to_string(p.seconds) + "," + std::to_string(p.step) + "," + option_to_string(p.loss) + "," +
            (std::isnan(p.accuracy) ? "" : option_to_string(p.accuracy)) + "\n";
  }
  return text;
}

namespace {
// A finished run kept for a cell that resumes (RunSettings::runs_dir), as name=value lines: its
// numbers at full precision, and for a run that diverged the reason.
std::string run_text(const RunResult& r, const std::string& diverged) {
  std::string reason = diverged;
  std::replace(reason.begin(), reason.end(), '\n', ' ');
  return "lr=" + option_to_string(r.lr) + "\nsteps=" + std::to_string(r.steps) + "\naccuracy=" +
         option_to_string(r.score.accuracy) + "\nloss=" + option_to_string(r.score.loss) + "\nms_per_iter=" +
         option_to_string(r.ms_per_iter) + "\ntokens_per_s=" + option_to_string(r.tokens_per_s) + "\npeak_mb=" +
         option_to_string(r.peak_mb) + "\nseconds=" + option_to_string(r.seconds) + "\nwall_seconds=" +
         option_to_string(r.wall_seconds) + "\ndiverged=" + reason + "\n";
}

// run_text's run read back; `diverged` gets its reason ("" for a run that finished).
RunResult parse_run(const std::string& text, std::string& diverged) {
  std::map<std::string, std::string> values;
  size_t start = 0;
  for (size_t end; (end = text.find('\n', start)) != std::string::npos; start = end + 1) {
    const std::string line = text.substr(start, end - start);
    const size_t equals = line.find('=');
    if (equals != std::string::npos) values[line.substr(0, equals)] = line.substr(equals + 1);
  }
  const auto number = [&](const char* name) {
    AG_CHECK(values.count(name), "a kept run has no '" << name << "'");
    return option_from_string<double>(values.at(name), name);
  };
  RunResult r;
  r.lr = number("lr");
  r.steps = static_cast<int64_t>(number("steps"));
  r.score = {number("accuracy"), number("loss")};
  r.ms_per_iter = number("ms_per_iter");
  r.tokens_per_s = number("tokens_per_s");
  r.peak_mb = number("peak_mb");
  r.seconds = number("seconds");
  r.wall_seconds = number("wall_seconds");
  diverged = values["diverged"];
  return r;
}
}  // namespace

nn::GPTConfig cell_model(const Cell& cell, const TextData* text) {
  nn::GPTConfig model = cell.model;
  if (is_graph_task(cell.task.task)) {
    model.vocab_size = kGraphVocab;
  } else if (cell.task.task != Task::Text) {
    model.vocab_size = cell.task.vocab;
  } else {
    AG_CHECK(text, "the text task needs a text (--data)");
    model.vocab_size = text::Tokenizer::from_text(text->text).vocab_size();
  }
  return model;
}

void check_cell(const Cell& cell, const TextData* text) {
  cell_model(cell, text).check();
  check_task(cell.task, cell.model.block_size);
  AG_CHECK(cell.budget.train_examples == 0 || cell.task.task != Task::Text,
           "--train-examples: the text task trains on the text's windows, not on a set of examples");
  AG_CHECK(cell.budget.epochs == 0 || cell.budget.train_examples > 0, "--epochs " << cell.budget.epochs
                                                                              << " needs --train-examples (a set to pass over)");
}

int64_t state_floats(const nn::GPTConfig& config) {
  // The function's state, not the position table's limit: a learned table stops
  // a decoder at block_size, so attograd's cache of such a model never rolls, but
  // a windowed one needs only its window's keys and values all the same, which
  // is what each layer's mixer says (Mixer::state_floats, a rolling cache's).
  Generator init(0);
  nn::GPT model(config, init);
  int64_t floats = 0;
  for (int64_t l = 0; l < config.n_layer; ++l) floats += model.block(l).attn().state_floats(config.block_size);
  return floats;
}

RunResult train_run(const Cell& cell, double lr, const RunSettings& settings, const TextData* text, const StepReport& report) {
  // The runs before this one in the process left their blocks in the host
  // allocator's cache: resident, and reused by this run without a new page. Freed
  // first, they leave the baseline, and peak_mb counts every byte of this run.
  // On CUDA the device's allocator, emptied the same way, holds at the end the
  // most it held: it keeps every block it was given until emptied again.
  const auto run_start = Clock::now();
  host_empty_cache();
  cuda::empty_cache();
  return_freed_memory_to_the_system();
  const PeakMemory peak;
  const Batches batches(cell, text);
  const optim::TrainOptions options = run_schedule(cell, lr);
  const Budget& budget = cell.budget;
  Generator init(options.seed);
  nn::GPT model(cell_model(cell, text), init);
  model.to(settings.device);
  model.train();
  optim::AdamW optimizer(optim::decay_groups(model.named_parameters(), options.weight_decay),
                         {options.lr, options.beta1, options.beta2, 1e-8});
  optim::TrainStep step(optimizer, options,
                        [&](const Tensor& x, const Tensor& y, std::span<const int64_t> y_host) {
                          set_graph(model, cell, x);
                          return model.loss(x, y, Reduction::Sum, kIgnore, y_host);
                        },
                        settings.device, kIgnore);
  if (is_graph_task(cell.task.task))
    step.disable_cuda_graph("a graph task (each batch's attention mask is made on the host)");
  Generator draws(options.seed + 1);
  RunResult result;
  result.lr = lr;
  std::vector<double> step_ms;
  double accuracy = kNaN;
  const int64_t steps = run_steps(cell);
  for (int64_t iter = 0; iter < steps; ++iter) {
    if (budget.max_seconds > 0 && result.seconds >= budget.max_seconds) break;
    if (budget.stop_accuracy > 0 && accuracy > budget.stop_accuracy) break;  // Zoology's early stopping
    const auto t0 = Clock::now();
    std::vector<optim::Batch> micro(options.grad_accum);
    for (int64_t m = 0; m < options.grad_accum; ++m)  // the step moves them
      batches.train(iter * options.grad_accum + m, options.batch_size, draws, micro[m].x, micro[m].y);
    const optim::StepResult r = step.run(iter, micro);
    step.check_finite();
    step_ms.push_back(std::chrono::duration<double, std::milli>(Clock::now() - t0).count());
    result.seconds += step_ms.back() / 1000;
    result.steps = iter + 1;
    const bool evaluate = (iter + 1) % settings.eval_interval == 0;
    if (evaluate) accuracy = score(model, batches, cell, std::min<int64_t>(budget.eval_examples, 200), settings.device).accuracy;
    result.curve.push_back({result.seconds, iter + 1, r.loss.item(), evaluate ? accuracy : kNaN});
    if (report) report(iter + 1, result.curve.back().loss, accuracy);
  }
  result.score = score(model, batches, cell, budget.eval_examples, settings.device);
  result.ms_per_iter = median(step_ms);
  result.tokens_per_s = 1000.0 * static_cast<double>(options.batch_size * options.grad_accum * cell.model.block_size) /
                        result.ms_per_iter;
  const MemoryStats held = cuda::memory_stats();
  result.peak_mb = settings.device == Device::CUDA ? static_cast<double>(held.in_use_bytes + held.cached_bytes) / (1 << 20)
                                                 : peak.extra_mb();
  result.wall_seconds = std::chrono::duration<double>(Clock::now() - run_start).count();
  return result;
}

namespace {
// A cell's row before it trains: what it is (the task, the mixer and their options).
Row cell_row(const Cell& cell) {
  Row row;
  row["task"] = name_of(cell.task.task);
  row["mixer"] = cell.mixer;
  for (const char* option : {"block_size", "n_embd", "n_head", "n_layer", "seed"}) row[option] = get_option(cell, option);
  row["n_kv_head"] = std::to_string(cell.model.kv_heads());
  switch (cell.task.task) {
    case Task::Mqar: row["pairs"] = get_option(cell, "pairs"), row["vocab"] = get_option(cell, "vocab"); break;
    case Task::Passkey: row["depth"] = get_option(cell, "depth"), row["digits"] = get_option(cell, "digits"),
                        row["vocab"] = get_option(cell, "vocab"); break;
    case Task::Copy: row["copy_tokens"] = get_option(cell, "copy_tokens"), row["vocab"] = get_option(cell, "vocab"); break;
    case Task::Text: break;
    case Task::Connectivity:
    case Task::ShortestPath:
      for (const char* option : {"graph_mask", "min_nodes", "nodes", "max_distance"}) row[option] = get_option(cell, option);
      break;
  }
  row["cell"] = cell.label();
  return row;
}

// The best run's numbers into the row.
void fill_row(Row& row, const RunResult& best) {
  const auto fixed = [](double v, const char* format) {
    char buffer[32];
    std::snprintf(buffer, sizeof buffer, format, v);
    return std::string(buffer);
  };
  row["lr"] = option_to_string(best.lr);
  row["steps"] = std::to_string(best.steps);
  row["accuracy"] = fixed(best.score.accuracy, "%.4f");
  row["loss"] = fixed(best.score.loss, "%.4f");
  row["ms_per_iter"] = fixed(best.ms_per_iter, "%.2f");
  row["tokens_per_s"] = fixed(best.tokens_per_s, "%.0f");
  row["peak_mb"] = fixed(best.peak_mb, "%.1f");
  row["seconds"] = fixed(best.seconds, "%.1f");
}
}  // namespace

CellResult run_cell(const Cell& cell, const RunSettings& settings, const TextData* text,
                    const std::function<void(double lr, int64_t step, double loss, double accuracy)>& report) {
  CellResult out;
  Row& row = out.row;
  row = cell_row(cell);
  try {
    check_cell(cell, text);
  } catch (const Error& e) {
    row["status"] = "refused";
    row["reason"] = e.what();
    return out;
  }
  const nn::GPTConfig model = cell_model(cell, text);
  {
    Generator init(0);
    row["params"] = std::to_string(nn::GPT(model, init).num_parameters());
  }
  row["state_floats"] = std::to_string(state_floats(model));
  double cell_seconds = 0;  // every run's wall time, those of an earlier process (resumed) too
  std::optional<RunResult> best;
  std::string diverged;
  const std::string kept = settings.runs_dir.empty() ? "" : settings.runs_dir + "/" + cell.id() + ".run";
  for (size_t k = 0; k < cell.lrs.size(); ++k) {
    const double lr = cell.lrs[k];
    try {
      const std::string run_file = kept + std::to_string(k) + ".txt", curve_file = kept + std::to_string(k) + ".curve.csv";
      RunResult r;
      std::string was_diverged;
      if (!kept.empty() && std::filesystem::exists(run_file)) {  // finished before this process: resumed
        r = parse_run(text::read_text(run_file), was_diverged);
        if (std::filesystem::exists(curve_file)) r.curve = parse_curve(text::read_text(curve_file));
        cell_seconds += r.wall_seconds;
        if (!was_diverged.empty()) throw optim::Diverged(was_diverged);
      } else {
        try {
          r = train_run(cell, lr, settings, text, [&](int64_t step, double loss, double accuracy) {
            if (report) report(lr, step, loss, accuracy);
          });
        } catch (const optim::Diverged& e) {
          RunResult diverged_run;
          diverged_run.lr = lr;
          if (!kept.empty()) replace_file(run_file, run_text(diverged_run, e.what()));
          throw;
        }
        cell_seconds += r.wall_seconds;
        if (!kept.empty()) {
          replace_file(curve_file, curve_csv(r.curve));
          replace_file(run_file, run_text(r, ""));  // last: its presence marks the run finished
        }
      }
      const bool better = !best || (cell.task.task == Task::Text
                                        ? r.score.loss < best->score.loss
                                        : std::make_pair(r.score.accuracy, -r.score.loss) >
                                              std::make_pair(best->score.accuracy, -best->score.loss));
      if (better) best = std::move(r);
    } catch (const optim::Diverged& e) {
      diverged = "lr " + option_to_string(lr) + ": " + e.what();
    }
  }
  if (!best) {
    row["status"] = "diverged";
    row["reason"] = diverged;
    return out;
  }
  row["status"] = "ok";
  if (!diverged.empty()) row["reason"] = "diverged at " + diverged;
  fill_row(row, *best);
  row["device"] = name_of(settings.device);
  char seconds[32];
  std::snprintf(seconds, sizeof seconds, "%.1f", cell_seconds);
  row["cell_seconds"] = seconds;
  out.curve = std::move(best->curve);
  return out;
}

}  // namespace ag::lab
