#include "optim/clip_grad.h"

#include <cmath>

#include "core/autograd.h"
#include "core/dispatch.h"

namespace ag::optim {

double clip_grad_norm(const std::vector<Tensor>& params, double max_norm) {
  AG_CHECK(max_norm > 0, "clip_grad_norm: max_norm must be > 0, got " << max_norm);
  NoGradGuard no_grad;
  std::vector<Tensor> grads;
  for (const Tensor& p : params)
    if (p.grad().defined()) grads.push_back(p.grad());

  double sum = 0.0;
  for (const Tensor& g : grads) sum += kernel::sum_of_squares(g);
  const double norm = std::sqrt(sum);

  // The 1e-6 keeps a zero norm finite; torch's test is coef < 1 rather than
  // norm > max_norm, which differs only within 1e-6 of the threshold.
  const double coef = max_norm / (norm + 1e-6);
  if (coef < 1.0)
    for (Tensor& g : grads) kernel::scale_inplace(g, coef);
  return norm;
}

double clip_grad_norm(const std::vector<NamedParameter>& params, double max_norm) {
  std::vector<Tensor> tensors;
  tensors.reserve(params.size());
  for (const NamedParameter& p : params) tensors.push_back(p.tensor);
  return clip_grad_norm(tensors, max_norm);
}

}  // namespace ag::optim
