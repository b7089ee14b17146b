// Movement on CUDA: cuda/memory_kernels.cuh's launches on the GPU. Reference: core/cpu/memory.cpp.
#include <cmath>

#include "cuda/cuda.h"
#include "cuda/launch.cuh"
#include "cuda/memory_kernels.cuh"

namespace ag::cuda {

void copy_strided(const Tensor& src, const StridedView& src_view, Tensor& dst, const StridedView& dst_view,
                  const Shape& shape) {
  AG_CHECK(src.dtype() == dst.dtype(), "copy_strided: dtypes differ (" << src.dtype() << " vs "
                                                                       << dst.dtype() << ")");
  const size_t word = dtype_size(src.dtype());
  const auto copy_bytes = [](char* to, const char* from, size_t bytes) {
    AG_CUDA_CHECK(cudaMemcpyAsync(to, from, bytes, cudaMemcpyDeviceToDevice, current_stream()));
  };
  copy_strided_launch(Gpu(), copy_bytes, static_cast<const char*>(src.raw_data()) + src_view.offset * word,
                      src_view.strides, static_cast<char*>(dst.raw_data()) + dst_view.offset * word, dst_view.strides,
                      shape, word);
}

void fill(Tensor& out, double value) {
  const int64_t n = out.numel();
  if (n == 0) return;
  if (value == 0.0 && !std::signbit(value)) {  // all-zero bytes are +0 in every dtype
    AG_CUDA_CHECK(cudaMemsetAsync(out.raw_data(), 0, n * dtype_size(out.dtype()), current_stream()));
    return;
  }
  visit_dtype(out.dtype(), [&](auto zero) {
    using T = decltype(zero);
    fill_launch(Gpu(), ptr<T>(out), n, static_cast<T>(value));
  });
}

void cast(const Tensor& src, Tensor& dst) {
  visit_dtype(src.dtype(), [&](auto src_zero) {
    visit_dtype(dst.dtype(), [&](auto dst_zero) {
      using S = decltype(src_zero);
      using D = decltype(dst_zero);
      cast_launch(Gpu(), ptr<const S>(src), src.numel(), ptr<D>(dst));
    });
  });
}

}  // namespace ag::cuda
