// Linear attention on CUDA: cuda/linear_attention_kernels.cuh's launches on the GPU. Reference:
// core/cpu/linear_attention.cpp; formulas: core/linear_attention_math.h.
#include "cuda/cuda.h"
#include "cuda/launch.cuh"
#include "cuda/linear_attention_kernels.cuh"

namespace ag::cuda {

void attention_features(const Tensor& X, const Tensor& omega, FeatureMap map, Tensor& Phi) {
  visit_floating(X.dtype(), "attention_features", [&](auto zero) {
    using T = decltype(zero);
    attention_features_launch(Gpu(), ptr<const T>(X), omega.defined() ? ptr<const T>(omega) : nullptr, map,
                              X.numel() / X.size(-1), X.size(-1), Phi.size(-1), ptr<T>(Phi));
  });
}

void attention_features_backward(const Tensor& X, const Tensor& omega, FeatureMap map, const Tensor& Phi,
                                 const Tensor& dPhi, Tensor& dX) {
  visit_floating(X.dtype(), "attention_features_backward", [&](auto zero) {
    using T = decltype(zero);
    attention_features_backward_launch(Gpu(), ptr<const T>(X), omega.defined() ? ptr<const T>(omega) : nullptr, map,
                                       ptr<const T>(Phi), ptr<const T>(dPhi), X.numel() / X.size(-1), X.size(-1),
                                       Phi.size(-1), ptr<T>(dX));
  });
}

void linear_attention_product(const Tensor& A, const Tensor& B, const Tensor& C, const PrefixProduct& how,
                              Tensor& Out) {
  visit_floating(A.dtype(), "linear_attention_product", [&](auto zero) {
    using T = decltype(zero);
    Gpu gpu;
    linear_attention_product_launch(gpu, ptr<const T>(A), ptr<const T>(B), ptr<const T>(C), how, ptr<T>(Out));
  });
}

}  // namespace ag::cuda
