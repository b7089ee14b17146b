// The scalar formulas of linear attention, written once for the CPU loops
// (core/cpu/linear_attention.cpp) and the CUDA kernels (cuda/linear_attention.cu):
// the two feature maps φ and their derivatives, and how the prefix sums run.
// The derivations are in docs/backprop.md, "Linear attention".
#pragma once
#include <cmath>
#include <cstdint>
#include <utility>

#include "core/attention_math.h"  // HeadStrides
#include "core/enum_names.h"
#include "core/random.h"  // AG_HOST_DEVICE

namespace ag {

// φ, applied to each query and key row x of width d.
enum class FeatureMap {
  Elu1,   // φ(x) = elu(x) + 1, elementwise (r = d features; Katharopoulos et al. 2020)
  Favor,  // FAVOR+: φ(x) = exp(ω_r·x' − |x'|²/2) / √m for r < m, x' = x·d^(−1/4) (Choromanski et al. 2020)
};
template <> struct EnumNames<FeatureMap> {
  static constexpr std::pair<FeatureMap, const char*> values[] = {{FeatureMap::Elu1, "elu1"},
                                                                   {FeatureMap::Favor, "favor"}};
};

// Which positions j the sum at position i runs over.
enum class PrefixDirection {
  Causal,      // j ≤ i: the forward, and dφ(Q)
  Anticausal,  // j ≥ i: the suffix sums of the causal backward, dφ(K) and dV
  All,         // every j: non-causal attention, one φ(K)ᵀV
};

// The one product of linear attention, as the kernels see it. For each batch
// entry b, head h of Out and position i < T:
//   Out[b,h]_i = Σ_{h' read by h} Σ_{j visible from i} (A[b,h]_i · B[b,h']_j) C[b,h']_j
// A (rows of r) and Out (rows of e) have out_heads heads; B (r) and C (e) have
// in_heads. Every operand is read in place through its HeadStrides, in either
// layout. When in_heads divides out_heads, head h reads in-head h / (out_heads /
// in_heads): a query head reading its kv head (the forward, dφ(Q)). When
// out_heads divides in_heads, head h sums the in-heads h·g … h·g + g − 1: a kv
// head's gradient over the query heads that read it (dφ(K), dV).
// Computed in chunks of `chunk` positions: inside a chunk the masked quadratic
// form, across chunks a running state Σ_j B_jᵀ C_j [r, e]. The result does not
// depend on `chunk` but for rounding (the tests check it).
struct PrefixProduct {
  PrefixDirection direction = PrefixDirection::Causal;
  int64_t chunk = 64;
  int64_t batch = 0, T = 0, r = 0, e = 0, out_heads = 1, in_heads = 1;
  HeadStrides a{}, b{}, c{}, out{};

  AG_HOST_DEVICE bool visible(int64_t i, int64_t j) const {
    return direction == PrefixDirection::All || (direction == PrefixDirection::Causal ? j <= i : j >= i);
  }
  // The in-heads Out's head h sums: heads_summed() of them from first_in_head(h) on.
  AG_HOST_DEVICE int64_t heads_summed() const { return in_heads > out_heads ? in_heads / out_heads : 1; }
  AG_HOST_DEVICE int64_t first_in_head(int64_t h) const {
    return in_heads > out_heads ? h * (in_heads / out_heads) : h / (out_heads / in_heads);
  }
};

namespace math {

// The normaliser's guard: o_i = num_i / (den_i + ε). den_i is a sum of
// positive terms, but FAVOR+ features of far-apart q and k underflow to 0 (and
// elu1's e^x does for very negative x), so den_i can be 0; ε keeps o_i finite
// (0 there). It is far below any den of a row that sees an unflushed term.
inline constexpr double kLinearAttentionEps = 1e-6;

// elu(x) + 1: x + 1 for x > 0, eˣ otherwise; positive, so every φ(q)·φ(k) > 0.
template <class T> AG_HOST_DEVICE inline T elu1(T x) { return x > T(0) ? x + T(1) : std::exp(x); }
// Its derivative from x and φ(x): 1 for x > 0, eˣ = φ(x) otherwise.
template <class T> AG_HOST_DEVICE inline T elu1_derivative(T x, T phi) { return x > T(0) ? T(1) : phi; }

// One FAVOR+ feature from ω_r·x' and |x'|²/2: exp(ω_r·x' − |x'|²/2) / √m. It is
// at most exp(|ω_r|²/2) / √m (the exponent's maximum over x'), so it never overflows.
template <class T> AG_HOST_DEVICE inline T favor_feature(T projection, T half_norm_sq, T inv_sqrt_m) {
  return std::exp(projection - half_norm_sq) * inv_sqrt_m;
}
// x' = x · d^(−1/4): then E[φ(q')·φ(k')] = exp(q'·k') = exp(q·k/√d), softmax's term.
template <class T> AG_HOST_DEVICE inline T favor_input_scale(int64_t d) {
  return static_cast<T>(1.0 / std::sqrt(std::sqrt(static_cast<double>(d))));
}
// 1/√m, the features' common factor.
template <class T> AG_HOST_DEVICE inline T favor_output_scale(int64_t m) { return T(1) / std::sqrt(static_cast<T>(m)); }
// |x'|²/2 of one row x [d], x' = s·x.
template <class T> AG_HOST_DEVICE inline T favor_half_norm_sq(const T* x, int64_t d, T s) {
  T sum = 0;
  for (int64_t c = 0; c < d; ++c) sum += s * x[c] * s * x[c];
  return sum / 2;
}
// ω_f·x' for one feature's row of ω [d].
template <class T> AG_HOST_DEVICE inline T favor_omega_dot(const T* omega_row, const T* x, int64_t d, T s) {
  T dot = 0;
  for (int64_t c = 0; c < d; ++c) dot += omega_row[c] * s * x[c];
  return dot;
}
// ∂L/∂x_c from weighted_omega = Σ_f w_f ω_fc and weight_sum = Σ_f w_f, w_f = dφ_f φ_f:
// ∂φ_f/∂x' = φ_f (ω_f − x') and x' = s·x, so dx_c = s·(Σ_f w_f ω_fc − Σ_f w_f · s·x_c).
template <class T> AG_HOST_DEVICE inline T favor_input_gradient(T weighted_omega, T weight_sum, T x, T s) {
  return s * (weighted_omega - weight_sum * s * x);
}

}  // namespace math
}  // namespace ag
