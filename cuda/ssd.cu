// State-space attention on CUDA: cuda/ssd_kernels.cuh's launches on the GPU. Reference:
// core/cpu/ssd.cpp; contract: core/ssd_math.h (DecayedProduct).
#include "cuda/cuda.h"
#include "cuda/launch.cuh"
#include "cuda/ssd_kernels.cuh"

namespace ag::cuda {

void ssd_product(const Tensor& A, const Tensor& B, const Tensor& C, const Tensor& dt, const Tensor& log_a,
                 const DecayedProduct& how, Tensor& Out, Tensor* state) {
  visit_floating(A.dtype(), "ssd_product", [&](auto zero) {
    using T = decltype(zero);
    Gpu gpu;
    ssd_product_launch(gpu, ptr<const T>(A), ptr<const T>(B), ptr<const T>(C), ptr<const T>(dt), ptr<const T>(log_a),
                       how, ptr<T>(Out), state ? ptr<T>(*state) : nullptr);
  });
}

void ssd_decay_gradient(const Tensor& dY, const Tensor& Y, const Tensor& dt, const Tensor& d_dt,
                        const DecayedProduct& how, Tensor& d_log_a) {
  visit_floating(Y.dtype(), "ssd_decay_gradient", [&](auto zero) {
    using T = decltype(zero);
    Gpu gpu;
    ssd_decay_gradient_launch(gpu, ptr<const T>(dY), ptr<const T>(Y), ptr<const T>(dt), ptr<const T>(d_dt), how,
                              ptr<T>(d_log_a));
  });
}

}  // namespace ag::cuda
