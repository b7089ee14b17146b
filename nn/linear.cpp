#include "nn/linear.h"

#include <cmath>

#include "core/ops.h"

namespace ag::nn {

Linear::Linear(int64_t in, int64_t out, bool bias, Generator* gen) {
  const double bound = 1.0 / std::sqrt(static_cast<double>(in));
  weight_ = register_parameter("weight", Tensor::uniform({in, out}, -bound, bound, DType::Float32, gen));
  if (bias) bias_ = register_parameter("bias", Tensor::uniform({out}, -bound, bound, DType::Float32, gen));
}

// The leading dims are flattened so that the product is one GEMM over every
// row, [N, in] x [in, out] with N = B·T, and dW = Xᵀ dY is one GEMM too.
Tensor Linear::forward(const Tensor& x) const {
  const int64_t in = weight_.size(0), out = weight_.size(1);
  AG_CHECK(x.dim() >= 1 && x.size(-1) == in,
           "Linear: input " << describe(x) << " does not end in " << in << " features");
  Shape y_shape = x.shape();
  y_shape.back() = out;
  Tensor y = matmul(x.reshape({-1, in}), weight_);  // [N, out]
  if (bias_.defined()) y = y + bias_;              // b [out] broadcasts over the rows
  return y.reshape(y_shape);
}

}  // namespace ag::nn
