// Optimizer-update CPU kernels: one flat, in-place loop per parameter tensor,
// over the per-element updates of core/optimizer_math.h.
#include <cmath>

#include "core/cpu/cpu.h"
#include "core/cpu/loops.h"
#include "core/cpu/vector_math.h"
#include "core/optimizer_math.h"

namespace ag::cpu {

namespace {
bool skipped(const double* skip_unless_finite) { return skip_unless_finite && !std::isfinite(*skip_unless_finite); }

// AdamW over n elements; the float version is compiled for AVX-512 too
// (AG_VECTOR_CLONES, core/cpu/vector_math.h, which explains the always_inline).
template <class T>
[[gnu::always_inline]] inline void adam_range(const math::AdamUpdate<T>& update, T* __restrict p,
                                              const T* __restrict g, T* __restrict m, T* __restrict v, int64_t n) {
#pragma omp simd
  for (int64_t i = 0; i < n; ++i) update.apply(p[i], g[i], m[i], v[i]);
}
AG_VECTOR_CLONES void adam_range(const math::AdamUpdate<float>& update, float* __restrict p,
                                 const float* __restrict g, float* __restrict m, float* __restrict v, int64_t n) {
  adam_range<float>(update, p, g, m, v, n);
}
}  // namespace

void adam_step(Tensor& param, const Tensor& grad, Tensor& m, Tensor& v, const kernel::AdamHyper& hyper) {
  if (skipped(hyper.skip_unless_finite)) return;
  visit_floating(param.dtype(), "adam_step", [&](auto zero) {
    using T = decltype(zero);
    T* __restrict p = param.data<T>();
    const T* __restrict g = grad.data<T>();
    T* __restrict pm = m.data<T>();
    T* __restrict pv = v.data<T>();
    const math::AdamUpdate<T> update(p, g, pm, pv, hyper, math::adam_step_at(hyper, *hyper.applied_steps + 1));
    for_chunks(param.numel(), [&](int64_t begin, int64_t n) {
      adam_range(update, p + begin, g + begin, pm + begin, pv + begin, n);
    });
  });
}

void sgd_step(Tensor& param, const Tensor& grad, Tensor& momentum_buffer, const kernel::SgdHyper& hyper) {
  if (skipped(hyper.skip_unless_finite)) return;
  const bool use_momentum = hyper.momentum != 0.0;
  visit_floating(param.dtype(), "sgd_step", [&](auto zero) {
    using T = decltype(zero);
    T* __restrict p = param.data<T>();
    const T* __restrict g = grad.data<T>();
    // Without momentum the update never reads b: it aliases p, so the loop stays one loop.
    T* b = use_momentum ? momentum_buffer.data<T>() : p;
    const math::SgdUpdate<T> update(p, g, use_momentum ? b : nullptr, hyper, *hyper.applied_steps == 0, hyper.rate());
    const int64_t n = param.numel();
#pragma omp parallel for simd schedule(static) if (n > kParallelGrain)
    for (int64_t i = 0; i < n; ++i) update.apply(p[i], g[i], b[i]);
  });
}

void count_applied_step(Tensor& applied_steps, const double* skip_unless_finite) {
  if (!skipped(skip_unless_finite)) ++applied_steps.data<int64_t>()[0];
}

namespace {
// Σ x[i]² over n elements, in double: a float32 sum over millions of squares
// would lose digits. The float version is compiled for AVX-512 too.
template <class T> [[gnu::always_inline]] inline double sum_of_squares_range(const T* x, int64_t n) {
  double total = 0.0;
#pragma omp simd reduction(+ : total)
  for (int64_t i = 0; i < n; ++i) total += static_cast<double>(x[i]) * static_cast<double>(x[i]);
  return total;
}
AG_VECTOR_CLONES double sum_of_squares_range(const float* x, int64_t n) { return sum_of_squares_range<float>(x, n); }
}  // namespace

void sum_of_squares(const Tensor& x, Tensor& total) {
  total.data<double>()[0] = visit_floating(x.dtype(), "sum_of_squares", [&](auto zero) {
    using T = decltype(zero);
    const T* p = x.data<T>();
    const int64_t n = x.numel(), chunks = (n + kChunk - 1) / kChunk;
    double sum = 0.0;
#pragma omp parallel for schedule(static) reduction(+ : sum) if (n > kParallelGrain)
    for (int64_t c = 0; c < chunks; ++c) sum += sum_of_squares_range(p + c * kChunk, std::min(kChunk, n - c * kChunk));
    return sum;
  });
}

void clip_by_norm(Tensor& x, const Tensor& sum_of_squares, double max_norm) {
  const double coef = math::clip_coefficient(sum_of_squares.data<double>()[0], max_norm);
  if (coef >= 1.0) return;
  visit_floating(x.dtype(), "clip_by_norm", [&](auto zero) {
    using T = decltype(zero);
    T* p = x.data<T>();
    const T f = static_cast<T>(coef);
    const int64_t n = x.numel();
#pragma omp parallel for simd schedule(static) if (n > kParallelGrain)
    for (int64_t i = 0; i < n; ++i) p[i] *= f;
  });
}

}  // namespace ag::cpu
