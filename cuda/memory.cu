// Movement kernels: the strided copy behind every shape op, fill and cast.
// Reference: core/cpu/memory.cpp.
#include <cmath>

#include "cuda/cuda.h"
#include "cuda/launch.cuh"

namespace ag::cuda {

namespace {

// A copy moves bytes, so it is instantiated per element size, not per dtype.
template <class Word> struct CopyStrided {
  const Word* src;
  Word* dst;
  StridedIndex<2> index;  // operand 0: src, 1: dst
  __device__ void operator()(int64_t i) const {
    int64_t offset[2];
    index.offsets(i, offset);
    dst[offset[1]] = src[offset[0]];
  }
};

template <class T> struct Fill {
  T* out;
  T value;
  __device__ void operator()(int64_t i) const { out[i] = value; }
};

template <class S, class D> struct Cast {
  const S* src;
  D* dst;
  __device__ void operator()(int64_t i) const { dst[i] = static_cast<D>(src[i]); }
};
}  // namespace

void copy_strided(const Tensor& src, const StridedView& src_view, Tensor& dst, const StridedView& dst_view,
                  const Shape& shape) {
  AG_CHECK(src.dtype() == dst.dtype(), "copy_strided: dtypes differ (" << src.dtype() << " vs "
                                                                       << dst.dtype() << ")");
  const int64_t n = numel(shape);
  if (n == 0) return;
  const StridedIndex<2> index = make_strided_index<2>("copy_strided", shape, {src_view.strides, dst_view.strides});
  const size_t word = dtype_size(src.dtype());
  const char* s = static_cast<const char*>(src.raw_data()) + src_view.offset * word;
  char* d = static_cast<char*>(dst.raw_data()) + dst_view.offset * word;
  // Both sides contiguous once dims are merged (clone, concat along dim 0, ...): one memcpy.
  if (index.rank == 0 || (index.rank == 1 && index.strides[0][0] == 1 && index.strides[1][0] == 1)) {
    AG_CUDA_CHECK(cudaMemcpyAsync(d, s, n * word, cudaMemcpyDeviceToDevice, current_stream()));
    return;
  }
  if (word == 4)
    for_each_index(n, CopyStrided<uint32_t>{reinterpret_cast<const uint32_t*>(s), reinterpret_cast<uint32_t*>(d), index});
  else
    for_each_index(n, CopyStrided<uint64_t>{reinterpret_cast<const uint64_t*>(s), reinterpret_cast<uint64_t*>(d), index});
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
    for_each_index(n, Fill<T>{ptr<T>(out), static_cast<T>(value)});
  });
}

void cast(const Tensor& src, Tensor& dst) {
  visit_dtype(src.dtype(), [&](auto src_zero) {
    visit_dtype(dst.dtype(), [&](auto dst_zero) {
      using S = decltype(src_zero);
      using D = decltype(dst_zero);
      for_each_index(src.numel(), Cast<S, D>{ptr<const S>(src), ptr<D>(dst)});
    });
  });
}

}  // namespace ag::cuda
