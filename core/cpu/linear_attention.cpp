// Linear attention's kernels on the CPU: the feature maps φ and their
// backward, and the chunked prefix product that every sum of the forward and
// the backward is an instance of (core/ops/linear_attention.cpp says which).
// Formulas: core/linear_attention_math.h; derivations: docs/backprop.md,
// "Linear attention".
//
// Thread mapping: OpenMP over rows (features) and over the problems (batch
// entry × head of the product's output); each problem's sums run in order on one thread, so the bits do not
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
// chunk of each summed B transposed [heads][r, chunk], and one row of the
// chunk's scores [chunk].
template <class T> struct ProductScratch {
  std::vector<T> state, bt, scores;
  ProductScratch(const PrefixProduct& how, int64_t chunk)
      : state(how.r * how.e), bt(how.heads_summed() * how.r * chunk), scores(chunk) {}
};

// One problem of the prefix product (PrefixProduct): head h of batch entry b.
// The chunks go forward for Causal and backward for Anticausal; the state holds
// Σ B_jᵀ C_j over the chunks already passed (and every in-head h sums), so
// chunk by chunk:
//   Out_i = A_i · state + Σ_{j in the chunk, visible} (A_i · B_j) C_j,   then state += Σ_{j in the chunk} B_jᵀ C_j.
// All is one chunk of every position read through the finished state. Every
// inner loop runs along a contiguous row (the scores along Bᵀ's), so it
// vectorises without reassociating a sum.
template <class T>
void prefix_product_one(const PrefixProduct& how, const T* A, const T* B, const T* C, T* Out, int64_t b, int64_t h,
                        int64_t chunk, ProductScratch<T>& scratch) {
  const int64_t T_ = how.T, r = how.r, e = how.e, summed = how.heads_summed(), first = how.first_in_head(h);
  const auto b_row = [&](int64_t g, int64_t j) { return B + how.b.at(b, first + g, j); };
  const auto c_row = [&](int64_t g, int64_t j) { return C + how.c.at(b, first + g, j); };
  std::vector<T>& state = scratch.state;
  std::fill(state.begin(), state.end(), T(0));
  const auto add_to_state = [&](int64_t j0, int64_t j1) {
    for (int64_t g = 0; g < summed; ++g)
      for (int64_t j = j0; j < j1; ++j) {
        const T *bj = b_row(g, j), *cj = c_row(g, j);
        for (int64_t p = 0; p < r; ++p) {
          const T bp = bj[p];
          T* row = state.data() + p * e;
          for (int64_t c = 0; c < e; ++c) row[c] += bp * cj[c];
        }
      }
  };
  const auto read_state = [&](int64_t i) {
    const T* ai = A + how.a.at(b, h, i);
    T* out = Out + how.out.at(b, h, i);
    std::fill_n(out, e, T(0));
    for (int64_t p = 0; p < r; ++p) {
      const T ap = ai[p];
      const T* row = state.data() + p * e;
      for (int64_t c = 0; c < e; ++c) out[c] += ap * row[c];
    }
  };
  if (how.direction == PrefixDirection::All) {
    add_to_state(0, T_);
    for (int64_t i = 0; i < T_; ++i) read_state(i);
    return;
  }
  const int64_t chunks = (T_ + chunk - 1) / chunk;
  const bool causal = how.direction == PrefixDirection::Causal;
  T* scores = scratch.scores.data();
  for (int64_t n = 0; n < chunks; ++n) {
    const int64_t index = causal ? n : chunks - 1 - n;
    const int64_t j0 = index * chunk, j1 = std::min(j0 + chunk, T_), width = j1 - j0;
    for (int64_t g = 0; g < summed; ++g) {
      T* bt = scratch.bt.data() + g * r * width;
      for (int64_t j = 0; j < width; ++j) {
        const T* bj = b_row(g, j0 + j);
        for (int64_t p = 0; p < r; ++p) bt[p * width + j] = bj[p];
      }
    }
    for (int64_t i = j0; i < j1; ++i) {
      T* out = Out + how.out.at(b, h, i);
      if (n > 0) read_state(i);  // the chunks already passed (none before the first: the state is 0)
      else std::fill_n(out, e, T(0));
      const T* ai = A + how.a.at(b, h, i);
      // this chunk: the masked quadratic form over its visible positions [lo, hi), scores_j = A_i · B_j
      const int64_t lo = causal ? 0 : i - j0, hi = causal ? i - j0 + 1 : width;
      for (int64_t g = 0; g < summed; ++g) {
        const T* bt = scratch.bt.data() + g * r * width;
        std::fill(scores + lo, scores + hi, T(0));
        for (int64_t p = 0; p < r; ++p) {
          const T ap = ai[p];
          const T* bt_row = bt + p * width;
          for (int64_t j = lo; j < hi; ++j) scores[j] += ap * bt_row[j];
        }
        for (int64_t j = lo; j < hi; ++j) {
          const T* cj = c_row(g, j0 + j);
          for (int64_t c = 0; c < e; ++c) out[c] += scores[j] * cj[c];
        }
      }
    }
    if (n + 1 < chunks) add_to_state(j0, j1);  // no chunk reads the last one's
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
    const int64_t problems = how.batch * how.out_heads;
    const int64_t chunk = std::min(std::max<int64_t>(how.chunk, 1), std::max<int64_t>(how.T, 1));
    const T *a = A.data<T>(), *b = B.data<T>(), *c = C.data<T>();
    T* out = Out.data<T>();
#pragma omp parallel if (problems > 1 && problems * how.heads_summed() * how.T * how.r * how.e > kParallelGrain)
    {
      ProductScratch<T> scratch(how, chunk);
#pragma omp for schedule(static)
      for (int64_t n = 0; n < problems; ++n)
        prefix_product_one(how, a, b, c, out, n / how.out_heads, n % how.out_heads, chunk, scratch);
    }
  });
}

}  // namespace ag::cpu
