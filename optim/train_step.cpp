#include "optim/train_step.h"

#include <cmath>

#include "core/autograd.h"
#include "core/ops.h"
#include "optim/clip_grad.h"
#include "optim/schedule.h"

namespace ag::optim {

void TrainOptions::check() const {
  check_option_ranges(*this);
  AG_CHECK(warmup_iters < lr_decay_iters, "--warmup-iters (" << warmup_iters << ") must be below --lr-decay-iters ("
                                                             << lr_decay_iters << ")");
  AG_CHECK(min_lr <= lr, "--min-lr (" << min_lr << ") must not exceed --lr (" << lr << ")");
}

TrainStep::TrainStep(Optimizer& optimizer, const TrainOptions& options, SummedLoss summed_loss, Device device,
                     int64_t ignore_index)
    : optimizer_(optimizer), options_(options), summed_loss_(std::move(summed_loss)), device_(device),
      ignore_index_(ignore_index) {
  options_.check();
}

StepResult TrainStep::run(int64_t iter, const std::vector<Batch>& micro_batches) {
  AG_CHECK(!micro_batches.empty(), "TrainStep: no micro-batch");
  StepResult result;
  result.lr = warmup_cosine_lr(iter, {options_.lr, options_.min_lr, options_.warmup_iters, options_.lr_decay_iters});
  optimizer_.set_lr(result.lr);
  // n, the step's scored targets, counted on the host where the batches are made.
  for (const Batch& b : micro_batches) {
    AG_CHECK(b.y.device() == Device::CPU, "TrainStep: targets must come from the host, got " << describe(b.y));
    for (int64_t t : b.y.to_indices()) result.scored += t != ignore_index_;
  }
  if (total_scored) result.scored = total_scored(result.scored);
  AG_CHECK(result.scored > 0, "TrainStep: iteration " << iter << " has no scored target (every one is ignore_index "
                                                      << ignore_index_ << ")");
  const double inverse_count = 1.0 / static_cast<double>(result.scored);

  optimizer_.zero_grad();
  for (const Batch& b : micro_batches) {
    const Tensor summed = summed_loss_(b.x.to(device_), b.y.to(device_));
    const Tensor share = mul(summed, inverse_count);  // L_m / n
    share.backward();
    NoGradGuard no_grad;
    result.loss = result.loss.defined() ? add(result.loss, share.detach()) : share.detach();
  }
  if (after_backward) after_backward(optimizer_);
  const double max_norm = options_.grad_clip > 0 ? options_.grad_clip : INFINITY;
  result.grad_norm = clip_grad_norm(optimizer_, max_norm);
  optimizer_.step();
  return result;
}

}  // namespace ag::optim
