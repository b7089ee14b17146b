// Reductions on CUDA: cuda/reduce_kernels.cuh's launches on the GPU. Reference: core/cpu/reduce.cpp.
#include "cuda/cuda.h"
#include "cuda/launch.cuh"
#include "cuda/reduce_kernels.cuh"

namespace ag::cuda {

void sum_to_shape(const Tensor& x, Tensor& out) {
  visit_floating(x.dtype(), "sum_to_shape", [&](auto zero) {
    using T = decltype(zero);
    Gpu gpu;
    sum_to_shape_launch(gpu, ptr<const T>(x), x.shape(), out.shape(), ptr<T>(out));
  });
}

void max_dim(const Tensor& x, const ReduceDims& dims, Tensor& values, Tensor& argmax) {
  visit_floating(x.dtype(), "max", [&](auto zero) {
    using T = decltype(zero);
    max_dim_launch(Gpu(), ptr<const T>(x), dims, ptr<T>(values), ptr<int64_t>(argmax));
  });
}

void max_dim_backward(const Tensor& dValues, const Tensor& argmax, const ReduceDims& dims, Tensor& dX) {
  visit_floating(dValues.dtype(), "max_backward", [&](auto zero) {
    using T = decltype(zero);
    if (dX.numel() == 0) return;
    AG_CUDA_CHECK(cudaMemsetAsync(dX.raw_data(), 0, dX.numel() * sizeof(T), current_stream()));
    max_dim_backward_launch(Gpu(), ptr<const T>(dValues), ptr<const int64_t>(argmax), dims, ptr<T>(dX));
  });
}

void cumsum(const Tensor& x, const ReduceDims& dims, bool reverse, Tensor& y) {
  visit_floating(x.dtype(), "cumsum", [&](auto zero) {
    using T = decltype(zero);
    cumsum_launch(Gpu(), ptr<const T>(x), dims, reverse, ptr<T>(y));
  });
}

}  // namespace ag::cuda
