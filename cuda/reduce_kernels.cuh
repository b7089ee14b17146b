// Reductions on CUDA: sum_to_shape adds every x element into the out element it broadcasts
// from, in double (as the CPU does), each output's terms in a fixed order, so the bits are the
// same every run; the total of all elements in a fixed grid; max over a dim with its argmax, and
// its backward; cumulative sums. With their launches, written once for any device
// (cuda/reduce.cu runs them on the GPU, tests/test_cuda_on_host.cpp on the host). Reference:
// core/cpu/reduce.cpp.
#pragma once
#include <algorithm>
#include <cstdint>
#include <vector>

#include "core/kernel_args.h"  // ReduceDims
#include "core/shape.h"
#include "cuda/grid.cuh"
#include "cuda/reduce_ops.cuh"
#include "cuda/strided_index.cuh"

namespace ag::cuda {

// *out = Σ_{i<n} load(i), added in double: a fixed grid of blocks (it depends on
// n only) each sums a grid-stride share into partials[b], then one block adds
// the partials in order. n = 0 writes 0.
constexpr int kSumBlocks = 1024;

template <class Load> __global__ void partial_sums_kernel(int64_t n, Load load, double* partials) {
  __shared__ double scratch[32];
  double acc = 0;
  for (int64_t i = thread_index(); i < n; i += thread_count()) acc += static_cast<double>(load(i));
  acc = block_reduce(acc, SumOp{}, scratch);
  if (threadIdx.x == 0) partials[blockIdx.x] = acc;
}

template <class Out> __global__ void finish_sum_kernel(const double* partials, int count, Out* out) {
  __shared__ double scratch[32];
  double acc = 0;
  for (int b = threadIdx.x; b < count; b += blockDim.x) acc += partials[b];
  acc = block_reduce(acc, SumOp{}, scratch);
  if (threadIdx.x == 0) *out = static_cast<Out>(acc);
}

// On a device `dev` (cuda/launch.cuh's Gpu; the host tests' Device).
template <class Load, class Out, class Device>
void sum_all_launch(Device& dev, int64_t n, const Load& load, Out* out) {
  const int blocks = static_cast<int>(std::clamp<int64_t>((n + 4 * kThreads - 1) / (4 * kThreads), 1, kSumBlocks));
  double* partials = dev.template scratch<double>(blocks);
  dev.blocks(partial_sums_kernel<Load>, blocks, kThreads, 0, n, load, partials);
  dev.blocks(finish_sum_kernel<Out>, 1, kThreads, 0, static_cast<const double*>(partials), blocks, out);
}

namespace {
// x's dims split in two: the kept dims (those out keeps, in order: enumerating
// them enumerates out's elements contiguously) and the reduced dims (out has 1
// or nothing there). Output o sums x[kept(o) + reduced(r)] over r in [0, R).
struct SumLayout {
  StridedIndex<1> kept, reduced;
  int64_t outputs = 1, terms = 1;  // numel(out), R
};

SumLayout sum_layout(const Shape& x_shape, const Shape& out_shape) {
  const std::vector<int64_t> x_strides = contiguous_strides(x_shape);
  const size_t lead = x_shape.size() - out_shape.size();
  Shape kept_shape, reduced_shape;
  std::vector<int64_t> kept_strides, reduced_strides;
  for (size_t d = 0; d < x_shape.size(); ++d) {
    const bool reduced = d < lead || (out_shape[d - lead] == 1 && x_shape[d] != 1);
    (reduced ? reduced_shape : kept_shape).push_back(x_shape[d]);
    (reduced ? reduced_strides : kept_strides).push_back(x_strides[d]);
  }
  SumLayout layout;
  layout.kept = make_strided_index<1>("sum_to_shape", kept_shape, {kept_strides});
  layout.reduced = make_strided_index<1>("sum_to_shape", reduced_shape, {reduced_strides});
  layout.outputs = numel(kept_shape);
  layout.terms = numel(reduced_shape);
  return layout;
}

template <class T> __device__ double sum_terms(const T* x, const SumLayout& layout, int64_t o, int64_t first,
                                               int64_t step) {
  int64_t base[1], offset[1];
  layout.kept.offsets(o, base);
  double acc = 0;
  for (int64_t r = first; r < layout.terms; r += step) {
    layout.reduced.offsets(r, offset);
    acc += static_cast<double>(x[base[0] + offset[0]]);
  }
  return acc;
}

// Many outputs, or few terms each: one thread per output, adding its terms in order.
template <class T> struct SumPerThread {
  const T* x;
  T* out;
  SumLayout layout;
  __device__ void operator()(int64_t o) const { out[o] = static_cast<T>(sum_terms(x, layout, o, 0, 1)); }
};

// Few outputs with many terms each (the bias gradient [N, C] -> [C], row sums):
// one block per output, each thread a grid of terms, then block_reduce.
template <class T> __global__ void sum_per_block_kernel(const T* x, T* out, SumLayout layout) {
  __shared__ double scratch[32];
  for (int64_t o = blockIdx.x; o < layout.outputs; o += gridDim.x) {
    const double acc = block_reduce(sum_terms(x, layout, o, threadIdx.x, blockDim.x), SumOp{}, scratch);
    if (threadIdx.x == 0) out[o] = static_cast<T>(acc);
  }
}

template <class T> struct Load {
  const T* x;
  __device__ T operator()(int64_t i) const { return x[i]; }
};

// Over dim n of x [outer, n, inner]: one thread per (o, i), the first index on ties.
template <class T> struct MaxDim {
  const T* x;
  T* values;
  int64_t* argmax;
  kernel::ReduceDims dims;
  __device__ void operator()(int64_t k) const {
    const int64_t o = k / dims.inner, i = k % dims.inner;
    const T* column = x + o * dims.n * dims.inner + i;
    int64_t best = 0;
    for (int64_t j = 1; j < dims.n; ++j)
      if (column[j * dims.inner] > column[best * dims.inner]) best = j;
    values[k] = column[best * dims.inner];
    argmax[k] = best;
  }
};

// dX is zero (memset first); each output scatters to its own argmax: no two
// threads write one element.
template <class T> struct MaxDimBackward {
  const T* dValues;
  const int64_t* argmax;
  T* dX;
  kernel::ReduceDims dims;
  __device__ void operator()(int64_t k) const {
    const int64_t o = k / dims.inner, i = k % dims.inner;
    dX[(o * dims.n + argmax[k]) * dims.inner + i] = dValues[k];
  }
};

// Over dim n of x [outer, n, inner]: one thread per line (o, i), its terms in order, in double.
template <class T> struct CumSum {
  const T* x;
  T* y;
  kernel::ReduceDims dims;
  bool reverse;
  __device__ void operator()(int64_t k) const {
    const int64_t o = k / dims.inner, i = k % dims.inner, step = reverse ? -dims.inner : dims.inner;
    int64_t at = o * dims.n * dims.inner + i + (reverse ? (dims.n - 1) * dims.inner : 0);
    double running = 0;
    for (int64_t j = 0; j < dims.n; ++j, at += step) y[at] = static_cast<T>(running += x[at]);
  }
};

// The launches on a device `dev`. Contracts: core/kernels.inc.
template <class T, class Device>
void sum_to_shape_launch(Device& dev, const T* x, const Shape& x_shape, const Shape& out_shape, T* out) {
  const int64_t outputs = numel(out_shape);
  if (outputs == 0) return;
  if (outputs == 1) return sum_all_launch(dev, numel(x_shape), Load<T>{x}, out);
  const SumLayout layout = sum_layout(x_shape, out_shape);
  if (layout.terms <= 32 || layout.outputs >= 65536)
    dev(layout.outputs, SumPerThread<T>{x, out, layout});
  else
    dev.blocks(sum_per_block_kernel<T>, layout.outputs, kThreads, 0, x, out, layout);
}

template <class T, class Device>
void max_dim_launch(const Device& dev, const T* x, const kernel::ReduceDims& dims, T* values, int64_t* argmax) {
  dev(dims.outer * dims.inner, MaxDim<T>{x, values, argmax, dims});
}

// dX zeroed by the caller.
template <class T, class Device>
void max_dim_backward_launch(const Device& dev, const T* dValues, const int64_t* argmax,
                             const kernel::ReduceDims& dims, T* dX) {
  dev(dims.outer * dims.inner, MaxDimBackward<T>{dValues, argmax, dX, dims});
}

template <class T, class Device>
void cumsum_launch(const Device& dev, const T* x, const kernel::ReduceDims& dims, bool reverse, T* y) {
  dev(dims.outer * dims.inner, CumSum<T>{x, y, dims, reverse});
}

}  // namespace
}  // namespace ag::cuda
