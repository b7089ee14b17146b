// What the kernel files share: the stream, checked launches, a grid-stride
// "for each index" kernel, block-wide reductions, strided indexing for
// broadcasts and permutes, a deterministic sum of everything, and the
// index-range check. Only .cu files include this.
//
// Conventions. Indices are int64 (tensors may exceed 2^31 elements). Grids only
// use x, whose limit is 2^31 − 1 blocks (y and z stop at 65535), and kernels
// loop grid-stride, so a capped grid covers any size. Nothing is launched for
// zero elements (a zero-block grid is a launch error). No kernel uses float
// atomics: every reduction adds in a fixed order, so results are the same bits
// every run.
#pragma once
#include <algorithm>
#include <array>
#include <cstdint>
#include <cstdlib>
#include <functional>
#include <string>
#include <utility>
#include <vector>

#include "core/tensor.h"
#include "cuda/check.h"
#include "cuda/context.h"
#include "cuda/grid.cuh"
#include "cuda/reduce_ops.cuh"
#include "cuda/strided_index.cuh"

// After every <<<...>>>: a bad configuration shows up here, named by file:line.
// With AG_CUDA_SYNC set in the environment it also waits for the kernel, so a
// fault inside one (an illegal address, a trap) is reported at its own launch
// rather than at the next copy to the host. For debugging: it serialises everything.
#define AG_CUDA_CHECK_LAUNCH()                                                   \
  do {                                                                           \
    AG_CUDA_CHECK(cudaGetLastError());                                           \
    if (::ag::cuda::sync_after_launch())                                         \
      AG_CUDA_CHECK(cudaStreamSynchronize(::ag::cuda::current_stream()));        \
  } while (0)

namespace ag::cuda {

inline cudaStream_t current_stream() { return static_cast<cudaStream_t>(stream()); }

template <class T> T* ptr(const Tensor& t) { return static_cast<T*>(t.raw_data()); }

// kThreads, kMaxBlocks, grid_for, blocks_for, row_threads, thread_index() and thread_count():
// cuda/grid.cuh.

// --- scratch ----------------------------------------------------------------------------
// `count` elements of T from the caching allocator for a call's scope: freed when
// the call returns, while its kernels may still be queued. The allocator hands the
// block out again only to work queued after them on the one stream (core/caching_allocator.h),
// and under a CUDA graph's capture it comes from the graph's own pool (cuda/graph.h).
template <class T> class Scratch {
 public:
  explicit Scratch(int64_t count)
      : bytes_(static_cast<size_t>(count > 0 ? count : 1) * sizeof(T)), data_(static_cast<T*>(allocate(bytes_))) {}
  ~Scratch() { deallocate(data_, bytes_); }
  Scratch(const Scratch&) = delete;
  Scratch& operator=(const Scratch&) = delete;
  T* data() const { return data_; }

 private:
  size_t bytes_;
  T* data_;
};

// --- for each index ------------------------------------------------------------------
// f(i) for i in [0, n). F is a small struct of pointers and scalars with a
// __device__ operator()(int64_t) const: the elementwise kernels are written as such.
template <class F> __global__ void for_each_kernel(int64_t n, F f) {
  for (int64_t i = thread_index(); i < n; i += thread_count()) f(i);
}

template <class F> void for_each_index(int64_t n, const F& f) {
  if (n == 0) return;
  for_each_kernel<<<blocks_for(n), kThreads, 0, current_stream()>>>(n, f);
  AG_CUDA_CHECK_LAUNCH();
}

// The GPU as the `dev` that launch code written once for any device takes (the kernel headers'
// *_launch functions: cuda/edge_attention_kernels.cuh, attention_kernels.cuh, s4_kernels.cuh,
// chunked_kernels.cuh, ssd_kernels.cuh, linear_attention_kernels.cuh; the host tests give the
// same three calls on the CPU, tests/cuda_on_host.h):
//   dev(n, f)                                      f(i) for i < n: for_each_index;
//   dev.blocks(kernel, tasks, threads, bytes, args…) kernel<<<grid_for(tasks), threads, bytes>>>(args…),
//                                                  the block's shared-memory limit raised past 48 KB
//                                                  when asked; nothing for zero tasks;
//   dev.scratch<T>(count)                          count elements from the caching allocator, held
//                                                  until dev is destroyed (stream-ordered, as Scratch).
class Gpu {
 public:
  Gpu() = default;
  Gpu(const Gpu&) = delete;
  Gpu& operator=(const Gpu&) = delete;
  ~Gpu() {
    for (const auto& [data, bytes] : held_) deallocate(data, bytes);
  }
  template <class F> void operator()(int64_t n, const F& f) const { for_each_index(n, f); }
  template <class... Params, class... Args>
  void blocks(void (*kernel)(Params...), int64_t tasks, int threads, size_t bytes, Args... args) const {
    if (tasks == 0) return;
    if (bytes > 48 * 1024)
      AG_CUDA_CHECK(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, static_cast<int>(bytes)));
    kernel<<<grid_for(tasks), threads, bytes, current_stream()>>>(args...);
    AG_CUDA_CHECK_LAUNCH();
  }
  template <class T> T* scratch(int64_t count) {
    const size_t bytes = static_cast<size_t>(count > 0 ? count : 1) * sizeof(T);
    held_.emplace_back(allocate(bytes), bytes);
    return static_cast<T*>(held_.back().first);
  }

 private:
  std::vector<std::pair<void*, size_t>> held_;
};

// --- block-wide reductions -------------------------------------------------------------
// SumOp, MaxOp and block_reduce: cuda/reduce_ops.cuh.

// --- strided indexing: StridedIndex and make_strided_index, cuda/strided_index.cuh -------------
// --- deterministic total: sum_all_launch, cuda/reduce_kernels.cuh ------------------------------

// --- index checks ----------------------------------------------------------------------
// Queues a check that every index lies in [0, limit) or equals `ignore` (when
// has_ignore), without waiting for the device: a kernel records the first bad
// position, and the next host synchronisation throws describe(position, value)
// (cuda/context.h, "Deferred errors"). The kernels that read through the
// indices skip out-of-range ones, so nothing reads outside its table meanwhile.
void check_indices_later(const Tensor& indices, int64_t limit, bool has_ignore, int64_t ignore,
                         IndexErrorMessage describe);

}  // namespace ag::cuda
