// Gradient clipping by global norm, as torch.nn.utils.clip_grad_norm_:
//   norm = √(Σ over every grad element of g²)        (one norm for all parameters)
//   coef = max_norm / (norm + 1e-6);  if coef < 1, every grad ← coef·grad
// Returns the norm before clipping. Parameters without a grad are skipped.
#pragma once
#include <vector>

#include "optim/optimizer.h"

namespace ag::optim {

double clip_grad_norm(const std::vector<NamedParameter>& params, double max_norm);
double clip_grad_norm(const std::vector<Tensor>& params, double max_norm);

}  // namespace ag::optim
