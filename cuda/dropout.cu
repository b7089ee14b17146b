// Dropout on CUDA: cuda/dropout_kernels.cuh's launch on the GPU. Reference: core/cpu/dropout.cpp.
#include "cuda/cuda.h"
#include "cuda/dropout_kernels.cuh"
#include "cuda/launch.cuh"

namespace ag::cuda {

void dropout(const Tensor& x, double p, uint64_t seed, uint64_t offset, const uint64_t* counter_shift, Tensor& y) {
  visit_floating(x.dtype(), "dropout", [&](auto zero) {
    using T = decltype(zero);
    dropout_launch(Gpu(), ptr<const T>(x), x.numel(), p, seed, offset, counter_shift, ptr<T>(y));
  });
}

}  // namespace ag::cuda
