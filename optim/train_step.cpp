#include "optim/train_step.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <sstream>

#include "core/autograd.h"
#include "core/counter_shifts.h"
#include "core/dispatch.h"
#include "core/ops.h"
#include "core/profiler.h"
#include "cuda/context.h"
#include "cuda/graph.h"
#include "optim/clip_grad.h"
#include "optim/schedule.h"

namespace ag::optim {

namespace {
// The targets of every micro-batch, read on the host once: the step counts the
// scored ones from them and hands them to the loss.
std::vector<std::vector<int64_t>> read_targets(const std::vector<Batch>& micro_batches) {
  std::vector<std::vector<int64_t>> y_host;
  for (const Batch& b : micro_batches) {
    AG_CHECK(b.y.device() == Device::CPU, "TrainStep: targets must come from the host, got " << describe(b.y));
    y_host.push_back(b.y.to_indices());
  }
  return y_host;
}
}  // namespace

void TrainOptions::check() const {
  check_option_ranges(*this);
  AG_CHECK_OPTIONS(warmup_iters < lr_decay_iters, "--warmup-iters (" << warmup_iters << ") must be below --lr-decay-iters ("
                                                                     << lr_decay_iters << ")",
                   "warmup_iters", "lr_decay_iters");
  AG_CHECK_OPTIONS(min_lr <= lr, "--min-lr (" << min_lr << ") must not exceed --lr (" << lr << ")", "min_lr", "lr");
}

void check_precision(Precision precision, Device device) {
  AG_CHECK_OPTIONS(precision == Precision::FP32 || device == Device::CUDA,
                   "--precision " << name_of(precision) << " runs on CUDA (--device cuda); on the CPU use fp32",
                   "precision", "device");
}

PrecisionScope::PrecisionScope(Precision precision) : before_(cuda::gemm_precision()) {
  cuda::set_gemm_precision(precision);
}
PrecisionScope::~PrecisionScope() { cuda::set_gemm_precision(before_); }

namespace {
const TrainOptions& checked(const TrainOptions& options, Device device) {
  options.check();
  check_precision(options.precision, device);
  return options;
}
}  // namespace

// The graph of one step's shapes, and what it reads and writes.
struct TrainStep::Graph {
  std::vector<std::pair<Shape, Shape>> shapes;  // each micro-batch's x and y
  std::vector<int64_t> scored;                  // and its count of scored targets (the loss head's rows)
  std::vector<Batch> inputs;  // on the device: each step's micro-batches are copied here
  int64_t eager_steps = 0;    // steps of these shapes run so far without the graph
  cuda::StepGraph graph;
  CounterShifts shifts;
  Outputs outputs;  // the captured step's loss and norm: every replay writes them again
  int64_t replays = 0;
};

TrainStep::TrainStep(Optimizer& optimizer, const TrainOptions& options, SummedLoss summed_loss, Device device,
                     int64_t ignore_index)
    : optimizer_(optimizer), options_(checked(options, device)), summed_loss_(std::move(summed_loss)),
      device_(device), ignore_index_(ignore_index), precision_(options.precision),
      lr_(Tensor::zeros({1}, DType::Float64, device)) {
  optimizer_.read_lr_from(lr_);
}

TrainStep::~TrainStep() { optimizer_.read_lr_from(Tensor()); }

void TrainStep::disable_cuda_graph(const std::string& why) {
  graph_disabled_ = why;
  graph_.reset();
}

std::string TrainStep::graph_off_reason() const {
  if (options_.cuda_graph == CudaGraph::Off) return "--cuda-graph off";
  if (device_ != Device::CUDA) return "the CPU (CUDA graphs are a CUDA feature)";
  if (!graph_disabled_.empty()) return graph_disabled_;
  if (after_backward) return "an after_backward hook (data or context parallelism: MPI or NCCL called from the host)";
  if (anomaly_mode()) return "anomaly mode (--detect-anomaly checks every op's output on the host)";
  if (profiler::recording()) return "the kernel profiler (it times each kernel by waiting for it)";
  if (cuda::sync_after_launch()) return "AG_CUDA_SYNC (every launch waits for the device, which a capture cannot)";
  return "";
}

std::string TrainStep::cuda_graph_status() const {
  const std::string off = graph_off_reason();
  if (!off.empty()) return "off: " + off;
  return "on (steps 0 and 1 of each shape eager, the third captured, later ones replayed)";
}

int64_t TrainStep::graph_replays() const { return graph_ ? graph_->replays : 0; }

void TrainStep::write_step_constants(double lr, int64_t scored) {
  kernel::fill(lr_, lr);
  inverse_count_value_ = 1.0 / static_cast<double>(scored);
  for (Tensor& s : inverse_counts_) kernel::fill(s, inverse_count_value_);
}

const Tensor& TrainStep::inverse_count(DType dtype) {
  for (const Tensor& s : inverse_counts_)
    if (s.dtype() == dtype) return s;
  // A loss dtype first met here: made and written now (an eager step: a capture follows two of them,
  // and a fill captured here would overwrite each replay's value with the captured one).
  inverse_counts_.push_back(Tensor::full({}, inverse_count_value_, dtype, device_));
  return inverse_counts_.back();
}

StepResult TrainStep::run(int64_t iter, const std::vector<Batch>& micro_batches) {
  AG_CHECK(!micro_batches.empty(), "TrainStep: no micro-batch");
  StepResult result;
  result.lr = warmup_cosine_lr(iter, {options_.lr, options_.min_lr, options_.warmup_iters, options_.lr_decay_iters});
  optimizer_.set_lr(result.lr);
  // n, the step's scored targets, counted on the host where the batches are made (each
  // micro-batch's count is a shape of a captured graph: its loss head's rows).
  const std::vector<std::vector<int64_t>> y_host = read_targets(micro_batches);
  std::vector<int64_t> scored;
  for (const std::vector<int64_t>& targets : y_host) {
    scored.push_back(std::count_if(targets.begin(), targets.end(), [this](int64_t t) { return t != ignore_index_; }));
    result.scored += scored.back();
  }
  if (total_scored) result.scored = total_scored(result.scored);
  AG_CHECK(result.scored > 0, "TrainStep: iteration " << iter << " has no scored target (every one is ignore_index "
                                                      << ignore_index_ << ")");
  write_step_constants(result.lr, result.scored);
  Outputs out;
  if (graph_off_reason().empty()) {
    out = run_graphed(micro_batches, y_host, scored, iter);
  } else {
    std::vector<Batch> on_device;
    for (const Batch& b : micro_batches) on_device.push_back({b.x.to(device_), b.y.to(device_)});
    out = step_on_device(on_device, &y_host);
  }
  result.loss = out.loss;
  result.grad_norm = out.grad_norm;
  unchecked_.push_back({iter, result.lr, result.scored, result.loss, result.grad_norm});
  return result;
}

TrainStep::Outputs TrainStep::step_on_device(const std::vector<Batch>& on_device,
                                             const std::vector<std::vector<int64_t>>* y_host) {
  Outputs out;
  optimizer_.zero_grad();
  out.loss = accumulate_gradients(on_device, y_host);
  if (after_backward) after_backward(optimizer_);
  const double max_norm = options_.grad_clip > 0 ? options_.grad_clip : INFINITY;
  out.grad_norm = clip_grad_norm(optimizer_, max_norm);
  // The update's guard: not finite when the norm or the loss is not (inf · 0 = NaN).
  Tensor guard;
  {
    NoGradGuard no_grad;
    guard = add(out.grad_norm, mul(out.loss.to(DType::Float64), 0.0));
  }
  optimizer_.step(guard);
  return out;
}

TrainStep::Outputs TrainStep::run_graphed(const std::vector<Batch>& micro_batches,
                                          const std::vector<std::vector<int64_t>>& y_host,
                                          const std::vector<int64_t>& scored, int64_t iter) {
  if (!graph_) graph_ = std::make_unique<Graph>();
  Graph& g = *graph_;
  std::vector<std::pair<Shape, Shape>> shapes;
  for (const Batch& b : micro_batches) shapes.push_back({b.x.shape(), b.y.shape()});
  if (shapes != g.shapes || scored != g.scored) {  // new shapes (or the first step): new inputs, and two eager steps before a capture
    g.graph.reset();
    g.shapes = shapes;
    g.scored = scored;
    g.inputs.clear();
    for (const Batch& b : micro_batches)
      g.inputs.push_back({Tensor::empty(b.x.shape(), b.x.dtype(), device_), Tensor::empty(b.y.shape(), b.y.dtype(), device_)});
    g.eager_steps = 0;
  }
  for (size_t m = 0; m < micro_batches.size(); ++m) {  // queued before the step's work, as the constants
    kernel::cast(micro_batches[m].x.to(device_), g.inputs[m].x);
    kernel::cast(micro_batches[m].y.to(device_), g.inputs[m].y);
  }
  if (!g.graph.ready() && g.eager_steps >= 2) {
    std::string failure;
    {
      g.shifts.begin();
      struct EndShifts {  // also when capture() throws
        CounterShifts& shifts;
        ~EndShifts() { shifts.end(); }
      } end_shifts{g.shifts};
      failure = g.graph.capture([&] { g.outputs = step_on_device(g.inputs, &y_host); });
    }
    if (!failure.empty()) {
      g.outputs = {};
      graph_disabled_ = "the capture at iteration " + std::to_string(iter) + " failed (" + failure + ")";
      std::fprintf(stderr, "cuda graph: capturing the training step at iteration %lld failed: %s; the run goes on eagerly\n",
                   static_cast<long long>(iter), failure.c_str());
      // This step and every later one run eagerly, on the inputs already copied.
      return step_on_device(g.inputs, &y_host);
    }
  }
  if (g.graph.ready() && !g.shifts.prepare_replay()) g.graph.reset();  // a generator reseeded or rewound: capture again
  if (!g.graph.ready()) {
    if (g.eager_steps >= 2) g.eager_steps = 1;  // after a reseed: one more eager step, then a capture
    ++g.eager_steps;
    return step_on_device(g.inputs, &y_host);
  }
  g.graph.replay();
  ++g.replays;
  // The graph's outputs are written again by the next replay: each step keeps its own copy.
  NoGradGuard no_grad;
  return {g.outputs.loss.clone(), g.outputs.grad_norm.clone()};
}

Tensor TrainStep::accumulate_gradients(const std::vector<Batch>& on_device,
                                       const std::vector<std::vector<int64_t>>* y_host) {
  Tensor loss;
  for (size_t m = 0; m < on_device.size(); ++m) {
    const Batch& b = on_device[m];
    const Tensor summed = summed_loss_(b.x, b.y, y_host ? std::span<const int64_t>((*y_host)[m]) : std::span<const int64_t>());
    // L_m / n, with 1/n a step constant (bit for bit the product with the double: both round 1/n to the loss's dtype first)
    const Tensor share = mul(summed, inverse_count(summed.dtype()));
    share.backward();
    NoGradGuard no_grad;
    loss = loss.defined() ? add(loss, share.detach()) : share.detach();
  }
  return loss;
}

namespace {
// The first parameter, in the optimizer's order, whose gradient is not all finite.
std::string first_non_finite_gradient(const Optimizer& optimizer) {
  for (const ParamGroup& group : optimizer.groups())
    for (const NamedParameter& p : group.params)
      if (!all_finite(p.tensor.grad())) return p.name;
  return "";
}
}  // namespace

void TrainStep::check_finite(const std::vector<Batch>* rerun) {
  if (unchecked_.empty()) return;
  std::vector<Tensor> losses, norms;
  for (const Unchecked& u : unchecked_) {
    losses.push_back(u.loss.reshape({1}));
    norms.push_back(u.grad_norm.reshape({1}));
  }
  const std::vector<double> loss = concat(losses, 0).to_vector(), norm = concat(norms, 0).to_vector();
  const Unchecked latest = unchecked_.back();
  const std::vector<Unchecked> checked = std::move(unchecked_);
  unchecked_.clear();
  for (size_t i = 0; i < checked.size(); ++i) {
    if (std::isfinite(loss[i]) && std::isfinite(norm[i])) continue;
    const bool is_latest = checked[i].iter == latest.iter;
    std::ostringstream message;
    message << "training diverged at iteration " << checked[i].iter << " (lr " << checked[i].lr << "): loss "
            << loss[i] << ", gradient norm " << norm[i] << ". That step's update was skipped";
    const std::string parameter = first_non_finite_gradient(optimizer_);
    if (!parameter.empty())
      message << "; the first non-finite gradient" << (is_latest ? "" : " (of the latest step, iteration " + std::to_string(latest.iter) + ")")
              << " is " << parameter << "'s";
    if (rerun && is_latest) {
      try {
        AnomalyModeGuard anomaly;
        const std::vector<std::vector<int64_t>> y_host = read_targets(*rerun);
        std::vector<Batch> on_device;
        for (const Batch& b : *rerun) on_device.push_back({b.x.to(device_), b.y.to(device_)});
        write_step_constants(checked[i].lr, checked[i].scored);
        optimizer_.zero_grad();
        accumulate_gradients(on_device, &y_host);
        message << ". Rerun in anomaly mode, it stayed finite (dropout draws other masks)";
      } catch (const Error& e) {
        message << ". Rerun in " << e.what();
      }
    }
    message << ". Try a lower learning rate" << (rerun ? "." : " (or --detect-anomaly to find the op).");
    throw Diverged(message.str());
  }
}

}  // namespace ag::optim
