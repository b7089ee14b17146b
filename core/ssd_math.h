// The state-space (SSD, Mamba-2) attention function as its kernels see it,
// written once for the CPU loops (core/cpu/ssd.cpp) and the CUDA kernels
// (cuda/ssd.cu). The derivations: docs/backprop.md, "State-space attention".
#pragma once
#include <cstdint>

#include "core/attention_math.h"         // HeadStrides
#include "core/linear_attention_math.h"  // PrefixDirection
#include "core/random.h"                 // AG_HOST_DEVICE

namespace ag {

// The decayed product every sum of SSD's forward and backward is. For each
// batch entry b, head h < heads and position i < T:
//   Out[b,h]_i = Σ_{j visible from i} exp(σ(i, j)) (A_i · B_j) w_j C_j
//   σ(i, j) = Σ_{r = min(i,j)+1 … max(i,j)} λ_r     (λ = log a ≤ 0, head h's)
// w_j = Δ_j (dt) when `weighted`, else 1. Visible: j ≤ i (Causal) or j ≥ i
// (Anticausal). Out, Δ and λ have `heads` heads; A, B, C have a_heads,
// b_heads, c_heads, and head h reads head h / (heads / x_heads) of each (a
// query head its kv head). Every operand is read in place through its
// HeadStrides (Δ and λ as rows of width 1).
//
// Computed in chunks of `chunk` positions (Mamba-2's SSD): inside a chunk the
// masked quadratic form with σ(i, j) summed directly, never as a difference of
// two long sums (cumsum_i − cumsum_j loses every digit once the sums are long;
// a direct sum of λ ≤ 0 is ≤ 0, so exp never overflows); across chunks a
// state S = Σ_j exp(σ) w_j B_j C_jᵀ [r, e] carried with its decay. A causal
// product may start from a given state and leave the final one (decoding).
// The result does not depend on `chunk` but for rounding (the tests check it).
// A chunk's decays seen from its ends, from its m per-position decays a_j = exp(λ_j):
//   to_start[j] = a_0 ⋯ a_j          (chunk start → j, j included)
//   to_end[j]   = a_{j+1} ⋯ a_{m−1}  (j → chunk end, j excluded; to_end[m−1] = 1)
// each as one chain of multiplies in this order, so the CPU (core/cpu/ssd.cpp) and
// CUDA (cuda/chunked_kernels.cuh) round them alike.
template <class T> AG_HOST_DEVICE void chunk_decays(const T* a, int64_t m, T* to_start, T* to_end) {
  T product = 1;
  for (int64_t j = 0; j < m; ++j) to_start[j] = product *= a[j];
  product = 1;
  for (int64_t j = m - 1; j >= 0; --j) {
    to_end[j] = product;
    product *= a[j];
  }
}

struct DecayedProduct {
  PrefixDirection direction = PrefixDirection::Causal;  // Causal or Anticausal
  bool weighted = false;
  int64_t chunk = 64;
  int64_t batch = 0, T = 0, r = 0, e = 0, heads = 1, a_heads = 1, b_heads = 1, c_heads = 1;
  HeadStrides a{}, b{}, c{}, out{}, decay{};  // decay: Δ's and λ's [B, T, heads] or [B, heads, T]

  AG_HOST_DEVICE static int64_t head_of(int64_t h, int64_t heads, int64_t x_heads) { return h / (heads / x_heads); }
  AG_HOST_DEVICE int64_t a_head(int64_t h) const { return head_of(h, heads, a_heads); }
  AG_HOST_DEVICE int64_t b_head(int64_t h) const { return head_of(h, heads, b_heads); }
  AG_HOST_DEVICE int64_t c_head(int64_t h) const { return head_of(h, heads, c_heads); }
  AG_HOST_DEVICE bool causal() const { return direction == PrefixDirection::Causal; }
};

namespace math {

// The decay's gradient (contract: core/kernels.inc, ssd_decay_gradient) for
// problem n = b·heads + h: the suffix sums dλ_t = Σ_{s ≥ t} (dY_s · Y_s − Δ_s dΔ_s).
// The CPU runs every problem's whole range on one thread, from t = T − 1 down
// (core/cpu/ssd.cpp); CUDA runs spans of positions in parallel, each summed by
// suffix_sums as here, then adds the totals of the spans after it (cuda/ssd.cu).
template <class T> struct DecayGradient {
  const T *dy, *y, *dt, *d_dt;
  T* d_log_a;
  DecayedProduct how;
  // dλ_t = Σ_{t ≤ s < t1} (…) for t in [t0, t1), summed from t1 − 1 down; returns the span's total.
  AG_HOST_DEVICE T suffix_sums(int64_t n, int64_t t0, int64_t t1) const {
    const int64_t b = n / how.heads, h = n % how.heads;
    T suffix = 0;
    for (int64_t t = t1 - 1; t >= t0; --t) {
      const T *dyt = dy + how.out.at(b, h, t), *yt = y + how.out.at(b, h, t);
      T dot = 0;
      for (int64_t c = 0; c < how.e; ++c) dot += dyt[c] * yt[c];
      const int64_t at = how.decay.at(b, h, t);
      suffix += dot - dt[at] * d_dt[at];
      d_log_a[at] = suffix;
    }
    return suffix;
  }
  AG_HOST_DEVICE void operator()(int64_t n) const { suffix_sums(n, 0, how.T); }
};

}  // namespace math
}  // namespace ag
