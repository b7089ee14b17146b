// Linear attention's kernels on the CPU: the feature maps φ and their
// backward, and the chunked prefix product that every sum of the forward and
// the backward is an instance of (core/ops/linear_attention.cpp says which).
// Formulas: core/linear_attention_math.h; derivations: docs/backprop.md,
// "Linear attention".
//
// Thread mapping: OpenMP over rows (features) and over the problems (batch
// entry × head of the product's output); each problem's sums run in order on one thread (its GEMMs too),
// so the bits do not depend on the thread count.
#include <algorithm>
#include <cmath>
#include <vector>

#include "core/cpu/cpu.h"
#include "core/cpu/loops.h"
#include "core/cpu/tile_gemm.h"

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

// Per-thread scratch of the prefix product: the running state [r, e] and one
// chunk's scores [chunk, chunk].
template <class T> struct ProductScratch {
  std::vector<T> state, scores;
  ProductScratch(const PrefixProduct& how, int64_t chunk) : state(how.r * how.e), scores(chunk * chunk) {}
};

// One problem of the prefix product (PrefixProduct): head h of batch entry b.
// The chunks go forward for Causal and backward for Anticausal; the state holds
// Σ B_jᵀ C_j over the chunks already passed (and every in-head h sums), so
// chunk by chunk, with the chunk's rows A_c, B_c, C_c:
//   Out_c = A_c · state + Σ_g (mask ∘ A_c B_cgᵀ) C_cg,   then state += Σ_g B_cgᵀ C_cg
// (mask: j ≤ i for Causal, j ≥ i for Anticausal), each term one GEMM of the
// chunk; ssd's decayed product (core/cpu/ssd.cpp) is this with a decay in the
// mask and the state. All is one chunk of every position read through the
// finished state. No state is read before the first chunk or made after the last.
template <class T>
void prefix_product_one(const PrefixProduct& how, const T* A, const T* B, const T* C, T* Out, int64_t b, int64_t h,
                        int64_t chunk, ProductScratch<T>& scratch) {
  const int64_t T_ = how.T, r = how.r, e = how.e, summed = how.heads_summed(), first = how.first_in_head(h);
  T* state = scratch.state.data();
  T* G = scratch.scores.data();
  const auto add_to_state = [&](int64_t j0, int64_t m) {
    for (int64_t g = 0; g < summed; ++g)
      tile_gemm(true, false, r, e, m, B + how.b.at(b, first + g, j0), how.b.row, C + how.c.at(b, first + g, j0),
                how.c.row, T(1), state, e);
  };
  std::fill_n(state, r * e, T(0));
  if (how.direction == PrefixDirection::All) {
    add_to_state(0, T_);
    tile_gemm(false, false, T_, e, r, A + how.a.at(b, h, 0), how.a.row, state, e, T(0), Out + how.out.at(b, h, 0),
              how.out.row);
    return;
  }
  const bool causal = how.direction == PrefixDirection::Causal;
  const int64_t chunks = (T_ + chunk - 1) / chunk;
  for (int64_t n = 0; n < chunks; ++n) {
    const int64_t index = causal ? n : chunks - 1 - n;
    const int64_t j0 = index * chunk, m = std::min(j0 + chunk, T_) - j0;
    const T* Ac = A + how.a.at(b, h, j0);
    T* Oc = Out + how.out.at(b, h, j0);
    if (n > 0) tile_gemm(false, false, m, e, r, Ac, how.a.row, state, e, T(0), Oc, how.out.row);
    for (int64_t g = 0; g < summed; ++g) {
      const T *Bc = B + how.b.at(b, first + g, j0), *Cc = C + how.c.at(b, first + g, j0);
      tile_gemm(false, true, m, m, r, Ac, how.a.row, Bc, how.b.row, T(0), G, m);
      for (int64_t i = 0; i < m; ++i) {  // the mask: what position i may not see
        T* row = G + i * m;
        if (causal) std::fill(row + i + 1, row + m, T(0));
        else std::fill(row, row + i, T(0));
      }
      tile_gemm(false, false, m, e, m, G, m, Cc, how.c.row, n > 0 || g > 0 ? T(1) : T(0), Oc, how.out.row);
    }
    if (n + 1 < chunks) add_to_state(j0, m);
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
