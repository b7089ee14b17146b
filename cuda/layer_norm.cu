// Layer norm on CUDA: cuda/layer_norm_kernels.cuh's launches on the GPU. Reference:
// core/cpu/layer_norm.cpp.
#include "cuda/cuda.h"
#include "cuda/launch.cuh"
#include "cuda/layer_norm_kernels.cuh"

namespace ag::cuda {

void layer_norm(const Tensor& x, const Tensor& weight, const Tensor& bias, double eps, Tensor& y, Tensor& mean,
                Tensor& rstd) {
  visit_floating(x.dtype(), "layer_norm", [&](auto zero) {
    using T = decltype(zero);
    const int64_t C = x.shape().back(), N = x.numel() / std::max<int64_t>(C, 1);
    layer_norm_launch(Gpu(), ptr<const T>(x), static_cast<const T*>(nullptr), ptr<const T>(weight), ptr<const T>(bias),
                      static_cast<T>(eps), N, C, static_cast<T*>(nullptr), ptr<T>(y), ptr<T>(mean), ptr<T>(rstd));
  });
}

void add_layer_norm(const Tensor& x, const Tensor& residual, const Tensor& weight, const Tensor& bias, double eps,
                    Tensor& sum, Tensor& y, Tensor& mean, Tensor& rstd) {
  visit_floating(x.dtype(), "add_layer_norm", [&](auto zero) {
    using T = decltype(zero);
    const int64_t C = x.shape().back(), N = x.numel() / std::max<int64_t>(C, 1);
    layer_norm_launch(Gpu(), ptr<const T>(x), ptr<const T>(residual), ptr<const T>(weight), ptr<const T>(bias),
                      static_cast<T>(eps), N, C, ptr<T>(sum), ptr<T>(y), ptr<T>(mean), ptr<T>(rstd));
  });
}

void layer_norm_backward(const Tensor& x, const Tensor& weight, const Tensor& mean, const Tensor& rstd,
                         const Tensor& dY, Tensor& dX, Tensor& dWeight, Tensor& dBias) {
  visit_floating(x.dtype(), "layer_norm_backward", [&](auto zero) {
    using T = decltype(zero);
    const int64_t C = x.shape().back(), N = x.numel() / std::max<int64_t>(C, 1);
    Gpu gpu;
    layer_norm_backward_launch(gpu, ptr<const T>(x), ptr<const T>(weight), ptr<const T>(mean), ptr<const T>(rstd),
                               ptr<const T>(dY), N, C, ptr<T>(dX), ptr<T>(dWeight), ptr<T>(dBias));
  });
}

}  // namespace ag::cuda
