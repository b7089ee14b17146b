// Movement kernels on CUDA: the strided copy behind every shape op, fill and cast, a strided
// batch's scaling (cuda/matmul.cu's product with K = 0) and the index-range scan
// (cuda/launch.cu's check_indices_later); with their launches, written once for any device
// (cuda/memory.cu and those files run them on the GPU, tests/test_cuda_on_host.cpp on the
// host). Reference: core/cpu/memory.cpp, the GEMM's BLAS call, the CPU's index checks.
#pragma once
#include <cstdint>
#include <vector>

#include "core/shape.h"
#include "cuda/strided_index.cuh"

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

// C_b = beta·C_b for every matrix of a strided batch of row-major [M, N] (row stride ldc,
// batch stride `stride`): the whole product when K = 0, where cuBLAS has been seen to leave C
// untouched and C may hold stale memory from the allocator. beta = 0 writes 0, as BLAS does
// (a NaN in C does not survive).
template <class T> struct ScaleBatches {
  T* c;
  int64_t M, N, ldc, stride;
  T beta;
  __device__ void operator()(int64_t i) const {
    const int64_t b = i / (M * N), row = i / N % M, col = i % N;
    T& x = c[b * stride + row * ldc + col];
    x = beta == T(0) ? T(0) : beta * x;
  }
};

// *first = min(*first, i) for every position i whose index lies outside [0, limit) and is not
// `ignore` (when has_ignore): atomicMin on an integer, so the smallest bad position whatever
// order the threads run in.
struct FirstOutOfRange {
  const int64_t* indices;
  int64_t limit;
  bool has_ignore;
  int64_t ignore;
  unsigned long long* first;
  __device__ void operator()(int64_t i) const {
    const int64_t v = indices[i];
    if ((v < 0 || v >= limit) && !(has_ignore && v == ignore)) atomicMin(first, static_cast<unsigned long long>(i));
  }
};
// The launches on a device `dev` (cuda/launch.cuh's Gpu; the host tests' Device). Contracts:
// core/kernels.inc.
// For every index i of `shape`: dst[dst_strides(i)] = src[src_strides(i)], elements of `word` bytes
// (4 or 8), src and dst at their views' first elements; when both sides are contiguous once dims
// merge (clone, concat along dim 0, …), one `copy_bytes(dst, src, bytes)` (cudaMemcpyAsync on a GPU).
template <class Device, class CopyBytes>
void copy_strided_launch(const Device& dev, const CopyBytes& copy_bytes, const char* src,
                         const std::vector<int64_t>& src_strides, char* dst, const std::vector<int64_t>& dst_strides,
                         const Shape& shape, size_t word) {
  const int64_t n = numel(shape);
  if (n == 0) return;
  const StridedIndex<2> index = make_strided_index<2>("copy_strided", shape, {src_strides, dst_strides});
  if (index.rank == 0 || (index.rank == 1 && index.strides[0][0] == 1 && index.strides[1][0] == 1))
    return copy_bytes(dst, src, static_cast<size_t>(n) * word);
  if (word == 4)
    dev(n, CopyStrided<uint32_t>{reinterpret_cast<const uint32_t*>(src), reinterpret_cast<uint32_t*>(dst), index});
  else
    dev(n, CopyStrided<uint64_t>{reinterpret_cast<const uint64_t*>(src), reinterpret_cast<uint64_t*>(dst), index});
}

template <class T, class Device> void fill_launch(const Device& dev, T* out, int64_t n, T value) {
  dev(n, Fill<T>{out, value});
}

template <class S, class D, class Device> void cast_launch(const Device& dev, const S* src, int64_t n, D* dst) {
  dev(n, Cast<S, D>{src, dst});
}

// C_b = beta·C_b for the batch's matrices (a GEMM with K = 0), gaps between rows untouched.
template <class T, class Device>
void scale_batches_launch(const Device& dev, T* c, int64_t batch, int64_t M, int64_t N, int64_t ldc, int64_t stride,
                          T beta) {
  dev(batch * M * N, ScaleBatches<T>{c, M, N, ldc, stride, beta});
}

// *first = the smallest position of the n indices outside [0, limit) (and not `ignore`, when
// has_ignore), or 2^64 − 1 when there is none: what cuda::check_indices_later queues.
template <class Device>
void first_out_of_range_launch(const Device& dev, const int64_t* indices, int64_t n, int64_t limit, bool has_ignore,
                               int64_t ignore, unsigned long long* first) {
  fill_launch(dev, first, 1, ~0ull);
  dev(n, FirstOutOfRange{indices, limit, has_ignore, ignore, first});
}

}  // namespace
}  // namespace ag::cuda
