// Row-wise softmax kernels. Every row subtracts its max before exp, so no
// exp() sees a positive argument; a row whose entries are all −inf (fully
// masked) gives zeros rather than NaN.
#include <cmath>
#include <limits>

#include "core/cpu/cpu.h"
#include "core/cpu/loops.h"
#include "core/cpu/vector_math.h"

namespace ag::cpu {

namespace {

// Rows [N, C] of a tensor of any rank (the last dim is C).
int64_t row_length(const Tensor& t) { return t.dim() == 0 ? 1 : t.shape().back(); }

// y = softmax(x) over a row of n.
template <class T> void softmax_row(const T* x, T* y, int64_t n) {
  T max = -std::numeric_limits<T>::infinity();
  for (int64_t j = 0; j < n; ++j) max = std::max(max, x[j]);
  if (max == -std::numeric_limits<T>::infinity()) {  // fully masked: no probability mass
    std::fill_n(y, n, T(0));
    return;
  }
  T sum = 0;
  for (int64_t j = 0; j < n; ++j) {
    y[j] = std::exp(x[j] - max);
    sum += y[j];
  }
  const T inv = T(1) / sum;
  for (int64_t j = 0; j < n; ++j) y[j] *= inv;
}

// log-sum-exp of a row; −inf for a fully masked row. Vectorised: the max and
// the sum in vector lanes, exp as exp_nonpositive (core/cpu/vector_math.h) in
// float; float is compiled for AVX-512 too (AG_VECTOR_CLONES). With a libm
// expf per element and one in-order chain of adds, cross-entropy over the
// default model's 65 logits cost 3 ns per logit.
template <class T> [[gnu::always_inline]] inline T logsumexp_row_of(const T* x, int64_t n) {
  const T max = math::max_of(x, n);
  if (max == -std::numeric_limits<T>::infinity()) return max;
  T sum = 0;
#pragma omp simd reduction(+ : sum)
  for (int64_t j = 0; j < n; ++j) sum += math::exp_nonpositive(x[j] - max);
  return max + std::log(sum);
}
AG_VECTOR_CLONES float logsumexp_row(const float* x, int64_t n) { return logsumexp_row_of(x, n); }
double logsumexp_row(const double* x, int64_t n) { return logsumexp_row_of(x, n); }

// out[j] = scale · exp(x[j] − shift) over a row, shift ≥ every x[j] (a log-sum-exp).
template <class T>
[[gnu::always_inline]] inline void scaled_exp_row_of(const T* x, T shift, T scale, T* out, int64_t n) {
#pragma omp simd
  for (int64_t j = 0; j < n; ++j) out[j] = scale * math::exp_nonpositive(x[j] - shift);
}
AG_VECTOR_CLONES void scaled_exp_row(const float* x, float shift, float scale, float* out, int64_t n) {
  scaled_exp_row_of(x, shift, scale, out, n);
}
void scaled_exp_row(const double* x, double shift, double scale, double* out, int64_t n) {
  scaled_exp_row_of(x, shift, scale, out, n);
}
}  // namespace

void softmax(const Tensor& x, Tensor& y) {
  visit_floating(x.dtype(), "softmax", [&](auto zero) {
    using T = decltype(zero);
    const int64_t C = row_length(x), N = x.numel() / std::max<int64_t>(C, 1);
    const T* px = x.data<T>();
    T* py = y.data<T>();
    for_rows(N, C, [&](int64_t r) { softmax_row(px + r * C, py + r * C, C); });
  });
}

// dX = y ∘ (dY − Σ_j dY_j y_j): the O(C) vector–Jacobian product of softmax.
void softmax_backward(const Tensor& y, const Tensor& dY, Tensor& dX) {
  visit_floating(y.dtype(), "softmax_backward", [&](auto zero) {
    using T = decltype(zero);
    const int64_t C = row_length(y), N = y.numel() / std::max<int64_t>(C, 1);
    const T *py = y.data<T>(), *pg = dY.data<T>();
    T* pd = dX.data<T>();
    for_rows(N, C, [&](int64_t r) {
      const T *yr = py + r * C, *gr = pg + r * C;
      T* dr = pd + r * C;
      T dot = 0;
      for (int64_t j = 0; j < C; ++j) dot += gr[j] * yr[j];
      for (int64_t j = 0; j < C; ++j) dr[j] = yr[j] * (gr[j] - dot);
    });
  });
}

void log_softmax(const Tensor& x, Tensor& y) {
  visit_floating(x.dtype(), "log_softmax", [&](auto zero) {
    using T = decltype(zero);
    const int64_t C = row_length(x), N = x.numel() / std::max<int64_t>(C, 1);
    const T* px = x.data<T>();
    T* py = y.data<T>();
    for_rows(N, C, [&](int64_t r) {
      const T lse = logsumexp_row(px + r * C, C);
      for (int64_t j = 0; j < C; ++j) py[r * C + j] = px[r * C + j] - lse;
    });
  });
}

// dX = dY − softmax(x) Σ_j dY_j, with softmax(x) = exp(y).
void log_softmax_backward(const Tensor& y, const Tensor& dY, Tensor& dX) {
  visit_floating(y.dtype(), "log_softmax_backward", [&](auto zero) {
    using T = decltype(zero);
    const int64_t C = row_length(y), N = y.numel() / std::max<int64_t>(C, 1);
    const T *py = y.data<T>(), *pg = dY.data<T>();
    T* pd = dX.data<T>();
    for_rows(N, C, [&](int64_t r) {
      T sum = 0;
      for (int64_t j = 0; j < C; ++j) sum += pg[r * C + j];
      for (int64_t j = 0; j < C; ++j) pd[r * C + j] = pg[r * C + j] - std::exp(py[r * C + j]) * sum;
    });
  });
}

namespace {
void check_targets(const Tensor& targets, int64_t V, int64_t ignore_index) {
  const int64_t* t = targets.data<int64_t>();
  for (int64_t n = 0; n < targets.numel(); ++n)
    AG_CHECK(t[n] == ignore_index || (t[n] >= 0 && t[n] < V),
             "cross_entropy: target " << t[n] << " at position " << n << " out of range [0, " << V
                                      << ") (ignore_index " << ignore_index << ")");
}
}  // namespace

void cross_entropy(const Tensor& logits, const Tensor& targets, int64_t ignore_index, Tensor& loss,
                   Tensor& lse, Tensor& scored) {
  const int64_t V = row_length(logits), N = targets.numel();
  check_targets(targets, V, ignore_index);
  visit_floating(logits.dtype(), "cross_entropy", [&](auto zero) {
    using T = decltype(zero);
    const T* px = logits.data<T>();
    const int64_t* pt = targets.data<int64_t>();
    T *pl = loss.data<T>(), *ps = lse.data<T>(), *pc = scored.data<T>();
    for_rows(N, V, [&](int64_t r) {
      ps[r] = logsumexp_row(px + r * V, V);
      pc[r] = pt[r] == ignore_index ? T(0) : T(1);
      pl[r] = pt[r] == ignore_index ? T(0) : ps[r] - px[r * V + pt[r]];
    });
  });
}

void cross_entropy_backward(const Tensor& logits, const Tensor& targets, const Tensor& lse,
                            int64_t ignore_index, const Tensor& scale, Tensor& dLogits) {
  const int64_t V = row_length(logits), N = targets.numel();
  visit_floating(logits.dtype(), "cross_entropy_backward", [&](auto zero) {
    using T = decltype(zero);
    const T *px = logits.data<T>(), *ps = lse.data<T>();
    const int64_t* pt = targets.data<int64_t>();
    T* pd = dLogits.data<T>();
    const T s = scale.data<T>()[0];
    for_rows(N, V, [&](int64_t r) {
      T* dr = pd + r * V;
      if (pt[r] == ignore_index) {
        std::fill_n(dr, V, T(0));
        return;
      }
      scaled_exp_row(px + r * V, ps[r], s, dr, V);  // s · softmax, from the forward's log-sum-exp
      dr[pt[r]] -= s;
    });
  });
}

}  // namespace ag::cpu
