// Reductions. sum_to_shape adds every x element into the out element it
// broadcasts from, in double (as the CPU does), each output's terms in a fixed
// order, so the bits are the same every run. Reference: core/cpu/reduce.cpp.
#include "cuda/cuda.h"
#include "cuda/launch.cuh"

namespace ag::cuda {

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
  ReduceDims dims;
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
  ReduceDims dims;
  __device__ void operator()(int64_t k) const {
    const int64_t o = k / dims.inner, i = k % dims.inner;
    dX[(o * dims.n + argmax[k]) * dims.inner + i] = dValues[k];
  }
};

// Over dim n of x [outer, n, inner]: one thread per line (o, i), its terms in order, in double.
template <class T> struct CumSum {
  const T* x;
  T* y;
  ReduceDims dims;
  bool reverse;
  __device__ void operator()(int64_t k) const {
    const int64_t o = k / dims.inner, i = k % dims.inner, step = reverse ? -dims.inner : dims.inner;
    int64_t at = o * dims.n * dims.inner + i + (reverse ? (dims.n - 1) * dims.inner : 0);
    double running = 0;
    for (int64_t j = 0; j < dims.n; ++j, at += step) y[at] = static_cast<T>(running += x[at]);
  }
};
}  // namespace

void sum_to_shape(const Tensor& x, Tensor& out) {
  visit_floating(x.dtype(), "sum_to_shape", [&](auto zero) {
    using T = decltype(zero);
    if (out.numel() == 0) return;
    if (out.numel() == 1) return sum_all(x.numel(), Load<T>{ptr<const T>(x)}, ptr<T>(out));
    const SumLayout layout = sum_layout(x.shape(), out.shape());
    if (layout.terms <= 32 || layout.outputs >= 65536) {
      for_each_index(layout.outputs, SumPerThread<T>{ptr<const T>(x), ptr<T>(out), layout});
    } else {
      const unsigned blocks = grid_for(layout.outputs);
      sum_per_block_kernel<<<blocks, kThreads, 0, current_stream()>>>(ptr<const T>(x), ptr<T>(out), layout);
      AG_CUDA_CHECK_LAUNCH();
    }
  });
}

void max_dim(const Tensor& x, const ReduceDims& dims, Tensor& values, Tensor& argmax) {
  visit_floating(x.dtype(), "max", [&](auto zero) {
    using T = decltype(zero);
    for_each_index(dims.outer * dims.inner, MaxDim<T>{ptr<const T>(x), ptr<T>(values), ptr<int64_t>(argmax), dims});
  });
}

void max_dim_backward(const Tensor& dValues, const Tensor& argmax, const ReduceDims& dims, Tensor& dX) {
  visit_floating(dValues.dtype(), "max_backward", [&](auto zero) {
    using T = decltype(zero);
    if (dX.numel() == 0) return;
    AG_CUDA_CHECK(cudaMemsetAsync(dX.raw_data(), 0, dX.numel() * sizeof(T), current_stream()));
    for_each_index(dims.outer * dims.inner,
                   MaxDimBackward<T>{ptr<const T>(dValues), ptr<const int64_t>(argmax), ptr<T>(dX), dims});
  });
}

void cumsum(const Tensor& x, const ReduceDims& dims, bool reverse, Tensor& y) {
  visit_floating(x.dtype(), "cumsum", [&](auto zero) {
    using T = decltype(zero);
    for_each_index(dims.outer * dims.inner, CumSum<T>{ptr<const T>(x), ptr<T>(y), dims, reverse});
  });
}

}  // namespace ag::cuda
