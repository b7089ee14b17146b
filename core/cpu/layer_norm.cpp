#include <cmath>

#include "core/cpu/cpu.h"
#include "core/cpu/loops.h"

namespace ag::cpu {

// Per row: mean, then variance around it (two passes: one pass E[x²] − E[x]²
// cancels catastrophically when |mean| >> std), rstd = 1/√(var + eps).
void layer_norm(const Tensor& x, const Tensor& weight, const Tensor& bias, double eps, Tensor& y,
                Tensor& mean, Tensor& rstd) {
  visit_floating(x.dtype(), "layer_norm", [&](auto zero) {
    using T = decltype(zero);
    const int64_t C = x.shape().back(), N = x.numel() / std::max<int64_t>(C, 1);
    const T *px = x.data<T>(), *w = weight.data<T>(), *b = bias.data<T>();
    T *py = y.data<T>(), *pm = mean.data<T>(), *pr = rstd.data<T>();
#pragma omp parallel for schedule(static) if (N * C > kParallelGrain)
    for (int64_t r = 0; r < N; ++r) {
      const T* xr = px + r * C;
      T* yr = py + r * C;
      T m = 0;
      for (int64_t c = 0; c < C; ++c) m += xr[c];
      m /= static_cast<T>(C);
      T var = 0;
      for (int64_t c = 0; c < C; ++c) var += (xr[c] - m) * (xr[c] - m);
      const T s = T(1) / std::sqrt(var / static_cast<T>(C) + static_cast<T>(eps));
      for (int64_t c = 0; c < C; ++c) yr[c] = (xr[c] - m) * s * w[c] + b[c];
      pm[r] = m;
      pr[r] = s;
    }
  });
}

// With x̂ = (x − mean)·rstd and g = dY ∘ weight (the gradient at x̂):
//   dX = rstd · (g − mean(g) − x̂ ∘ mean(g ∘ x̂))   per row,
//   dWeight = Σ_rows dY ∘ x̂,   dBias = Σ_rows dY.
// dX rows run in parallel; the column sums run after, over rows in order, so the
// result does not depend on the thread count.
void layer_norm_backward(const Tensor& x, const Tensor& weight, const Tensor& mean, const Tensor& rstd,
                         const Tensor& dY, Tensor& dX, Tensor& dWeight, Tensor& dBias) {
  visit_floating(x.dtype(), "layer_norm_backward", [&](auto zero) {
    using T = decltype(zero);
    const int64_t C = x.shape().back(), N = x.numel() / std::max<int64_t>(C, 1);
    const T *px = x.data<T>(), *w = weight.data<T>(), *pm = mean.data<T>(), *pr = rstd.data<T>(),
            *pg = dY.data<T>();
    T *pdx = dX.data<T>(), *dw = dWeight.data<T>(), *db = dBias.data<T>();
#pragma omp parallel for schedule(static) if (N * C > kParallelGrain)
    for (int64_t r = 0; r < N; ++r) {
      const T *xr = px + r * C, *gr = pg + r * C;
      const T m = pm[r], s = pr[r];
      T mean_g = 0, mean_gx = 0;
      for (int64_t c = 0; c < C; ++c) {
        const T g = gr[c] * w[c];
        mean_g += g;
        mean_gx += g * (xr[c] - m) * s;
      }
      mean_g /= static_cast<T>(C);
      mean_gx /= static_cast<T>(C);
      T* dxr = pdx + r * C;
      for (int64_t c = 0; c < C; ++c) dxr[c] = s * (gr[c] * w[c] - mean_g - (xr[c] - m) * s * mean_gx);
    }
    std::fill_n(dw, C, T(0));
    std::fill_n(db, C, T(0));
    for (int64_t r = 0; r < N; ++r) {
      const T *xr = px + r * C, *gr = pg + r * C;
      const T m = pm[r], s = pr[r];
      for (int64_t c = 0; c < C; ++c) {
        dw[c] += gr[c] * (xr[c] - m) * s;
        db[c] += gr[c];
      }
    }
  });
}

}  // namespace ag::cpu
