// The causal depthwise convolution over time: x [B, T, C], weight [W, C], bias [C],
//   y_{t,c} = bias_c + Σ_{s<W} weight[s, c] · x_{t−W+1+s, c}      (x before t = 0 is 0)
// Each output is a sum of products, so (docs/backprop.md, "The causal depthwise convolution"):
//   dx_{t,c}         = Σ_s weight[s, c] · dy_{t+W−1−s, c}   (the outputs that read x_t: the
//                                                            same taps, run backwards in time)
//   dweight[s, c]    = Σ_{b,t} dy_{t,c} · x_{t−W+1+s, c}
//   dbias_c          = Σ_{b,t} dy_{t,c}
// One kernel each way (core/cpu/conv.cpp, cuda/conv.cu). Saves x and weight.
#include "core/ops/common.h"

namespace ag {

Tensor causal_conv1d(const Tensor& x, const Tensor& weight, const Tensor& bias) {
  const auto where = [&] {
    return "causal_conv1d: x " + to_string(x.shape()) + ", weight " + to_string(weight.shape()) + ", bias " +
           (bias.defined() ? to_string(bias.shape()) : std::string("none"));
  };
  if (bias.defined()) detail::check_compatible("causal_conv1d", {&x, &weight, &bias});
  else detail::check_compatible("causal_conv1d", {&x, &weight});
  AG_CHECK(x.dim() == 3 && weight.dim() == 2 && weight.size(0) >= 1 && weight.size(1) == x.size(2),
           where() << ": expected x [B, T, C] and weight [W, C] with W >= 1");
  AG_CHECK(!bias.defined() || bias.shape() == Shape{x.size(2)}, where() << ": bias must be [C]");
  Tensor y = detail::empty_like(x);
  kernel::causal_conv1d(x, weight, bias, y);
  return record("causal_conv1d", bias.defined() ? std::vector<Tensor>{x, weight, bias} : std::vector<Tensor>{x, weight}, y,
                [X = x.detach(), Weight = weight.detach(), has_bias = bias.defined()](const Tensor& dY) -> Gradients {
                  Tensor dX = detail::empty_like(X), dWeight = detail::empty_like(Weight);
                  Tensor dBias = has_bias ? detail::empty_as({X.size(2)}, X) : Tensor();
                  kernel::causal_conv1d_backward(X, Weight, dY, dX, dWeight, has_bias ? &dBias : nullptr);
                  if (!has_bias) return {dX, dWeight};
                  return {dX, dWeight, dBias};
                });
}

}  // namespace ag
