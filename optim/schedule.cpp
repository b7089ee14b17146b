#include "optim/schedule.h"

#include <cmath>
#include <numbers>

#include "core/error.h"

namespace ag::optim {

double warmup_cosine_lr(int64_t iter, const CosineSchedule& s) {
  AG_CHECK(s.warmup_iters >= 0 && s.decay_iters > s.warmup_iters,
           "warmup_cosine_lr: need 0 <= warmup_iters < decay_iters, got warmup_iters "
               << s.warmup_iters << ", decay_iters " << s.decay_iters);
  if (iter < s.warmup_iters)
    return s.lr * static_cast<double>(iter + 1) / static_cast<double>(s.warmup_iters + 1);
  if (iter > s.decay_iters) return s.min_lr;
  const double ratio = static_cast<double>(iter - s.warmup_iters) / static_cast<double>(s.decay_iters - s.warmup_iters);
  const double coeff = 0.5 * (1.0 + std::cos(std::numbers::pi * ratio));
  return s.min_lr + coeff * (s.lr - s.min_lr);
}

}  // namespace ag::optim
