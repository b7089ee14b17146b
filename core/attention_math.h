// The geometry and scalar formulas of attention, written once for the CPU loops
// (core/cpu/attention.cpp) and the CUDA kernels (cuda/attention.cu): which key a
// query sees, how a (query tile, key tile) pair is classified for the flash
// loops, where each head's rows sit in memory, and the online softmax's two
// guarded formulas. The derivations are in docs/backprop.md, "FlashAttention".
#pragma once
#include <cmath>
#include <cstdint>
#include <limits>

#include "core/random.h"  // AG_HOST_DEVICE

namespace ag {

// How many of a (query tile, key tile) pair's entries are visible: the flash
// loops skip None, mask element by element only in Partial, and run All plain.
enum class TileVisibility { None, Partial, All };

// Which keys each query sees. Query i (0 ≤ i < Tq) sits at key position
// i + q_offset; with `causal` it sees the keys j ≤ i + q_offset, without it
// every key. Issue 12's sparse patterns (window, dilation, global tokens,
// random blocks) extend `visible` and `tile` here, so every implementation and
// both devices read one definition.
struct AttentionMask {
  bool causal = false;
  int64_t q_offset = 0;

  AG_HOST_DEVICE bool visible(int64_t i, int64_t j) const { return !causal || j <= i + q_offset; }

  // Queries [i0, i1) against keys [j0, j1), both non-empty.
  AG_HOST_DEVICE TileVisibility tile(int64_t i0, int64_t i1, int64_t j0, int64_t j1) const {
    if (!causal) return TileVisibility::All;
    if (j0 > i1 - 1 + q_offset) return TileVisibility::None;  // even the last query sees none of them
    if (j1 - 1 <= i0 + q_offset) return TileVisibility::All;  // even the first query sees all of them
    return TileVisibility::Partial;
  }
};

// Where row t of head h of batch entry b starts in an attention operand, in
// elements; the row's d entries follow contiguously.
//   [B, H, T, d]:  {H·T·d, T·d, d}        [B, T, H, d]:  {T·H·d, d, H·d}
struct HeadStrides {
  int64_t batch, head, row;
  AG_HOST_DEVICE int64_t at(int64_t b, int64_t h, int64_t t) const { return b * batch + h * head + t * row; }
};

// One attention problem, as the kernels see it: B batch entries, Hq query
// heads over Hkv key/value heads (query head h reads kv head h / (Hq / Hkv):
// grouped-query attention without a copy), Tq queries and Tk keys of width d,
//   S = scale · Q Kᵀ,  A = softmax(S + M),  Z = A V,  L = log Σ_j exp(S_ij + M_ij).
// Q, Z, dQ, dZ are laid out by `q`; K, V, dK, dV by `kv`; L [B, Hq, Tq] is contiguous.
struct AttentionShape {
  int64_t B, Hq, Hkv, Tq, Tk, d;
  double scale;
  AttentionMask mask;
  HeadStrides q, kv;

  AG_HOST_DEVICE int64_t group() const { return Hq / Hkv; }  // query heads per kv head
  AG_HOST_DEVICE int64_t lse_at(int64_t b, int64_t h, int64_t i) const { return (b * Hq + h) * Tq + i; }
};

namespace math {

template <class T> constexpr T kInf = std::numeric_limits<T>::infinity();

// The online softmax keeps a running max m per row and rescales by
// exp(m_old − m_new). Until the row has seen a visible key m is −∞, and
// exp(−∞ − (−∞)) would be NaN: measure against 0 instead (every term is then
// exp(−∞) = 0, and the sum stays 0).
template <class T> AG_HOST_DEVICE inline T softmax_reference(T running_max) {
  return running_max == -kInf<T> ? T(0) : running_max;
}

// L = m + log l from the row max m and the sum l = Σ_j exp(S_ij − m). A row
// that sees no key has l = 0 and gets L = +∞, so that the backward's
// P = exp(S − L) is exactly 0 there (and Z = 0: no probability mass).
template <class T> AG_HOST_DEVICE inline T log_sum_exp(T row_max, T row_sum) {
  return row_sum == T(0) ? kInf<T> : row_max + std::log(row_sum);
}

}  // namespace math
}  // namespace ag
