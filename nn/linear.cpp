#include "nn/linear.h"

#include <cmath>

#include "core/ops.h"

namespace ag::nn {

Linear::Linear(const Config& config, Generator* gen) {
  const double bound = 1.0 / std::sqrt(static_cast<double>(config.in));
  weight_ = register_parameter("weight", Tensor::uniform({config.in, config.out}, -bound, bound, DType::Float32, gen));
  if (config.bias) bias_ = register_parameter("bias", Tensor::uniform({config.out}, -bound, bound, DType::Float32, gen));
}

// One op (core/ops/matmul.cpp): the leading dims are folded into rows, so the
// product is one GEMM over every row, [N, in] x [in, out] with N = B·T, with
// the bias folded in; dW = Xᵀ dY is one GEMM too.
Tensor Linear::forward(const Tensor& x) const {
  AG_CHECK(x.dim() >= 1 && x.size(-1) == weight_.size(0),
           "Linear: input " << describe(x) << " does not end in " << weight_.size(0) << " features");
  return linear(x, weight_, bias_);
}

}  // namespace ag::nn
