// Gradient clipping by global norm, as torch.nn.utils.clip_grad_norm_:
//   norm = √(Σ over every grad element of g²)        (one norm for all parameters)
//   coef = max_norm / (norm + 1e-6);  if coef < 1, every grad ← coef·grad
// Returns the norm before clipping, a float64 scalar on the gradients' device:
// nothing waits for the device until the caller reads it (item()). The
// gradients must all be on one device. max_norm = infinity measures without clipping.
#pragma once
#include <vector>

#include "optim/optimizer.h"

namespace ag::optim {

// Over an optimizer's flat gradient buffers: one reduction and one scaling pass each.
Tensor clip_grad_norm(const Optimizer& optimizer, double max_norm);
// Over the gradients of `params`; parameters without one are skipped.
Tensor clip_grad_norm(const std::vector<NamedParameter>& params, double max_norm);
Tensor clip_grad_norm(const std::vector<Tensor>& params, double max_norm);

}  // namespace ag::optim
