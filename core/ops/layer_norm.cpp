// layer_norm over the last dim: y = x̂ ∘ w + b with x̂ = (x − μ)/√(σ² + ε).
// Backward (docs/backprop.md, "Layer norm"): with g = dY ∘ w,
//   dX = (1/σ̃)(g − mean(g) − x̂ ∘ mean(g ∘ x̂)),  σ̃ = √(σ² + ε),
//   dw = Σ_rows dY ∘ x̂,  db = Σ_rows dY.
// The mean(g) term comes from μ depending on every x, the x̂ term from σ̃.
// Saves μ and 1/σ̃ per row (two numbers) and recomputes x̂ from x.
#include "core/ops/common.h"

namespace ag {

Tensor layer_norm(const Tensor& x, const Tensor& weight, const Tensor& bias, double eps) {
  detail::check_compatible("layer_norm", {&x, &weight, &bias});
  AG_CHECK(x.dim() >= 1 && weight.shape() == Shape{x.size(-1)} && bias.shape() == Shape{x.size(-1)},
           "layer_norm: x " << to_string(x.shape()) << ", weight " << to_string(weight.shape()) << ", bias "
                            << to_string(bias.shape()) << ": weight and bias must be [C] with C = x's last dim");
  const int64_t C = x.size(-1), N = x.numel() / std::max<int64_t>(C, 1);
  Tensor y = detail::empty_like(x);
  Tensor mean = Tensor::empty({N}, x.dtype(), x.device());
  Tensor rstd = Tensor::empty({N}, x.dtype(), x.device());
  kernel::layer_norm(x, weight, bias, eps, y, mean, rstd);
  return record("layer_norm", {x, weight, bias}, y,
                [X = x.detach(), W = weight.detach(), mean, rstd](const Tensor& dY) -> Gradients {
                  Tensor dX = detail::empty_like(X), dW = detail::empty_like(W), dB = detail::empty_like(W);
                  kernel::layer_norm_backward(X, W, mean, rstd, dY, dX, dW, dB);
                  return {dX, dW, dB};
                });
}

}  // namespace ag
