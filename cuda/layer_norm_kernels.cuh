// Layer norm over rows [N, C], and the residual add fused before it. Forward and the dX part of
// backward: one thread block per row, block_reduce for the row statistics. dWeight and dBias are
// column sums over all N rows, done in two deterministic passes (no atomics): chunks of rows into
// partial sums, then the partials in order. With their launches, written once for any device
// (cuda/layer_norm.cu runs them on the GPU, tests/test_cuda_on_host.cpp on the host).
// Reference: core/cpu/layer_norm.cpp (the formulas are there).
#pragma once
#include <algorithm>
#include <cmath>
#include <cstdint>

#include "cuda/grid.cuh"
#include "cuda/reduce_ops.cuh"

namespace ag::cuda {
namespace {

// Per row: mean, then the variance around it (two passes, as on the CPU), rstd = 1/√(var + eps).
// With a residual (add_layer_norm) the row is first sum = x + residual, written
// out, and normalized from there: each thread reads back only what it wrote.
template <class T>
__global__ void layer_norm_kernel(const T* x, const T* residual, const T* weight, const T* bias, T eps, T* sum, T* y,
                                  T* mean, T* rstd, int64_t N, int64_t C) {
  __shared__ T scratch[32];
  for (int64_t r = blockIdx.x; r < N; r += gridDim.x) {
    const T* xr = x + r * C;
    if (residual) {
      T* sr = sum + r * C;
      for (int64_t c = threadIdx.x; c < C; c += blockDim.x) sr[c] = xr[c] + residual[r * C + c];
      xr = sr;
    }
    T acc = 0;
    for (int64_t c = threadIdx.x; c < C; c += blockDim.x) acc += xr[c];
    const T m = block_reduce(acc, SumOp{}, scratch) / static_cast<T>(C);
    acc = 0;
    for (int64_t c = threadIdx.x; c < C; c += blockDim.x) acc += (xr[c] - m) * (xr[c] - m);
    const T var = block_reduce(acc, SumOp{}, scratch);
    const T s = T(1) / std::sqrt(var / static_cast<T>(C) + eps);
    for (int64_t c = threadIdx.x; c < C; c += blockDim.x) y[r * C + c] = (xr[c] - m) * s * weight[c] + bias[c];
    if (threadIdx.x == 0) {
      mean[r] = m;
      rstd[r] = s;
    }
  }
}

// dX = rstd · (g − mean(g) − x̂ ∘ mean(g ∘ x̂)) per row, g = dY ∘ weight, x̂ = (x − mean)·rstd.
template <class T>
__global__ void layer_norm_dx_kernel(const T* x, const T* weight, const T* mean, const T* rstd, const T* dY, T* dX,
                                     int64_t N, int64_t C) {
  __shared__ T scratch[32];
  for (int64_t r = blockIdx.x; r < N; r += gridDim.x) {
    const T *xr = x + r * C, *gr = dY + r * C;
    const T m = mean[r], s = rstd[r];
    T acc_g = 0, acc_gx = 0;
    for (int64_t c = threadIdx.x; c < C; c += blockDim.x) {
      const T g = gr[c] * weight[c];
      acc_g += g;
      acc_gx += g * (xr[c] - m) * s;
    }
    const T mean_g = block_reduce(acc_g, SumOp{}, scratch) / static_cast<T>(C);
    const T mean_gx = block_reduce(acc_gx, SumOp{}, scratch) / static_cast<T>(C);
    for (int64_t c = threadIdx.x; c < C; c += blockDim.x)
      dX[r * C + c] = s * (gr[c] * weight[c] - mean_g - (xr[c] - m) * s * mean_gx);
  }
}

// Pass 1 of dWeight = Σ_rows dY ∘ x̂ and dBias = Σ_rows dY: task k covers
// columns [cb·blockDim, cb·blockDim + blockDim) of rows chunk·rows_per_chunk onwards
// (k = chunk·column_blocks + cb), blocks striding over the tasks; each thread one column,
// rows in order.
template <class T>
__global__ void layer_norm_dwdb_partial_kernel(const T* x, const T* mean, const T* rstd, const T* dY,
                                               double* partial_dw, double* partial_db, int64_t N, int64_t C,
                                               int64_t chunks, int64_t column_blocks, int64_t rows_per_chunk) {
  for (int64_t task = blockIdx.x; task < chunks * column_blocks; task += gridDim.x) {
    const int64_t chunk = task / column_blocks;
    const int64_t c = (task % column_blocks) * blockDim.x + threadIdx.x;
    if (c >= C) continue;
    const int64_t first = chunk * rows_per_chunk, last = first + rows_per_chunk < N ? first + rows_per_chunk : N;
    double dw = 0, db = 0;
    for (int64_t r = first; r < last; ++r) {
      const T g = dY[r * C + c];
      dw += static_cast<double>(g * (x[r * C + c] - mean[r]) * rstd[r]);
      db += static_cast<double>(g);
    }
    partial_dw[chunk * C + c] = dw;
    partial_db[chunk * C + c] = db;
  }
}

// Pass 2: each column adds its chunks' partials in chunk order.
template <class T> struct SumChunks {
  const double *partial_dw, *partial_db;
  T *dWeight, *dBias;
  int64_t chunks, C;
  __device__ void operator()(int64_t c) const {
    double dw = 0, db = 0;
    for (int64_t k = 0; k < chunks; ++k) {
      dw += partial_dw[k * C + c];
      db += partial_db[k * C + c];
    }
    dWeight[c] = static_cast<T>(dw);
    dBias[c] = static_cast<T>(db);
  }
};

// Chunks of at least 32 rows, at most 256 chunks: enough blocks to fill the
// GPU for the usual N = B·T in the thousands. Depends on N only (determinism).
constexpr int64_t kMinRowsPerChunk = 32, kMaxChunks = 256;

// The launches on a device `dev` (cuda/launch.cuh's Gpu; the host tests' Device): N rows of C.
// residual and sum null: layer_norm; both given: add_layer_norm. Contracts: core/kernels.inc.
template <class T, class Device>
void layer_norm_launch(const Device& dev, const T* x, const T* residual, const T* weight, const T* bias, T eps,
                       int64_t N, int64_t C, T* sum, T* y, T* mean, T* rstd) {
  dev.blocks(layer_norm_kernel<T>, N, row_threads(C), 0, x, residual, weight, bias, eps, sum, y, mean, rstd, N, C);
}

template <class T, class Device>
void layer_norm_backward_launch(Device& dev, const T* x, const T* weight, const T* mean, const T* rstd, const T* dY,
                                int64_t N, int64_t C, T* dX, T* dWeight, T* dBias) {
  dev.blocks(layer_norm_dx_kernel<T>, N, row_threads(C), 0, x, weight, mean, rstd, dY, dX, N, C);
  if (C == 0) return;
  const int64_t chunks = std::clamp<int64_t>(N / kMinRowsPerChunk, 1, kMaxChunks);
  const int64_t rows_per_chunk = (N + chunks - 1) / chunks;
  const int64_t column_blocks = (C + kThreads - 1) / kThreads;
  double* partial_dw = dev.template scratch<double>(chunks * C);
  double* partial_db = dev.template scratch<double>(chunks * C);
  dev.blocks(layer_norm_dwdb_partial_kernel<T>, chunks * column_blocks, kThreads, 0, x, mean, rstd, dY, partial_dw,
             partial_db, N, C, chunks, column_blocks, rows_per_chunk);
  dev(C, SumChunks<T>{partial_dw, partial_db, dWeight, dBias, chunks, C});
}

}  // namespace
}  // namespace ag::cuda
