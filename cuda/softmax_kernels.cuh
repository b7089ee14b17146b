// Row-wise softmax kernels over rows [N, C]: one thread block per row (grid-stride over rows),
// its threads striding along the row, block_reduce for the row max and sums, so rows of any
// length work. Every row subtracts its max before exp; a fully masked row (all −inf) gives
// zeros, not NaN. With their launches, written once for any device (cuda/softmax.cu runs them
// on the GPU, tests/test_cuda_on_host.cpp on the host). Reference: core/cpu/softmax.cpp.
#pragma once
#include <cmath>
#include <cstdint>
#include <limits>

#include "cuda/grid.cuh"
#include "cuda/reduce_ops.cuh"

namespace ag::cuda {
namespace {

template <class T> constexpr T kNegInf = -std::numeric_limits<T>::infinity();

// y = softmax(x) over a row of n, by the whole block.
template <class T> __device__ void softmax_row(const T* x, T* y, int64_t n, T* scratch) {
  T max = kNegInf<T>;
  for (int64_t j = threadIdx.x; j < n; j += blockDim.x) max = MaxOp{}(max, x[j]);
  max = block_reduce(max, MaxOp{}, scratch);
  if (max == kNegInf<T>) {  // fully masked: no probability mass (the same for every thread)
    for (int64_t j = threadIdx.x; j < n; j += blockDim.x) y[j] = T(0);
    return;
  }
  T sum = 0;
  for (int64_t j = threadIdx.x; j < n; j += blockDim.x) {
    y[j] = std::exp(x[j] - max);
    sum += y[j];
  }
  const T inv = T(1) / block_reduce(sum, SumOp{}, scratch);
  for (int64_t j = threadIdx.x; j < n; j += blockDim.x) y[j] *= inv;  // the elements this thread wrote
}

// log Σ_j exp(x_j) over a row, by the whole block; −inf for a fully masked row.
template <class T> __device__ T logsumexp_row(const T* x, int64_t n, T* scratch) {
  T max = kNegInf<T>;
  for (int64_t j = threadIdx.x; j < n; j += blockDim.x) max = MaxOp{}(max, x[j]);
  max = block_reduce(max, MaxOp{}, scratch);
  if (max == kNegInf<T>) return max;
  T sum = 0;
  for (int64_t j = threadIdx.x; j < n; j += blockDim.x) sum += std::exp(x[j] - max);
  return max + std::log(block_reduce(sum, SumOp{}, scratch));
}

// Σ_j a_j b_j over a row (b = nullptr: Σ_j a_j), by the whole block.
template <class T> __device__ T row_dot(const T* a, const T* b, int64_t n, T* scratch) {
  T acc = 0;
  for (int64_t j = threadIdx.x; j < n; j += blockDim.x) acc += b ? a[j] * b[j] : a[j];
  return block_reduce(acc, SumOp{}, scratch);
}

// x [rows, C]
template <class T> __global__ void softmax_kernel(const T* x, T* y, int64_t rows, int64_t C) {
  __shared__ T scratch[32];
  for (int64_t r = blockIdx.x; r < rows; r += gridDim.x) softmax_row(x + r * C, y + r * C, C, scratch);
}

// dX = y ∘ (dY − Σ_j dY_j y_j)
template <class T> __global__ void softmax_backward_kernel(const T* y, const T* dY, T* dX, int64_t rows, int64_t C) {
  __shared__ T scratch[32];
  for (int64_t r = blockIdx.x; r < rows; r += gridDim.x) {
    const T *yr = y + r * C, *gr = dY + r * C;
    const T dot = row_dot(gr, yr, C, scratch);
    for (int64_t j = threadIdx.x; j < C; j += blockDim.x) dX[r * C + j] = yr[j] * (gr[j] - dot);
  }
}

template <class T> __global__ void log_softmax_kernel(const T* x, T* y, int64_t rows, int64_t C) {
  __shared__ T scratch[32];
  for (int64_t r = blockIdx.x; r < rows; r += gridDim.x) {
    const T lse = logsumexp_row(x + r * C, C, scratch);
    for (int64_t j = threadIdx.x; j < C; j += blockDim.x) y[r * C + j] = x[r * C + j] - lse;
  }
}

// dX = dY − exp(y) Σ_j dY_j
template <class T>
__global__ void log_softmax_backward_kernel(const T* y, const T* dY, T* dX, int64_t rows, int64_t C) {
  __shared__ T scratch[32];
  for (int64_t r = blockIdx.x; r < rows; r += gridDim.x) {
    const T sum = row_dot<T>(dY + r * C, nullptr, C, scratch);
    for (int64_t j = threadIdx.x; j < C; j += blockDim.x) dX[r * C + j] = dY[r * C + j] - std::exp(y[r * C + j]) * sum;
  }
}

// lse[r] = logsumexp(logits[r]); loss[r] = lse[r] − logits[r, t_r], 0 for ignored rows.
template <class T>
__global__ void cross_entropy_kernel(const T* logits, const int64_t* targets, int64_t ignore_index, T* loss, T* lse,
                                     T* scored, int64_t rows, int64_t V) {
  __shared__ T scratch[32];
  for (int64_t r = blockIdx.x; r < rows; r += gridDim.x) {
    const T row_lse = logsumexp_row(logits + r * V, V, scratch);
    if (threadIdx.x == 0) {
      const int64_t t = targets[r];
      const bool ignored = t == ignore_index, valid = t >= 0 && t < V;
      lse[r] = row_lse;
      scored[r] = ignored ? T(0) : T(1);
      // An out-of-range target reads nothing: the deferred check reports it.
      loss[r] = ignored ? T(0) : valid ? row_lse - logits[r * V + t] : T(NAN);
    }
  }
}

// dLogits[r] = scale · (softmax(logits[r]) − onehot(t_r)), zero for ignored rows.
template <class T>
__global__ void cross_entropy_backward_kernel(const T* logits, const int64_t* targets, const T* lse,
                                              int64_t ignore_index, const T* scale_at, T* dLogits, int64_t rows,
                                              int64_t V) {
  const T scale = *scale_at;
  for (int64_t r = blockIdx.x; r < rows; r += gridDim.x) {
    const int64_t t = targets[r];
    T* dr = dLogits + r * V;
    for (int64_t j = threadIdx.x; j < V; j += blockDim.x) {
      if (t == ignore_index) {
        dr[j] = T(0);
        continue;
      }
      T d = scale * std::exp(logits[r * V + j] - lse[r]);
      if (j == t) d -= scale;
      dr[j] = d;
    }
  }
}

// The launches on a device `dev` (cuda/launch.cuh's Gpu; the host tests' Device): N rows of C, one
// block of row_threads(C) threads per row. Contracts: core/kernels.inc.
template <class T, class Device> void softmax_launch(const Device& dev, const T* x, int64_t N, int64_t C, T* y) {
  dev.blocks(softmax_kernel<T>, N, row_threads(C), 0, x, y, N, C);
}
template <class T, class Device>
void softmax_backward_launch(const Device& dev, const T* y, const T* dY, int64_t N, int64_t C, T* dX) {
  dev.blocks(softmax_backward_kernel<T>, N, row_threads(C), 0, y, dY, dX, N, C);
}
template <class T, class Device> void log_softmax_launch(const Device& dev, const T* x, int64_t N, int64_t C, T* y) {
  dev.blocks(log_softmax_kernel<T>, N, row_threads(C), 0, x, y, N, C);
}
template <class T, class Device>
void log_softmax_backward_launch(const Device& dev, const T* y, const T* dY, int64_t N, int64_t C, T* dX) {
  dev.blocks(log_softmax_backward_kernel<T>, N, row_threads(C), 0, y, dY, dX, N, C);
}
template <class T, class Device>
void cross_entropy_launch(const Device& dev, const T* logits, const int64_t* targets, int64_t ignore_index, int64_t N,
                          int64_t V, T* loss, T* lse, T* scored) {
  dev.blocks(cross_entropy_kernel<T>, N, row_threads(V), 0, logits, targets, ignore_index, loss, lse, scored, N, V);
}
template <class T, class Device>
void cross_entropy_backward_launch(const Device& dev, const T* logits, const int64_t* targets, const T* lse,
                                   int64_t ignore_index, const T* scale, int64_t N, int64_t V, T* dLogits) {
  dev.blocks(cross_entropy_backward_kernel<T>, N, row_threads(V), 0, logits, targets, lse, ignore_index, scale,
             dLogits, N, V);
}

}  // namespace
}  // namespace ag::cuda
