#include "optim/train_step.h"

#include <cmath>
#include <sstream>

#include "core/autograd.h"
#include "core/ops.h"
#include "cuda/context.h"
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

TrainStep::TrainStep(Optimizer& optimizer, const TrainOptions& options, SummedLoss summed_loss, Device device,
                     int64_t ignore_index)
    : optimizer_(optimizer), options_(checked(options, device)), summed_loss_(std::move(summed_loss)),
      device_(device), ignore_index_(ignore_index), precision_(options.precision) {}

StepResult TrainStep::run(int64_t iter, const std::vector<Batch>& micro_batches) {
  AG_CHECK(!micro_batches.empty(), "TrainStep: no micro-batch");
  StepResult result;
  result.lr = warmup_cosine_lr(iter, {options_.lr, options_.min_lr, options_.warmup_iters, options_.lr_decay_iters});
  optimizer_.set_lr(result.lr);
  // n, the step's scored targets, counted on the host where the batches are made.
  const std::vector<std::vector<int64_t>> y_host = read_targets(micro_batches);
  for (const std::vector<int64_t>& targets : y_host)
    for (int64_t t : targets) result.scored += t != ignore_index_;
  if (total_scored) result.scored = total_scored(result.scored);
  AG_CHECK(result.scored > 0, "TrainStep: iteration " << iter << " has no scored target (every one is ignore_index "
                                                      << ignore_index_ << ")");
  result.loss = accumulate_gradients(micro_batches, y_host, result.scored);
  if (after_backward) after_backward(optimizer_);
  const double max_norm = options_.grad_clip > 0 ? options_.grad_clip : INFINITY;
  result.grad_norm = clip_grad_norm(optimizer_, max_norm);
  // The update's guard: not finite when the norm or the loss is not (inf · 0 = NaN).
  Tensor guard;
  {
    NoGradGuard no_grad;
    guard = add(result.grad_norm, mul(result.loss.to(DType::Float64), 0.0));
  }
  optimizer_.step(guard);
  unchecked_.push_back({iter, result.lr, result.scored, result.loss, result.grad_norm});
  return result;
}

Tensor TrainStep::accumulate_gradients(const std::vector<Batch>& micro_batches,
                                       const std::vector<std::vector<int64_t>>& y_host, int64_t scored) {
  const double inverse_count = 1.0 / static_cast<double>(scored);
  optimizer_.zero_grad();
  Tensor loss;
  for (size_t m = 0; m < micro_batches.size(); ++m) {
    const Batch& b = micro_batches[m];
    const Tensor summed = summed_loss_(b.x.to(device_), b.y.to(device_), y_host[m]);
    const Tensor share = mul(summed, inverse_count);  // L_m / n
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
        accumulate_gradients(*rerun, read_targets(*rerun), checked[i].scored);
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
