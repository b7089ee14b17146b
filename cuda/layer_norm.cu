// Layer norm over rows [N, C], and the residual add fused before it. Forward and
// the dX part of backward: one thread block per row, block_reduce for the row statistics. dWeight and dBias are
// column sums over all N rows, done in two deterministic passes (no atomics):
// chunks of rows into partial sums, then the partials in order.
// Reference: core/cpu/layer_norm.cpp (the formulas are there).
#include "cuda/cuda.h"
#include "cuda/launch.cuh"

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

// Pass 1 of dWeight = Σ_rows dY ∘ x̂ and dBias = Σ_rows dY: block b covers
// columns [cb·256, cb·256 + 256) of rows chunk·rows_per_chunk onwards
// (b = chunk·column_blocks + cb); each thread one column, rows in order.
template <class T>
__global__ void layer_norm_dwdb_partial_kernel(const T* x, const T* mean, const T* rstd, const T* dY,
                                               double* partial_dw, double* partial_db, int64_t N, int64_t C,
                                               int64_t column_blocks, int64_t rows_per_chunk) {
  const int64_t chunk = blockIdx.x / column_blocks;
  const int64_t c = (blockIdx.x % column_blocks) * blockDim.x + threadIdx.x;
  if (c >= C) return;
  const int64_t first = chunk * rows_per_chunk, last = std::min(N, first + rows_per_chunk);
  double dw = 0, db = 0;
  for (int64_t r = first; r < last; ++r) {
    const T g = dY[r * C + c];
    dw += static_cast<double>(g * (x[r * C + c] - mean[r]) * rstd[r]);
    db += static_cast<double>(g);
  }
  partial_dw[chunk * C + c] = dw;
  partial_db[chunk * C + c] = db;
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
}  // namespace

void layer_norm(const Tensor& x, const Tensor& weight, const Tensor& bias, double eps, Tensor& y, Tensor& mean,
                Tensor& rstd) {
  visit_floating(x.dtype(), "layer_norm", [&](auto zero) {
    using T = decltype(zero);
    const int64_t C = x.shape().back(), N = x.numel() / std::max<int64_t>(C, 1);
    launch_rows(layer_norm_kernel<T>, N, C, ptr<const T>(x), static_cast<const T*>(nullptr), ptr<const T>(weight),
                ptr<const T>(bias), static_cast<T>(eps), static_cast<T*>(nullptr), ptr<T>(y), ptr<T>(mean),
                ptr<T>(rstd), N, C);
  });
}

void add_layer_norm(const Tensor& x, const Tensor& residual, const Tensor& weight, const Tensor& bias, double eps,
                    Tensor& sum, Tensor& y, Tensor& mean, Tensor& rstd) {
  visit_floating(x.dtype(), "add_layer_norm", [&](auto zero) {
    using T = decltype(zero);
    const int64_t C = x.shape().back(), N = x.numel() / std::max<int64_t>(C, 1);
    launch_rows(layer_norm_kernel<T>, N, C, ptr<const T>(x), ptr<const T>(residual), ptr<const T>(weight),
                ptr<const T>(bias), static_cast<T>(eps), ptr<T>(sum), ptr<T>(y), ptr<T>(mean), ptr<T>(rstd), N, C);
  });
}

void layer_norm_backward(const Tensor& x, const Tensor& weight, const Tensor& mean, const Tensor& rstd,
                         const Tensor& dY, Tensor& dX, Tensor& dWeight, Tensor& dBias) {
  visit_floating(x.dtype(), "layer_norm_backward", [&](auto zero) {
    using T = decltype(zero);
    const int64_t C = x.shape().back(), N = x.numel() / std::max<int64_t>(C, 1);
    launch_rows(layer_norm_dx_kernel<T>, N, C, ptr<const T>(x), ptr<const T>(weight), ptr<const T>(mean),
                ptr<const T>(rstd), ptr<const T>(dY), ptr<T>(dX), N, C);
    if (C == 0) return;
    const int64_t chunks = std::clamp<int64_t>(N / kMinRowsPerChunk, 1, kMaxChunks);
    const int64_t rows_per_chunk = (N + chunks - 1) / chunks;
    const int64_t column_blocks = (C + kThreads - 1) / kThreads;
    const Tensor partial_dw = Tensor::empty({chunks, C}, DType::Float64, Device::CUDA);
    const Tensor partial_db = Tensor::empty({chunks, C}, DType::Float64, Device::CUDA);
    const int64_t blocks = chunks * column_blocks;
    AG_CHECK(blocks <= INT32_MAX, "layer_norm_backward: C = " << C << " too large for one grid");
    layer_norm_dwdb_partial_kernel<<<static_cast<unsigned>(blocks), kThreads, 0, current_stream()>>>(
        ptr<const T>(x), ptr<const T>(mean), ptr<const T>(rstd), ptr<const T>(dY), ptr<double>(partial_dw),
        ptr<double>(partial_db), N, C, column_blocks, rows_per_chunk);
    AG_CUDA_CHECK_LAUNCH();
    for_each_index(C, SumChunks<T>{ptr<const double>(partial_dw), ptr<const double>(partial_db), ptr<T>(dWeight),
                                   ptr<T>(dBias), chunks, C});
  });
}

}  // namespace ag::cuda
