// embedding: out[n] = weight[idx[n]], a row gather. Row v of weight feeds every
// output whose index is v, so dWeight[v] = Σ_{n: idx[n] = v} dOut[n]: a
// scatter-add. Saves the indices.
#include "core/ops/common.h"

namespace ag {

Tensor embedding(const Tensor& weight, const Tensor& indices) {
  detail::check_floating("embedding", weight);
  detail::check_indices("embedding", indices, weight);
  AG_CHECK(weight.dim() == 2, "embedding: weight " << to_string(weight.shape()) << ": expected [V, C]");
  const int64_t C = weight.size(1);
  Shape out_shape = indices.shape();
  out_shape.push_back(C);
  const Tensor flat = indices.reshape({indices.numel()});
  Tensor out = detail::empty_as(out_shape, weight);
  kernel::embedding(weight, flat, out);
  return record("embedding", {weight}, out, [flat, sw = weight.shape(), C](const Tensor& dOut) -> Gradients {
    Tensor dW = detail::empty_as(sw, dOut);
    kernel::embedding_backward(dOut.reshape({flat.numel(), C}), flat, dW);
    return {dW};
  });
}

}  // namespace ag
