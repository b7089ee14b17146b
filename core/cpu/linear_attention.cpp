// Linear attention's kernels on the CPU: the feature maps φ and their
// backward, and the chunked prefix product that every sum of the forward and
// the backward is an instance of (core/ops/linear_attention.cpp says which).
// Formulas: core/linear_attention_math.h; derivations: docs/backprop.md,
// "Linear attention".
//
// Thread mapping: OpenMP over rows (features) and over the N problems (the
// product); each problem's sums run in order on one thread, so the bits do not
// depend on the thread count.
#include <algorithm>
#include <cmath>
#include <vector>

#include "core/cpu/cpu.h"
#include "core/cpu/loops.h"

namespace ag::cpu {
namespace {

// Phi [r] = φ(x [d]). FAVOR+ forms x' = s·x, then ω_r·x' and |x'|²/2.
template <class T> void features_row(const T* x, const T* omega, FeatureMap map, int64_t d, int64_t r, T* phi) {
  if (map == FeatureMap::Elu1) {
    for (int64_t c = 0; c < d; ++c) phi[c] = math::elu1(x[c]);
    return;
  }
  const T s = math::favor_input_scale<T>(d), inv_sqrt_m = math::favor_output_scale<T>(r);
  const T half_norm_sq = math::favor_half_norm_sq(x, d, s);
  for (int64_t f = 0; f < r; ++f)
    phi[f] = math::favor_feature(math::favor_omega_dot(omega + f * d, x, d, s), half_norm_sq, inv_sqrt_m);
}

// dx [d] from dphi [r]. FAVOR+: ∂φ_r/∂x' = φ_r (ω_r − x'), and x' = s·x.
template <class T>
void features_backward_row(const T* x, const T* omega, FeatureMap map, const T* phi, const T* dphi, int64_t d,
                           int64_t r, T* dx) {
  if (map == FeatureMap::Elu1) {
    for (int64_t c = 0; c < d; ++c) dx[c] = dphi[c] * math::elu1_derivative(x[c], phi[c]);
    return;
  }
  const T s = math::favor_input_scale<T>(d);
  T weight_sum = 0;  // Σ_r dφ_r φ_r
  std::fill_n(dx, d, T(0));
  for (int64_t f = 0; f < r; ++f) {
    const T w = dphi[f] * phi[f];
    weight_sum += w;
    for (int64_t c = 0; c < d; ++c) dx[c] += w * omega[f * d + c];
  }
  for (int64_t c = 0; c < d; ++c) dx[c] = math::favor_input_gradient(dx[c], weight_sum, x[c], s);
}

// Per-thread scratch of the prefix product: the running state [r, e], one
// chunk of B transposed [r, chunk], and one row of the chunk's scores [chunk].
template <class T> struct ProductScratch {
  std::vector<T> state, bt, scores;
  ProductScratch(int64_t r, int64_t e, int64_t chunk) : state(r * e), bt(r * chunk), scores(chunk) {}
};

// One problem of the prefix product (PrefixProduct): Out [T, e] from A, B
// [T, r] and C [T, e]. The chunks go forward for Causal and backward for
// Anticausal; the state holds Σ B_jᵀ C_j over the chunks already passed, so
// chunk by chunk:
//   Out_i = A_i · state + Σ_{j in the chunk, visible} (A_i · B_j) C_j,   then state += Σ_{j in the chunk} B_jᵀ C_j.
// All is one chunk of every position read through the finished state. Every
// inner loop runs along a contiguous row (the scores along Bᵀ's), so it
// vectorises without reassociating a sum.
template <class T>
void prefix_product_one(const T* A, const T* B, const T* C, T* Out, int64_t T_, int64_t r, int64_t e,
                        const PrefixProduct& how, ProductScratch<T>& scratch) {
  std::vector<T>& state = scratch.state;
  std::fill(state.begin(), state.end(), T(0));
  const auto add_to_state = [&](int64_t j0, int64_t j1) {
    for (int64_t j = j0; j < j1; ++j)
      for (int64_t p = 0; p < r; ++p) {
        const T b = B[j * r + p];
        T* row = state.data() + p * e;
        for (int64_t c = 0; c < e; ++c) row[c] += b * C[j * e + c];
      }
  };
  const auto read_state = [&](int64_t i) {
    T* out = Out + i * e;
    std::fill_n(out, e, T(0));
    for (int64_t p = 0; p < r; ++p) {
      const T a = A[i * r + p];
      const T* row = state.data() + p * e;
      for (int64_t c = 0; c < e; ++c) out[c] += a * row[c];
    }
  };
  if (how.direction == PrefixDirection::All) {
    add_to_state(0, T_);
    for (int64_t i = 0; i < T_; ++i) read_state(i);
    return;
  }
  const int64_t chunk = std::min(std::max<int64_t>(how.chunk, 1), std::max<int64_t>(T_, 1));
  const int64_t chunks = (T_ + chunk - 1) / chunk;
  T *bt = scratch.bt.data(), *scores = scratch.scores.data();
  for (int64_t n = 0; n < chunks; ++n) {
    const int64_t index = how.direction == PrefixDirection::Causal ? n : chunks - 1 - n;
    const int64_t j0 = index * chunk, j1 = std::min(j0 + chunk, T_), width = j1 - j0;
    for (int64_t j = 0; j < width; ++j)
      for (int64_t p = 0; p < r; ++p) bt[p * width + j] = B[(j0 + j) * r + p];
    for (int64_t i = j0; i < j1; ++i) {
      read_state(i);  // the chunks already passed
      // this chunk: the masked quadratic form, scores_j = A_i · B_j
      std::fill_n(scores, width, T(0));
      for (int64_t p = 0; p < r; ++p) {
        const T a = A[i * r + p];
        for (int64_t j = 0; j < width; ++j) scores[j] += a * bt[p * width + j];
      }
      T* out = Out + i * e;
      for (int64_t j = 0; j < width; ++j) {
        if (!how.visible(i, j0 + j)) continue;
        for (int64_t c = 0; c < e; ++c) out[c] += scores[j] * C[(j0 + j) * e + c];
      }
    }
    add_to_state(j0, j1);
  }
}

}  // namespace

void attention_features(const Tensor& X, const Tensor& omega, FeatureMap map, Tensor& Phi) {
  visit_floating(X.dtype(), "attention_features", [&](auto zero) {
    using T = decltype(zero);
    const int64_t d = X.size(-1), r = Phi.size(-1), rows = X.numel() / std::max<int64_t>(d, 1);
    const T* x = X.data<T>();
    const T* w = omega.defined() ? omega.data<T>() : nullptr;
    T* phi = Phi.data<T>();
    for_rows(rows, d * r, [&](int64_t n) { features_row(x + n * d, w, map, d, r, phi + n * r); });
  });
}

void attention_features_backward(const Tensor& X, const Tensor& omega, FeatureMap map, const Tensor& Phi,
                                 const Tensor& dPhi, Tensor& dX) {
  visit_floating(X.dtype(), "attention_features_backward", [&](auto zero) {
    using T = decltype(zero);
    const int64_t d = X.size(-1), r = Phi.size(-1), rows = X.numel() / std::max<int64_t>(d, 1);
    const T *x = X.data<T>(), *phi = Phi.data<T>(), *dphi = dPhi.data<T>();
    const T* w = omega.defined() ? omega.data<T>() : nullptr;
    T* dx = dX.data<T>();
    for_rows(rows, d * r, [&](int64_t n) {
      features_backward_row(x + n * d, w, map, phi + n * r, dphi + n * r, d, r, dx + n * d);
    });
  });
}

void linear_attention_product(const Tensor& A, const Tensor& B, const Tensor& C, const PrefixProduct& how,
                              Tensor& Out) {
  visit_floating(A.dtype(), "linear_attention_product", [&](auto zero) {
    using T = decltype(zero);
    const int64_t N = A.size(0), T_ = A.size(1), r = A.size(2), e = C.size(2);
    const T *a = A.data<T>(), *b = B.data<T>(), *c = C.data<T>();
    T* out = Out.data<T>();
#pragma omp parallel if (N > 1 && N * T_ * r * e > kParallelGrain)
    {
      ProductScratch<T> scratch(r, e, std::min(std::max<int64_t>(how.chunk, 1), std::max<int64_t>(T_, 1)));
#pragma omp for schedule(static)
      for (int64_t n = 0; n < N; ++n)
        prefix_product_one(a + n * T_ * r, b + n * T_ * r, c + n * T_ * e, out + n * T_ * e, T_, r, e, how, scratch);
    }
  });
}

}  // namespace ag::cpu
