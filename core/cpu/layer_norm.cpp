#include <cmath>

#include "core/cpu/cpu.h"
#include "core/cpu/loops.h"
#include "core/cpu/vector_math.h"

namespace ag::cpu {

namespace {
// One row of C: mean, then the variance around it (two passes: one pass
// E[x²] − E[x]² cancels catastrophically when |mean| >> std), rstd =
// 1/√(var + eps), y = (x − mean)·rstd·w + b. The sums are vector reductions
// (omp simd): a fixed order for a given build and CPU, whatever the thread
// count. The float rows are compiled for AVX-512 too (AG_VECTOR_CLONES,
// core/cpu/vector_math.h, which explains the always_inline).
template <class T>
[[gnu::always_inline]] inline void normalize_row(const T* x, const T* w, const T* b, T eps, int64_t C, T* y, T& mean,
                                                 T& rstd) {
  T m = 0;
#pragma omp simd reduction(+ : m)
  for (int64_t c = 0; c < C; ++c) m += x[c];
  m /= static_cast<T>(C);
  T var = 0;
#pragma omp simd reduction(+ : var)
  for (int64_t c = 0; c < C; ++c) var += (x[c] - m) * (x[c] - m);
  const T s = T(1) / std::sqrt(var / static_cast<T>(C) + eps);
#pragma omp simd
  for (int64_t c = 0; c < C; ++c) y[c] = (x[c] - m) * s * w[c] + b[c];
  mean = m;
  rstd = s;
}
AG_VECTOR_CLONES void normalize_row(const float* x, const float* w, const float* b, float eps, int64_t C, float* y,
                                    float& mean, float& rstd) {
  normalize_row<float>(x, w, b, eps, C, y, mean, rstd);
}

// One row of dX = rstd · (g − mean(g) − x̂ ∘ mean(g ∘ x̂)), g = dY ∘ weight
// (layer_norm_backward below).
template <class T>
[[gnu::always_inline]] inline void normalize_row_backward(const T* x, const T* dY, const T* w, T mean, T rstd,
                                                          int64_t C, T* dX) {
  T mean_g = 0, mean_gx = 0;
#pragma omp simd reduction(+ : mean_g, mean_gx)
  for (int64_t c = 0; c < C; ++c) {
    const T g = dY[c] * w[c];
    mean_g += g;
    mean_gx += g * (x[c] - mean) * rstd;
  }
  mean_g /= static_cast<T>(C);
  mean_gx /= static_cast<T>(C);
#pragma omp simd
  for (int64_t c = 0; c < C; ++c) dX[c] = rstd * (dY[c] * w[c] - mean_g - (x[c] - mean) * rstd * mean_gx);
}
AG_VECTOR_CLONES void normalize_row_backward(const float* x, const float* dY, const float* w, float mean, float rstd,
                                             int64_t C, float* dX) {
  normalize_row_backward<float>(x, dY, w, mean, rstd, C, dX);
}

// Columns [first, last) of dWeight = Σ_rows dY ∘ x̂ and dBias = Σ_rows dY, added
// into weight_sums and bias_sums in double, rows in order (sum_column_blocks).
template <class T> struct LayerNormRows {
  const T *x, *dY, *mean, *rstd;
  int64_t N, C;
};
template <class T>
[[gnu::always_inline]] inline void layer_norm_param_grads(const LayerNormRows<T>& in, int64_t first, int64_t last,
                                                          double* weight_sums, double* bias_sums) {
  for (int64_t r = 0; r < in.N; ++r) {
    const T *x = in.x + r * in.C, *dY = in.dY + r * in.C;
    const T m = in.mean[r], s = in.rstd[r];
#pragma omp simd
    for (int64_t c = first; c < last; ++c) {
      weight_sums[c - first] += static_cast<double>(dY[c] * (x[c] - m) * s);
      bias_sums[c - first] += static_cast<double>(dY[c]);
    }
  }
}
AG_VECTOR_CLONES void layer_norm_param_grads(const LayerNormRows<float>& in, int64_t first, int64_t last,
                                             double* weight_sums, double* bias_sums) {
  layer_norm_param_grads<float>(in, first, last, weight_sums, bias_sums);
}

// sum = x + residual over a row; the float version is compiled for AVX-512 too.
template <class T> [[gnu::always_inline]] inline void add_row(const T* x, const T* residual, T* sum, int64_t C) {
#pragma omp simd
  for (int64_t c = 0; c < C; ++c) sum[c] = x[c] + residual[c];
}
AG_VECTOR_CLONES void add_row(const float* x, const float* residual, float* sum, int64_t C) {
  add_row<float>(x, residual, sum, C);
}

// Rows [N, C] of x, each normalized by normalize_row; with a residual, the row
// is first sum = x + residual (written out: the residual stream goes on), and
// sum is normalized while it is still in cache.
template <class T>
void layer_norm_rows(const Tensor& x, const Tensor* residual, const Tensor& weight, const Tensor& bias, double eps,
                     Tensor* sum, Tensor& y, Tensor& mean, Tensor& rstd) {
  const int64_t C = x.shape().back(), N = x.numel() / std::max<int64_t>(C, 1);
  const T *px = x.data<T>(), *w = weight.data<T>(), *b = bias.data<T>();
  const T* pres = residual ? residual->data<T>() : nullptr;
  T *psum = sum ? sum->data<T>() : nullptr, *py = y.data<T>(), *pm = mean.data<T>(), *pr = rstd.data<T>();
#pragma omp parallel for schedule(static) if (N * C > kParallelGrain)
  for (int64_t r = 0; r < N; ++r) {
    const T* xr = px + r * C;
    if (pres) {
      add_row(xr, pres + r * C, psum + r * C, C);
      xr = psum + r * C;
    }
    normalize_row(xr, w, b, static_cast<T>(eps), C, py + r * C, pm[r], pr[r]);
  }
}
}  // namespace

void layer_norm(const Tensor& x, const Tensor& weight, const Tensor& bias, double eps, Tensor& y,
                Tensor& mean, Tensor& rstd) {
  visit_floating(x.dtype(), "layer_norm", [&](auto zero) {
    layer_norm_rows<decltype(zero)>(x, nullptr, weight, bias, eps, nullptr, y, mean, rstd);
  });
}

void add_layer_norm(const Tensor& x, const Tensor& residual, const Tensor& weight, const Tensor& bias, double eps,
                    Tensor& sum, Tensor& y, Tensor& mean, Tensor& rstd) {
  visit_floating(x.dtype(), "add_layer_norm", [&](auto zero) {
    layer_norm_rows<decltype(zero)>(x, &residual, weight, bias, eps, &sum, y, mean, rstd);
  });
}

// With x̂ = (x − mean)·rstd and g = dY ∘ weight (the gradient at x̂):
//   dX = rstd · (g − mean(g) − x̂ ∘ mean(g ∘ x̂))   per row,
//   dWeight = Σ_rows dY ∘ x̂,   dBias = Σ_rows dY.
// dX rows run in parallel; the column sums are sum_column_blocks' (core/cpu/loops.h),
// so the result does not depend on the thread count.
void layer_norm_backward(const Tensor& x, const Tensor& weight, const Tensor& mean, const Tensor& rstd,
                         const Tensor& dY, Tensor& dX, Tensor& dWeight, Tensor& dBias) {
  visit_floating(x.dtype(), "layer_norm_backward", [&](auto zero) {
    using T = decltype(zero);
    const int64_t C = x.shape().back(), N = x.numel() / std::max<int64_t>(C, 1);
    const T *px = x.data<T>(), *w = weight.data<T>(), *pm = mean.data<T>(), *pr = rstd.data<T>(),
            *pg = dY.data<T>();
    T *pdx = dX.data<T>(), *dw = dWeight.data<T>(), *db = dBias.data<T>();
    for_rows(N, C, [&](int64_t r) { normalize_row_backward(px + r * C, pg + r * C, w, pm[r], pr[r], C, pdx + r * C); });
    const LayerNormRows<T> rows{px, pg, pm, pr, N, C};
    sum_column_blocks(N, C, dw, [&](int64_t first, int64_t last, double* weight_sums) {
      double bias_sums[kColumnBlock];
      std::fill_n(bias_sums, last - first, 0.0);
      layer_norm_param_grads(rows, first, last, weight_sums, bias_sums);
      for (int64_t c = first; c < last; ++c) db[c] = static_cast<T>(bias_sums[c - first]);
    });
  });
}

}  // namespace ag::cpu
