// layer_norm over the last dim: y = x̂ ∘ w + b with x̂ = (x − μ)/√(σ² + ε).
// Backward (docs/backprop.md, "Layer norm"): with g = dY ∘ w,
//   dX = (1/σ̃)(g − mean(g) − x̂ ∘ mean(g ∘ x̂)),  σ̃ = √(σ² + ε),
//   dw = Σ_rows dY ∘ x̂,  db = Σ_rows dY.
// The mean(g) term comes from μ depending on every x, the x̂ term from σ̃.
// Saves μ and 1/σ̃ per row (two numbers) and recomputes x̂ from x.
#include "core/ops/common.h"

namespace ag {

namespace {
void check_layer_norm_args(const char* op, const Tensor& x, const Tensor& weight, const Tensor& bias) {
  AG_CHECK(x.dim() >= 1 && weight.shape() == Shape{x.size(-1)} && bias.shape() == Shape{x.size(-1)},
           op << ": x " << to_string(x.shape()) << ", weight " << to_string(weight.shape()) << ", bias "
              << to_string(bias.shape()) << ": weight and bias must be [C] with C = x's last dim");
}

// Records y = layer_norm(x, weight, bias) with the row statistics the kernel saved.
Tensor record_layer_norm(const Tensor& x, const Tensor& weight, const Tensor& bias, Tensor y, Tensor mean,
                         Tensor rstd) {
  return record("layer_norm", {x, weight, bias}, std::move(y),
                [X = x.detach(), W = weight.detach(), mean, rstd](const Tensor& dY) -> Gradients {
                  Tensor dX = detail::empty_like(X), dW = detail::empty_like(W), dB = detail::empty_like(W);
                  kernel::layer_norm_backward(X, W, mean, rstd, dY, dX, dW, dB);
                  return {dX, dW, dB};
                });
}

Tensor row_statistic(const Tensor& x) {
  return Tensor::empty({x.numel() / std::max<int64_t>(x.size(-1), 1)}, x.dtype(), x.device());
}
}  // namespace

Tensor layer_norm(const Tensor& x, const Tensor& weight, const Tensor& bias, double eps) {
  detail::check_compatible("layer_norm", {&x, &weight, &bias});
  check_layer_norm_args("layer_norm", x, weight, bias);
  Tensor y = detail::empty_like(x), mean = row_statistic(x), rstd = row_statistic(x);
  kernel::layer_norm(x, weight, bias, eps, y, mean, rstd);
  return record_layer_norm(x, weight, bias, y, mean, rstd);
}

// add_layer_norm: S = X + R, then Y = layer_norm(S), the pre-LN block's
// "Y = X + O, then LN2(Y)" (docs/backprop.md, "The residual and layer norm,
// fused"). One kernel computes both, but the graph records the two ops it
// fuses, so each backward is the one already derived:
//   S = X + R:        dX = dS,  dR = dS
//   Y = LN(S):        layer_norm's backward, from S, mean and rstd
// and dS itself is the sum of what reaches S from Y and from the rest of the
// residual stream (the engine adds them). What the backward must save: S (it is
// an output anyway: the stream goes on from it) and two numbers per row; not X
// or R.
AddLayerNorm add_layer_norm(const Tensor& x, const Tensor& residual, const Tensor& weight, const Tensor& bias,
                            double eps) {
  detail::check_compatible("add_layer_norm", {&x, &residual, &weight, &bias});
  AG_CHECK(x.shape() == residual.shape(), "add_layer_norm: x " << to_string(x.shape()) << " and residual "
                                                                << to_string(residual.shape()) << " differ in shape");
  check_layer_norm_args("add_layer_norm", x, weight, bias);
  Tensor sum = detail::empty_like(x), y = detail::empty_like(x), mean = row_statistic(x), rstd = row_statistic(x);
  kernel::add_layer_norm(x, residual, weight, bias, eps, sum, y, mean, rstd);
  sum = record("add", {x, residual}, sum, [](const Tensor& dS) -> Gradients { return {dS, dS}; });
  return {sum, record_layer_norm(sum, weight, bias, y, mean, rstd)};
}

}  // namespace ag
