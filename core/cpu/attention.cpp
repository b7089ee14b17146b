// Attention kernels on the CPU: the dense implementation's masked softmax, and
// FlashAttention's forward and backward. Formulas and proofs: docs/backprop.md,
// "FlashAttention"; the mask and the tile classification: core/attention_math.h.
//
// FlashAttention never forms S or A. Queries go in tiles of kQueryTile rows
// (Br), keys in tiles of kKeyTile (Bc); each query tile visits only the key
// tiles its block map lists (core/attention_blocks.h: the pairs the mask hides
// entirely are not there), and masks element by element only the Partial ones.
//
// Thread mapping. Forward: one task per (batch b, query head h, query tile),
// OpenMP over all of them; each owns its rows of Z and lse. Backward: one task
// per (b, kv head): it owns dK and dV of that kv head, and dQ of the query heads
// that read it (a query head reads exactly one kv head), so no element is
// written by two threads: no atomics, and the same bits whatever the thread
// count.
//
// Tile layout. Score tiles are stored transposed, Sᵀ [Bc keys][Br queries]: a
// query's softmax then runs down a column, which vectorises across the Br
// queries of the tile. Each tile product is one GEMM whose right operand is
// read along its rows (Q and dZ are transposed once per query tile for that).
#include <algorithm>
#include <cmath>
#include <limits>
#include <type_traits>
#include <vector>

#include "core/attention_blocks.h"
#include "core/cpu/cpu.h"
#include "core/cpu/loops.h"
#include "core/cpu/tile_gemm.h"
#include "core/cpu/vector_math.h"
#include "core/elementwise_math.h"

namespace ag::cpu {
namespace {

using math::exp_nonpositive;
using math::kInf;

// Br × Bc = 64 × 128: of the tile sizes tried at T = 1024, d = 32 and 64, the
// fastest (docs/performance.md, "Numbers from the code's comments").
constexpr int64_t kQueryTile = 64;  // Br: queries per tile
constexpr int64_t kKeyTile = 128;   // Bc: keys per tile

// Below this many multiply-adds (B·Hq·Tq·Tk·d) a flash call runs on one thread:
// starting an OpenMP team costs more than it saves.
constexpr int64_t kParallelWork = int64_t{1} << 20;
bool worth_threads(const AttentionShape& s, int64_t tasks) {
  return tasks > 1 && s.B * s.Hq * s.Tq * s.Tk * s.d > kParallelWork;
}

// --- the dense implementation's softmax -------------------------------------------------

// Dense stores its scores transposed, Sᵀ [B, Hq, Tk, Tq] (core/ops/attention.cpp):
// key j's row holds its score with every query, so a query's softmax runs down a
// column, and a block of adjacent queries goes side by side, one per vector lane.
// Every pass is then a vector operation across queries, and each query's sum is
// added in key order, the order flash's tests hold their float32 error to
// (tests/test_attention_op.cpp). Row by row, the sums were chains of scalar adds
// and a row's 64 scores four vectors with a max across lanes (docs/performance.md
// times both ways). The float versions are
// compiled for AVX-512 too (AG_VECTOR_CLONES), into which these bodies must be
// inlined to get that ISA.
//
// Blocks are narrow while a matrix's rows are short: 16 queries keep each
// running value (max, sum) in one register, and a block stops at the last key
// its queries see. Rows of more than kShortRow queries are a kilobyte or more
// apart, and a narrow block's column would touch a new page for every 64 bytes
// it reads (dense at T = 1024 ran slower than by rows): there the blocks
// take kWideBlock queries, 1 KB of each row, their running values in L1.
constexpr int64_t kNarrowBlock = 16;  // an AVX-512 register of floats
constexpr int64_t kWideBlock = 256;
constexpr int64_t kShortRow = 256;

// Queries [i0, i0 + lanes) of head h, lanes ≤ W, in one [Tk, Tq]
// matrix of Sᵀ (s) and Aᵀ (a, possibly s): A = softmax over each query's visible
// keys, 0 elsewhere, and lse [lanes] unless lse is null. The mask is applied first (−inf where
// hidden) so that the passes after it have no condition in them
// (exp_nonpositive(−inf) = 0); keys after the last query's position are hidden
// from every lane and cost nothing but their zeros. sink: null, or head h's sink
// logit, one more term exp(sink) in every lane's denominator.
template <int64_t W, class T>
[[gnu::always_inline]] inline void masked_softmax_columns_of(const T* s, T* a, int64_t Tk, int64_t Tq,
                                                             const AttentionMask& mask, int64_t h, int64_t i0,
                                                             int64_t lanes, const T* sink, double* lse) {
  const int64_t first_p = mask.row(h, i0).p, last_p = mask.row(h, i0 + lanes - 1).p;
  const int64_t end = last_p < 0 ? 0 : std::min(Tk, last_p + 1);  // keys j ≤ p for some lane
  const T slope = static_cast<T>(mask.alibi_slope(h));            // 0 without ALiBi: S + 0 = S
  T max[W], sum[W], reference[W];
  for (int64_t l = 0; l < W; ++l) max[l] = -kInf<T>, sum[l] = T(0);
  if (mask.allowed && !mask.causal && !mask.pattern.limited() && !mask.segment_start && mask.alibi_heads == 0) {
    // A mask function's bytes alone (a graph's adjacency, a prefix-LM): keys outer, lanes inner, so
    // that each key's row of Sᵀ is read once, in order (lane by lane, each key's entry is Tq
    // elements after the last: a page per key on a long row). The same values, so the same bits.
    const uint8_t* seen[W];
    for (int64_t l = 0; l < lanes; ++l) seen[l] = mask.row(h, i0 + l).allowed;
    for (int64_t j = 0; j < end; ++j) {
      const T* sj = s + j * Tq;
      T* aj = a + j * Tq;
      for (int64_t l = 0; l < lanes; ++l) {
        const T x = seen[l][j] ? sj[l] : -kInf<T>;
        aj[l] = x;
        max[l] = max[l] < x ? x : max[l];
      }
    }
  } else if (mask.elementwise()) {
    for (int64_t l = 0; l < lanes; ++l) {
      const AttentionMask::Row row = mask.row(h, i0 + l);
      for (int64_t j = 0; j < end; ++j) {
        const T x = row.visible(j) ? s[j * Tq + l] + mask.bias(slope, i0 + l, j) : -kInf<T>;
        a[j * Tq + l] = x;
        max[l] = max[l] < x ? x : max[l];
      }
    }
  } else {
    T running[W];  // a local of the loop alone, so that it stays in a register
    std::copy_n(max, W, running);
    // ALiBi's distance p − j of lane l is (i0 + q_offset − j) + l: a column constant plus a ramp,
    // both small integers in T (mask.bias's value), with no int64 → T conversion per element,
    // which does not vectorise on AVX2 (as flash's score_tile).
    T ramp[W];
    for (int64_t l = 0; l < W; ++l) ramp[l] = static_cast<T>(l);
    for (int64_t j = 0; j < end; ++j) {  // lane l sits at key position first_p + l (causal) or sees every key
      const T* sj = s + j * Tq;
      T* aj = a + j * Tq;
      const T distance = static_cast<T>(i0 + mask.q_offset - j);
#pragma omp simd
      for (int64_t l = 0; l < lanes; ++l) {
        const T x = j <= first_p + l ? sj[l] - slope * (distance + ramp[l]) : -kInf<T>;
        aj[l] = x;
        running[l] = running[l] < x ? x : running[l];
      }
    }
    std::copy_n(running, W, max);
  }
  if (sink)
    for (int64_t l = 0; l < W; ++l) max[l] = max[l] < *sink ? *sink : max[l];
  for (int64_t l = 0; l < W; ++l) reference[l] = math::softmax_reference(max[l]);
  T running[W] = {};
  for (int64_t j = 0; j < end; ++j) {
    T* aj = a + j * Tq;
#pragma omp simd
    for (int64_t l = 0; l < lanes; ++l) {
      const T e = exp_nonpositive(aj[l] - reference[l]);
      aj[l] = e;
      running[l] += e;
    }
  }
  std::copy_n(running, W, sum);
  if (sink)  // the sink's term, after the keys' (it takes mass but has no value row)
    for (int64_t l = 0; l < W; ++l) sum[l] += exp_nonpositive(*sink - reference[l]);
  T inv[W];
  for (int64_t l = 0; l < W; ++l) inv[l] = sum[l] == T(0) ? T(0) : T(1) / sum[l];  // no key: zeros
  for (int64_t j = 0; j < Tk; ++j) {
    T* aj = a + j * Tq;
    if (j < end) {
#pragma omp simd
      for (int64_t l = 0; l < lanes; ++l) aj[l] *= inv[l];
    } else {
      std::fill_n(aj, lanes, T(0));
    }
  }
  if (lse)
    for (int64_t l = 0; l < lanes; ++l) lse[l] = math::log_sum_exp<double>(max[l], sum[l]);
}
// A full block of lanes is its own call, so that its loops have a constant trip count.
template <class T>
[[gnu::always_inline]] inline void masked_softmax_block(const T* s, T* a, int64_t Tk, int64_t Tq,
                                                        const AttentionMask& mask, int64_t h, int64_t i0, int64_t lanes,
                                                        const T* sink, double* lse) {
  if (Tq > kShortRow) {
    if (lanes == kWideBlock) masked_softmax_columns_of<kWideBlock>(s, a, Tk, Tq, mask, h, i0, kWideBlock, sink, lse);
    else masked_softmax_columns_of<kWideBlock>(s, a, Tk, Tq, mask, h, i0, lanes, sink, lse);
  } else {
    if (lanes == kNarrowBlock)
      masked_softmax_columns_of<kNarrowBlock>(s, a, Tk, Tq, mask, h, i0, kNarrowBlock, sink, lse);
    else masked_softmax_columns_of<kNarrowBlock>(s, a, Tk, Tq, mask, h, i0, lanes, sink, lse);
  }
}
AG_VECTOR_CLONES void masked_softmax_columns(const float* s, float* a, int64_t Tk, int64_t Tq, const AttentionMask& mask,
                                             int64_t h, int64_t i0, int64_t lanes, const float* sink, double* lse) {
  masked_softmax_block(s, a, Tk, Tq, mask, h, i0, lanes, sink, lse);
}
void masked_softmax_columns(const double* s, double* a, int64_t Tk, int64_t Tq, const AttentionMask& mask, int64_t h,
                            int64_t i0, int64_t lanes, const double* sink, double* lse) {
  masked_softmax_block(s, a, Tk, Tq, mask, h, i0, lanes, sink, lse);
}

// dSᵀ = Aᵀ ∘ (dAᵀ − colsum(dAᵀ ∘ Aᵀ)) for queries [0, lanes) of one [Tk, Tq]
// matrix (pointers at its first lane): softmax's vector–Jacobian product, each
// query's dot product added in key order. dS may be dA (in place). Its blocks
// are never narrower than kBackwardBlock: it reads Aᵀ saved by the forward, long
// out of cache, and 64 queries (a whole row of the default model's T = 64) make
// the read one sequential stream the prefetchers follow (blocks of 16 queries
// gave them none; docs/performance.md times both).
constexpr int64_t kBackwardBlock = 64;
template <int64_t W, class T>
[[gnu::always_inline]] inline void softmax_backward_columns_of(const T* a, const T* da, T* ds, int64_t Tk, int64_t Tq,
                                                               int64_t lanes) {
  T dot[W] = {};
  for (int64_t j = 0; j < Tk; ++j) {
#pragma omp simd
    for (int64_t l = 0; l < lanes; ++l) dot[l] += da[j * Tq + l] * a[j * Tq + l];
  }
  for (int64_t j = 0; j < Tk; ++j) {
#pragma omp simd
    for (int64_t l = 0; l < lanes; ++l) ds[j * Tq + l] = a[j * Tq + l] * (da[j * Tq + l] - dot[l]);
  }
}
template <class T>
[[gnu::always_inline]] inline void softmax_backward_block(const T* a, const T* da, T* ds, int64_t Tk, int64_t Tq,
                                                          int64_t lanes) {
  if (Tq > kShortRow) {
    if (lanes == kWideBlock) softmax_backward_columns_of<kWideBlock>(a, da, ds, Tk, Tq, kWideBlock);
    else softmax_backward_columns_of<kWideBlock>(a, da, ds, Tk, Tq, lanes);
  } else {
    if (lanes == kBackwardBlock) softmax_backward_columns_of<kBackwardBlock>(a, da, ds, Tk, Tq, kBackwardBlock);
    else softmax_backward_columns_of<kBackwardBlock>(a, da, ds, Tk, Tq, lanes);
  }
}
AG_VECTOR_CLONES void softmax_backward_columns(const float* a, const float* da, float* ds, int64_t Tk, int64_t Tq,
                                               int64_t lanes) {
  softmax_backward_block(a, da, ds, Tk, Tq, lanes);
}
void softmax_backward_columns(const double* a, const double* da, double* ds, int64_t Tk, int64_t Tq, int64_t lanes) {
  softmax_backward_block(a, da, ds, Tk, Tq, lanes);
}

// Calls block(matrix, i0, lanes) for every block of queries (fewer at the end)
// of every [Tk, Tq] matrix of a [B, Hq, Tk, Tq] tensor, `narrow` wide or
// kWideBlock past kShortRow queries, in parallel when the work is large; each
// block owns its columns.
template <class Block> void for_query_blocks(int64_t matrices, int64_t Tk, int64_t Tq, int64_t narrow, Block&& block) {
  const int64_t width = Tq > kShortRow ? kWideBlock : narrow, per_matrix = (Tq + width - 1) / width;
  for_rows(matrices * per_matrix, Tk * width, [&](int64_t task) {
    const int64_t matrix = task / per_matrix, i0 = task % per_matrix * width;
    block(matrix, i0, std::min(width, Tq - i0));
  });
}

// --- score modifiers ---------------------------------------------------------------------

// The relative table's bucket (ScoreModifiers::bucket) of each distance p − j =
// smallest + n, n < count, into buckets[n]: one logarithm per distance, not per score.
// Nothing without a relative table (the buckets are then never read).
inline void fill_buckets(const ScoreModifiers& mods, int64_t smallest, int64_t count, int64_t* buckets) {
  if (!mods.relative) return;
  for (int64_t n = 0; n < count; ++n) buckets[n] = mods.bucket(smallest + n, 0);
}

// --- tile products ------------------------------------------------------------------------

// A tile's left operand: the stored row-major matrix, its row stride, and
// whether the product reads it transposed.
template <class T> struct Left {
  const T* data;
  int64_t ld;
  bool transposed = false;
};

// C[M, N] = op(A)[M, K] · B[K, N] (accumulate: C += op(A) B, the product summed
// from zero and then added, so a long sum over tiles rounds like a blocked
// one), B and C row-major with row strides ldb and ldc: one tile_gemm.
// OpenBLAS's kernels beat register-blocked micro-kernels of ours on these tiles
// (commit 9669caf measures both; docs/performance.md).
template <class T>
void tile_product(int64_t M, int64_t N, int64_t K, Left<T> a, const T* b, int64_t ldb, T* c, int64_t ldc,
                  bool accumulate) {
  tile_gemm(a.transposed, false, M, N, K, a.data, a.ld, b, ldb, accumulate ? T(1) : T(0), c, ldc);
}

// --- the tiles of one (batch, head) ------------------------------------------------------

// Where one query tile and one key tile sit: queries [i0, i0 + rows), keys [j0, j0 + cols).
struct TilePair {
  int64_t i0, rows, j0, cols;
  TileVisibility visibility;
};
// The pair of query tile [i0, i0 + rows) and a key tile of the block map.
inline TilePair pair_of(int64_t i0, int64_t rows, const KeyTile& key) {
  return {i0, rows, key.j0, key.cols, key.visibility};
}

// Sᵀ[c][r] = −inf where query i0 + r of head h may not see key j0 + c (Partial tiles only).
template <class T> void mask_tile(T* st, const TilePair& t, const AttentionMask& mask, int64_t h) {
  if (!mask.elementwise()) {
    // Causal only: query i sees key j iff i ≥ j − q_offset, so key j0 + c is hidden
    // from a prefix of the tile's rows, r < j0 + c − q_offset − i0 (one fill per
    // column instead of a visible() test per element).
    for (int64_t c = 0; c < t.cols; ++c)
      std::fill_n(st + c * kQueryTile, std::clamp<int64_t>(t.j0 + c - mask.q_offset - t.i0, 0, t.rows), -kInf<T>);
    return;
  }
  for (int64_t r = 0; r < t.rows; ++r) {
    const AttentionMask::Row row = mask.row(h, t.i0 + r);
    for (int64_t c = 0; c < t.cols; ++c)
      if (!row.visible(t.j0 + c)) st[c * kQueryTile + r] = -kInf<T>;
  }
}

// score_tile's S' under score modifiers that change the scores (biases, a cap, a custom
// function): each entry is S' = mods.host_modify(scale·q·k), then ALiBi's bias, the tables
// read on the fly, in passes: the tables, the custom function, then the cap down each column
// with a tanh the compiler vectorises (tanh_vectorisable: std::tanh in float64, where the
// passes give host_modify's bits). factor, if not null, receives ∂S'/∂u of each entry (the
// chain factor of the cap and the custom function). Inlined into the float tasks' AVX-512
// clones, where its loops vectorise; score_tile, which the modifiers leave alone, keeps its
// code (and its bits) as it was.
template <class T>
[[gnu::always_inline]] inline void modified_score_tile(T* st, const TilePair& t, const AttentionShape& shape, int64_t h,
                                                       T* factor) {
  const T scale = static_cast<T>(shape.scale);
  const ScoreModifiers& mods = shape.mods;
  const T slope = static_cast<T>(shape.mask.alibi_slope(h));
  // Entry (r, c) sits at distance p − j = first + r − c: bucket[r − c + cols − 1].
  const int64_t first = t.i0 + shape.mask.q_offset - t.j0;
  int64_t bucket[kQueryTile + kKeyTile] = {};
  fill_buckets(mods, first - (t.cols - 1), t.rows + t.cols - 1, bucket);
  // u = scale·s + the tables' entries
  for (int64_t c = 0; c < t.cols; ++c) {
    T* column = st + c * kQueryTile;
    if (!mods.has_tables()) {
#pragma omp simd
      for (int64_t r = 0; r < t.rows; ++r) column[r] *= scale;
      continue;
    }
    for (int64_t r = 0; r < t.rows; ++r)
      column[r] = mods.biased_at(column[r] * scale, h, bucket[r - c + t.cols - 1], t.i0 + r, t.j0 + c);
  }
  // v = f(u), the user's function, and factor = f′(u) (1 without one)
  for (int64_t c = 0; c < t.cols && (factor || mods.custom); ++c)
    for (int64_t r = 0; r < t.rows; ++r) {
      const int64_t at = c * kQueryTile + r, p = t.i0 + r + shape.mask.q_offset, j = t.j0 + c;
      if (!mods.custom) {
        factor[at] = T(1);
        continue;
      }
      if (factor) factor[at] = static_cast<T>(mods.custom->derivative(static_cast<double>(st[at]), h, p, j));
      st[at] = static_cast<T>(mods.custom->value(static_cast<double>(st[at]), h, p, j));
    }
  // S' = cap·tanh(v/cap), factor ∘= 1 − (S'/cap)²
  if (mods.soft_cap > 0) {
    const T cap = static_cast<T>(mods.soft_cap);
    for (int64_t c = 0; c < t.cols; ++c) {
      T* column = st + c * kQueryTile;
#pragma omp simd
      for (int64_t r = 0; r < t.rows; ++r) column[r] = cap * math::tanh_vectorisable(column[r] / cap);
      if (!factor) continue;
      T* chain = factor + c * kQueryTile;
#pragma omp simd
      for (int64_t r = 0; r < t.rows; ++r) {
        const T x = column[r] / cap;
        chain[r] *= T(1) - x * x;
      }
    }
  }
  // + ALiBi's bias
  if (shape.mask.alibi_heads > 0)
    for (int64_t c = 0; c < t.cols; ++c)
      for (int64_t r = 0; r < t.rows; ++r) st[c * kQueryTile + r] += shape.mask.bias(slope, t.i0 + r, t.j0 + c);
}

// Sᵀ = scale·(the tile's products) + ALiBi's bias of head h, in place: the one
// formula the forward and the backward both use, so that the backward's
// S − lse cancels the forward's to the bit (a one-key row gets P = 1 exactly).
template <class T> void score_tile(T* st, const TilePair& t, const AttentionShape& shape, int64_t h) {
  const T scale = static_cast<T>(shape.scale);
  if (shape.mask.alibi_heads == 0) {
    for (int64_t c = 0; c < t.cols; ++c)
      for (int64_t r = 0; r < t.rows; ++r) st[c * kQueryTile + r] *= scale;
    return;
  }
  // The bias −slope·(p − j) down a column is an arithmetic progression: p − j = (first − c) + r.
  // Both terms are integers, so their sum in T is the distance itself (exact below 2²⁴ in float)
  // and each bias is mask.bias's value, without an int64 → T conversion per element, which does
  // not vectorise on AVX2 (docs/performance.md, "Positions").
  const T slope = static_cast<T>(shape.mask.alibi_slope(h));
  const int64_t first = t.i0 + shape.mask.q_offset - t.j0;  // p − j of the tile's first query and key
  T ramp[kQueryTile];
  for (int64_t r = 0; r < kQueryTile; ++r) ramp[r] = static_cast<T>(r);
  for (int64_t c = 0; c < t.cols; ++c) {
    const T distance = static_cast<T>(first - c);
    T* column = st + c * kQueryTile;
#pragma omp simd
    for (int64_t r = 0; r < t.rows; ++r) column[r] = column[r] * scale - slope * (distance + ramp[r]);
  }
}

// dst[c][r] = src[r·row_stride + c]: a tile of rows × d, transposed.
template <class T> void transpose_rows(const T* src, int64_t row_stride, int64_t rows, int64_t d, T* dst) {
  for (int64_t r = 0; r < rows; ++r)
    for (int64_t c = 0; c < d; ++c) dst[c * kQueryTile + r] = src[r * row_stride + c];
}

// The inputs every task reads, typed, and the key tiles each query tile visits.
template <class T> struct Operands {
  const T *Q, *K, *V;
  const AttentionShape& shape;
  const AttentionBlockMap& blocks;
};

// --- forward -------------------------------------------------------------------------

// Per-thread scratch of the forward. A key tile has at most min(Tk, kKeyTile)
// columns: sized so, a call with a few keys (a KV cache's first steps, the
// gradchecks) does not allocate and zero a whole tile.
template <class T> struct ForwardScratch {
  std::vector<T> qt, st, acc, row_max, running_sum, reference, rescale, tile_sum;
  ForwardScratch(int64_t d, int64_t Tk)
      : qt(d * kQueryTile), st(std::min(Tk, kKeyTile) * kQueryTile), acc(kQueryTile * d), row_max(kQueryTile),
        running_sum(kQueryTile), reference(kQueryTile), rescale(kQueryTile), tile_sum(kQueryTile) {}
};

// Rows [i0, i0 + rows) of head h of batch entry b: Z and lse. With m the running
// max and l the running sum of each row, for each visible key tile:
//   Sᵀ = scale·K_tile Qᵀ,   m_new = max(m, max_j S_ij),   P = exp(S − m_new),
//   l ← l·e^(m − m_new) + rowsum(P),   acc ← acc·e^(m − m_new) + P V_tile
// and at the end Z = acc / l, lse = m + log l.
template <class T>
[[gnu::always_inline]] inline void flash_forward_tile(const Operands<T>& in, int64_t b, int64_t h, int64_t i0,
                                                      ForwardScratch<T>& s, T* Z, double* lse) {
  const AttentionShape& shape = in.shape;
  const int64_t d = shape.d, rows = std::min(kQueryTile, shape.Tq - i0), kvh = h / shape.group();
  transpose_rows(in.Q + shape.q.at(b, h, i0), shape.q.row, rows, d, s.qt.data());
  T *st = s.st.data(), *acc = s.acc.data(), *m = s.row_max.data(), *l = s.running_sum.data();
  T *reference = s.reference.data(), *rescale = s.rescale.data(), *tile_sum = s.tile_sum.data();
  // A sink starts each row as a key of score sink_h and no value: m = sink_h, l = e^0 = 1.
  const bool sink = shape.mods.sinks != nullptr;
  std::fill_n(m, rows, sink ? shape.mods.sink<T>(h) : -kInf<T>);
  std::fill_n(l, rows, sink ? T(1) : T(0));
  std::fill_n(acc, rows * d, T(0));

  const AttentionMask mask = shape.mask.at_batch(b);  // a mask function's matrix of entry b
  for (const KeyTile& key : in.blocks.key_tiles(b, h, i0)) {
    const TilePair t = pair_of(i0, rows, key);
    const T* k = in.K + shape.kv.at(b, kvh, t.j0);
    const T* v = in.V + shape.kv.at(b, kvh, t.j0);
    // S = scale·Q Kᵀ (+ ALiBi's bias), stored as Sᵀ [cols][rows], −inf where hidden
    tile_product(t.cols, rows, d, Left<T>{k, shape.kv.row}, s.qt.data(), kQueryTile, st, kQueryTile, false);
    if (shape.mods.changes_scores()) modified_score_tile(st, t, shape, h, static_cast<T*>(nullptr));
    else score_tile(st, t, shape, h);
    if (t.visibility == TileVisibility::Partial) mask_tile(st, t, mask, h);
    // m_new = max(m, max_j S_ij); the old terms are rescaled by e^(m − m_new)
    std::copy_n(m, rows, reference);
    for (int64_t c = 0; c < t.cols; ++c)
      for (int64_t r = 0; r < rows; ++r) reference[r] = std::max(reference[r], st[c * kQueryTile + r]);
    for (int64_t r = 0; r < rows; ++r) {
      const T new_max = reference[r];
      reference[r] = math::softmax_reference(new_max);
      rescale[r] = exp_nonpositive(m[r] - reference[r]);
      m[r] = new_max;
    }
    // P = exp(S − m_new), in place of Sᵀ
    std::fill_n(tile_sum, rows, T(0));
    for (int64_t c = 0; c < t.cols; ++c)
      for (int64_t r = 0; r < rows; ++r) {
        T& p = st[c * kQueryTile + r];
        p = exp_nonpositive(p - reference[r]);
        tile_sum[r] += p;
      }
    // l ← l·e^(m − m_new) + rowsum(P),  acc ← acc·e^(m − m_new) + P V
    for (int64_t r = 0; r < rows; ++r) {
      l[r] = l[r] * rescale[r] + tile_sum[r];
      for (int64_t c = 0; c < d; ++c) acc[r * d + c] *= rescale[r];
    }
    tile_product(rows, d, t.cols, Left<T>{st, kQueryTile, true}, v, shape.kv.row, acc, d, true);
  }
  // Z = acc / l (0 for a row that saw no key: l = 0, acc = 0),  lse = m + log l
  for (int64_t r = 0; r < rows; ++r) {
    T* z = Z + shape.q.at(b, h, i0 + r);
    for (int64_t c = 0; c < d; ++c) z[c] = l[r] == T(0) ? T(0) : acc[r * d + c] / l[r];
    lse[shape.lse_at(b, h, i0 + r)] = math::log_sum_exp<double>(m[r], l[r]);
  }
}

// --- backward ------------------------------------------------------------------------

// Per-thread scratch of the backward: one query tile's transposed Q and dZ, its
// dQ accumulator, D, and its stripe of P and dP tiles across every key tile (and,
// under a soft cap or a custom function, of the chain factor ∂S'/∂u).
template <class T> struct BackwardScratch {
  std::vector<T> qt, dzt, dq, D, lse_hi, lse_lo, P, dP, factor;
  BackwardScratch(int64_t d, int64_t Tk, bool chain)
      : qt(d * kQueryTile), dzt(d * kQueryTile), dq(kQueryTile * d), D(kQueryTile), lse_hi(kQueryTile),
        lse_lo(kQueryTile), P(stripe(Tk)), dP(stripe(Tk)), factor(chain ? stripe(Tk) : 0) {}
  // The n-th visible key tile's slot starts at n·kKeyTile·kQueryTile; with one key
  // tile, the slot holds its Tk columns alone (as the forward's scratch).
  static int64_t stripe(int64_t Tk) {
    const int64_t key_tiles = (Tk + kKeyTile - 1) / kKeyTile;
    return (key_tiles == 1 ? Tk : key_tiles * kKeyTile) * kQueryTile;
  }
};

// dK and dV of kv head kvh of batch entry b, and dQ of the query heads that
// read it. Per query tile i of each of those heads, over its visible key tiles j:
//   pass 1:  S = scale·Q_i K_jᵀ,  P = exp(S − lse_i),  dP = dZ_i V_jᵀ,  D_i = rowsum(P ∘ dP)
//   pass 2:  dS = P ∘ (dP − D_i),  dV_j += Pᵀ dZ_i,  dK_j += scale·dSᵀ Q_i,  dQ_i += scale·dS K_j
// D is summed from the same rounded P and dP that dS subtracts it from, as the
// dense softmax backward does (docs/backprop.md: why not rowsum(dZ ∘ Z) here).
// Score modifiers: dS is taken back through the cap and the custom function (dU = dS ∘ ∂S'/∂u) before
// the products, and with bias tables dbias [Hq, bias_entries()] (batch entry b's
// partial sums, its heads of kvh written by this task alone) sums dU per entry in
// the loops' order: heads, query tiles, key tiles, keys, queries.
template <class T>
[[gnu::always_inline]] inline void flash_backward_group(const Operands<T>& in, const double* lse, const T* dZ,
                                                        const T* given_D, bool accumulate, int64_t b, int64_t kvh,
                                                        BackwardScratch<T>& s, T* dQ, T* dK, T* dV, T* dbias) {
  const AttentionShape& shape = in.shape;
  const ScoreModifiers& mods = shape.mods;
  const bool chain = mods.has_chain();
  const int64_t entries = mods.bias_entries();
  if (dbias)
    for (int64_t h = kvh * shape.group(); h < (kvh + 1) * shape.group(); ++h) std::fill_n(dbias + h * entries, entries, T(0));
  const int64_t d = shape.d, g = shape.group(), q_row = shape.q.row, kv_row = shape.kv.row;
  const T scale = static_cast<T>(shape.scale);
  if (!accumulate)
    for (int64_t j = 0; j < shape.Tk; ++j) {
      std::fill_n(dK + shape.kv.at(b, kvh, j), d, T(0));
      std::fill_n(dV + shape.kv.at(b, kvh, j), d, T(0));
    }
  for (int64_t h = kvh * g; h < (kvh + 1) * g; ++h)
    for (int64_t i0 = 0; i0 < shape.Tq; i0 += kQueryTile) {
      const int64_t rows = std::min(kQueryTile, shape.Tq - i0), at = shape.q.at(b, h, i0);
      const T *q = in.Q + at, *dz = dZ + at;
      transpose_rows(q, q_row, rows, d, s.qt.data());
      transpose_rows(dz, q_row, rows, d, s.dzt.data());
      T *D = s.D.data(), *lse_hi = s.lse_hi.data(), *lse_lo = s.lse_lo.data();
      if (given_D)
        for (int64_t r = 0; r < rows; ++r) D[r] = given_D[shape.lse_at(b, h, i0 + r)];
      else
        std::fill_n(D, rows, T(0));
      for (int64_t r = 0; r < rows; ++r) math::split_lse(lse[shape.lse_at(b, h, i0 + r)], lse_hi[r], lse_lo[r]);
      const std::span<const KeyTile> key_tiles = in.blocks.key_tiles(b, h, i0);
      // pass 1: P, dP and (unless given) D; the n-th visible key tile's P and dP go to the n-th slot of the stripe
      for (size_t n = 0; n < key_tiles.size(); ++n) {
        const TilePair t = pair_of(i0, rows, key_tiles[n]);
        T *p = s.P.data() + n * kKeyTile * kQueryTile, *dp = s.dP.data() + n * kKeyTile * kQueryTile;
        T* factor = chain ? s.factor.data() + n * kKeyTile * kQueryTile : nullptr;
        const T *k = in.K + shape.kv.at(b, kvh, t.j0), *v = in.V + shape.kv.at(b, kvh, t.j0);
        // S = scale·Q Kᵀ (+ bias), P = exp(S − lse)   (lse = +inf on a row that sees no key: P = 0)
        tile_product(t.cols, rows, d, Left<T>{k, kv_row}, s.qt.data(), kQueryTile, p, kQueryTile, false);
        // S is formed and stored first, as the forward does: the rounded S, not an
        // FMA's unrounded scale·S − lse (with it a one-key row got P = 1 − ε: dS ≠ 0).
        if (mods.changes_scores()) modified_score_tile(p, t, shape, h, factor);
        else score_tile(p, t, shape, h);
        if (t.visibility == TileVisibility::Partial) mask_tile(p, t, shape.mask.at_batch(b), h);
        for (int64_t c = 0; c < t.cols; ++c)
          for (int64_t r = 0; r < rows; ++r)
            p[c * kQueryTile + r] = exp_nonpositive(p[c * kQueryTile + r] - lse_hi[r] - lse_lo[r]);
        // Z = P V  →  dP = dZ Vᵀ
        tile_product(t.cols, rows, d, Left<T>{v, kv_row}, s.dzt.data(), kQueryTile, dp, kQueryTile, false);
        if (given_D) continue;
        for (int64_t c = 0; c < t.cols; ++c)
          for (int64_t r = 0; r < rows; ++r) D[r] += p[c * kQueryTile + r] * dp[c * kQueryTile + r];
      }
      // pass 2: dS and the three products
      std::fill_n(s.dq.data(), rows * d, T(0));
      for (size_t n = 0; n < key_tiles.size(); ++n) {
        const TilePair t = pair_of(i0, rows, key_tiles[n]);
        T *p = s.P.data() + n * kKeyTile * kQueryTile, *ds = s.dP.data() + n * kKeyTile * kQueryTile;
        const int64_t kv_at = shape.kv.at(b, kvh, t.j0);
        // Z = P V  →  dV += Pᵀ dZ
        tile_product(t.cols, d, rows, Left<T>{p, kQueryTile}, dz, q_row, dV + kv_at, kv_row, true);
        // P = softmax(S + M)  →  dS = P ∘ (dP − D), in place of dP, times scale for the two products below
        if (!mods.changes_scores()) {
          for (int64_t c = 0; c < t.cols; ++c)
            for (int64_t r = 0; r < rows; ++r)
              ds[c * kQueryTile + r] = scale * (p[c * kQueryTile + r] * (ds[c * kQueryTile + r] - D[r]));
        } else {
          // S' = cap·tanh(custom(u)/cap)  →  dU = dS ∘ ∂S'/∂u;  u = S + table entries  →  dBias[e] += dU
          const T* factor = chain ? s.factor.data() + n * kKeyTile * kQueryTile : nullptr;
          T* head_dbias = dbias ? dbias + h * entries : nullptr;
          int64_t bucket[kQueryTile + kKeyTile] = {};  // as score_tile's
          fill_buckets(mods, i0 + shape.mask.q_offset - t.j0 - (t.cols - 1), rows + t.cols - 1, bucket);
          for (int64_t c = 0; c < t.cols; ++c)
            for (int64_t r = 0; r < rows; ++r) {
              const int64_t at = c * kQueryTile + r, i = i0 + r;
              T du = p[at] * (ds[at] - D[r]);
              if (factor) du *= factor[at];
              if (head_dbias) mods.add_bias_gradient(du, bucket[r - c + t.cols - 1], i, t.j0 + c, head_dbias);
              ds[at] = scale * du;
            }
        }
        // S = scale·Q Kᵀ  →  dK += scale·dSᵀ Q,  dQ += scale·dS K
        tile_product(t.cols, d, rows, Left<T>{ds, kQueryTile}, q, q_row, dK + kv_at, kv_row, true);
        tile_product(rows, d, t.cols, Left<T>{ds, kQueryTile, true}, in.K + kv_at, kv_row, s.dq.data(), d, true);
      }
      for (int64_t r = 0; r < rows; ++r)
        for (int64_t c = 0; c < d; ++c) dQ[at + r * q_row + c] = (accumulate ? dQ[at + r * q_row + c] : T(0)) + s.dq[r * d + c];
    }
}

// The float tasks, compiled for AVX-512 as well (AG_VECTOR_CLONES, core/cpu/
// vector_math.h): their scaling, masking, exp and rescaling loops took most of
// a flash forward+backward in the baseline's 4-wide SSE (docs/performance.md).
// Overload resolution picks them over the templates for float.
AG_VECTOR_CLONES void flash_forward_tile(const Operands<float>& in, int64_t b, int64_t h, int64_t i0,
                                         ForwardScratch<float>& s, float* Z, double* lse) {
  flash_forward_tile<float>(in, b, h, i0, s, Z, lse);
}
AG_VECTOR_CLONES void flash_backward_group(const Operands<float>& in, const double* lse, const float* dZ,
                                           const float* given_D, bool accumulate, int64_t b, int64_t kvh,
                                           BackwardScratch<float>& s, float* dQ, float* dK, float* dV, float* dbias) {
  flash_backward_group<float>(in, lse, dZ, given_D, accumulate, b, kvh, s, dQ, dK, dV, dbias);
}

}  // namespace

void attention_softmax(const Tensor& S, const AttentionMask& mask, const Tensor& sinks, Tensor& A, Tensor& lse) {
  visit_floating(S.dtype(), "attention_softmax", [&](auto zero) {
    using T = decltype(zero);
    const int64_t Hq = S.size(1), Tk = S.size(2), Tq = S.size(3);
    const T* s = S.data<T>();
    const T* sink = sinks.defined() ? sinks.data<T>() : nullptr;
    T* a = A.data<T>();
    double* row_lse = lse.defined() ? lse.data<double>() : nullptr;
    for_query_blocks(S.numel() / (Tk * Tq), Tk, Tq, kNarrowBlock, [&](int64_t matrix, int64_t i0, int64_t lanes) {
      const int64_t at = matrix * Tk * Tq + i0;
      masked_softmax_columns(s + at, a + at, Tk, Tq, mask.at_batch(matrix / Hq), matrix % Hq, i0, lanes,
                             sink ? sink + matrix % Hq : nullptr,
                             row_lse ? row_lse + matrix * Tq + i0 : nullptr);
    });
  });
}

void attention_softmax_backward(const Tensor& A, const Tensor& dA, Tensor& dS) {
  visit_floating(A.dtype(), "attention_softmax_backward", [&](auto zero) {
    using T = decltype(zero);
    const int64_t Tk = A.size(2), Tq = A.size(3);
    const T *a = A.data<T>(), *da = dA.data<T>();
    T* ds = dS.data<T>();
    for_query_blocks(A.numel() / (Tk * Tq), Tk, Tq, kBackwardBlock, [&](int64_t matrix, int64_t i0, int64_t lanes) {
      const int64_t at = matrix * Tk * Tq + i0;
      softmax_backward_columns(a + at, da + at, ds + at, Tk, Tq, lanes);
    });
  });
}

// The score modifiers, in three ways. The general loop calls ScoreModifiers::host_modify per
// score: it serves a custom function. Without one, a key's row at a time (modified_row): the
// tables per score, the cap in a vector pass with flash's tanh (a scalar std::tanh per score
// made dense 3.2x its time without a cap; 1.2x this way: docs/performance.md, "Score modifiers:
// what they cost"). The indexed bias alone (Graphormer's
// b[h, φ(i, j)], no other modifier; causal or not) takes a vector path instead: it
// spent most of an epoch of graph's complete-graph model in the general loop at T = 2708,
// where the scores run along the queries i and the index [Tq, Tk] along the keys j, so each
// score's index was a row of the index apart (docs/performance.md, "Dense score modifiers
// and attention dropout"). The vector path transposes the index once per call into int32
// [Tk, Tq], then adds table[h, ·] along each key's row with gathers.
namespace {
bool indexed_only(const AttentionShape& shape) {
  const ScoreModifiers& m = shape.mods;
  return m.indexed && !m.relative && !m.custom && !(m.soft_cap > 0) && m.indexed_entries <= std::numeric_limits<int32_t>::max();
}
// The first query of key j's row that sees it: under a causal mask the queries i with
// i + q_offset < j do not (the general loop writes 0 there, and their dS is 0).
int64_t first_query_seeing(const AttentionShape& shape, int64_t j) {
  if (!shape.mask.causal) return 0;
  return std::clamp<int64_t>(j - shape.mask.q_offset, 0, shape.Tq);
}
// index [Tq, Tk] (row stride `row`) into out [Tk, Tq], in 64 × 64 blocks.
std::vector<int32_t> transposed_index(const int64_t* index, int64_t row, int64_t Tq, int64_t Tk) {
  std::vector<int32_t> out(static_cast<size_t>(Tq * Tk));
  constexpr int64_t kBlock = 64;
  for_rows((Tk + kBlock - 1) / kBlock, kBlock * Tq, [&](int64_t block) {
    const int64_t j0 = block * kBlock, j1 = std::min(j0 + kBlock, Tk);
    for (int64_t i0 = 0; i0 < Tq; i0 += kBlock)
      for (int64_t j = j0; j < j1; ++j)
        for (int64_t i = i0; i < std::min(i0 + kBlock, Tq); ++i)
          out[j * Tq + i] = static_cast<int32_t>(index[i * row + j]);
  });
  return out;
}
// u_i = s_i + table[idx_i] along one key's row (host_modify's bits: the same one addition).
template <class T> inline void add_indexed_row(const T* s, const int32_t* idx, const T* table, T* out, int64_t Tq) {
#pragma omp simd
  for (int64_t i = 0; i < Tq; ++i) out[i] = s[i] + table[idx[i]];
}
AG_VECTOR_CLONES void add_indexed_row(const float* s, const int32_t* idx, const float* table, float* out, int64_t Tq) {
  add_indexed_row<float>(s, idx, table, out, Tq);
}
// sums[n] += Σ_{i: idx_i = n} g_i along one key's row: a masked vector sum per entry for a
// small table (in T along the row, then added to the float64 sum), one float64 add per score
// for a large one.
template <class T> inline void indexed_row_sums(const T* g, const int32_t* idx, int64_t Tq, int64_t entries, double* sums) {
  if (entries > 32) {
    for (int64_t i = 0; i < Tq; ++i) sums[idx[i]] += static_cast<double>(g[i]);
    return;
  }
  for (int32_t n = 0; n < static_cast<int32_t>(entries); ++n) {
    T total = 0;
#pragma omp simd reduction(+ : total)
    for (int64_t i = 0; i < Tq; ++i) total += idx[i] == n ? g[i] : T(0);
    sums[n] += static_cast<double>(total);
  }
}
AG_VECTOR_CLONES void indexed_row_sums(const float* g, const int32_t* idx, int64_t Tq, int64_t entries, double* sums) {
  indexed_row_sums<float>(g, idx, Tq, entries, sums);
}
// u ← cap·tanh(u/cap) along a row, with the tanh the compiler vectorises (flash's: std::tanh
// in float64, where this is ScoreModifiers::capped's bits).
template <class T> inline void capped_row(T* u, int64_t n, T cap) {
#pragma omp simd
  for (int64_t i = 0; i < n; ++i) u[i] = cap * math::tanh_vectorisable(u[i] / cap);
}
AG_VECTOR_CLONES void capped_row(float* u, int64_t n, float cap) { capped_row<float>(u, n, cap); }
// dU = dS' ∘ (1 − (S'/cap)²) along a row (ScoreModifiers::cap_derivative's formula).
template <class T> inline void capped_chain_row(const T* s_mod, const T* ds, T* du, int64_t n, T cap) {
#pragma omp simd
  for (int64_t i = 0; i < n; ++i) {
    const T t = s_mod[i] / cap;
    du[i] = ds[i] * (T(1) - t * t);
  }
}
AG_VECTOR_CLONES void capped_chain_row(const float* s_mod, const float* ds, float* du, int64_t n, float cap) {
  capped_chain_row<float>(s_mod, ds, du, n, cap);
}
// S' of key j's row from its queries i0 … Tq − 1 (n of them): the tables' biases in
// ScoreModifiers::biased_at's order, then the cap in a vector pass. bucket: the row's
// buckets from query i0 on (bucket[i − i0] for query i).
template <class T>
void modified_row(const ScoreModifiers& mods, const T* s, int64_t h, const int64_t* bucket, int64_t i0, int64_t j,
                  int64_t n, T* out) {
  if (mods.has_tables())
    for (int64_t r = 0; r < n; ++r) out[r] = mods.biased_at(s[r], h, bucket[r], i0 + r, j);
  else
    std::copy(s, s + n, out);
  if (mods.soft_cap > 0) capped_row(out, n, static_cast<T>(mods.soft_cap));
}
}  // namespace

// One task per [Tk, Tq] matrix (batch entry, head h = matrix % Hq), its keys j in
// order, each key's row of queries i in order. Under a causal mask the keys after a
// query's position get 0, unmodified (the softmax never reads them).
void attention_score_mods(const Tensor& S, const AttentionShape& shape, Tensor& S_mod) {
  visit_floating(S.dtype(), "attention_score_mods", [&](auto zero) {
    using T = decltype(zero);
    const int64_t Hq = shape.Hq, Tk = shape.Tk, Tq = shape.Tq, q_offset = shape.mask.q_offset;
    const ScoreModifiers& mods = shape.mods;
    const T* s = S.data<T>();
    T* out = S_mod.data<T>();
    const int64_t matrices = S.numel() / (Tk * Tq);
    if (indexed_only(shape)) {
      const std::vector<int32_t> idx = transposed_index(mods.index, mods.index_row, Tq, Tk);
      for_rows(matrices, Tk * Tq, [&](int64_t matrix) {
        const T* table = static_cast<const T*>(mods.indexed) + (matrix % Hq) * mods.indexed_entries;
        for (int64_t j = 0, at = matrix * Tk * Tq; j < Tk; ++j) {
          const int64_t i0 = first_query_seeing(shape, j), row = at + j * Tq;
          std::fill_n(out + row, i0, T(0));
          add_indexed_row(s + row + i0, idx.data() + j * Tq + i0, table, out + row + i0, Tq - i0);
        }
      });
      return;
    }
    // Query i and key j sit at distance p − j = i + q_offset − j: bucket[i − j + Tk − 1].
    std::vector<int64_t> bucket(Tq + Tk - 1);
    fill_buckets(mods, q_offset - (Tk - 1), Tq + Tk - 1, bucket.data());
    if (!mods.custom) {  // a key's row at a time: the tables per score, the cap in a vector pass
      for_rows(matrices, Tk * Tq, [&](int64_t matrix) {
        const int64_t h = matrix % Hq;
        for (int64_t j = 0, at = matrix * Tk * Tq; j < Tk; ++j) {
          const int64_t i0 = first_query_seeing(shape, j), row = at + j * Tq;
          std::fill_n(out + row, i0, T(0));
          modified_row(mods, s + row + i0, h, bucket.data() + (i0 - j + Tk - 1), i0, j, Tq - i0, out + row + i0);
        }
      });
      return;
    }
    for_rows(matrices, Tk * Tq, [&](int64_t matrix) {
      const int64_t h = matrix % Hq, at = matrix * Tk * Tq;
      for (int64_t j = 0; j < Tk; ++j)
        for (int64_t i = 0; i < Tq; ++i)
          out[at + j * Tq + i] = shape.mask.causal && j > i + q_offset
                                     ? T(0)
                                     : mods.host_modify(s[at + j * Tq + i], h, i + q_offset, bucket[i - j + Tk - 1], i, j,
                                                        static_cast<T*>(nullptr));
    });
  });
}

// One task per matrix as above: it alone writes the matrix's dU and its head's row
// of dBias (of its batch entry), summed in key-then-query order (the indexed bias's
// vector path: each key's row summed per entry in float64, the rows added in key order).
// Keys after a causal query's position have dS' = 0 (A = 0 there) and are skipped: dU = dS' = 0.
void attention_score_mods_backward(const Tensor& dS, const Tensor& S, const AttentionShape& shape, Tensor& dU,
                                   Tensor& dBias) {
  visit_floating(dS.dtype(), "attention_score_mods_backward", [&](auto zero) {
    using T = decltype(zero);
    const int64_t Hq = shape.Hq, Tk = shape.Tk, Tq = shape.Tq, q_offset = shape.mask.q_offset;
    const int64_t entries = shape.mods.bias_entries();
    const ScoreModifiers& mods = shape.mods;
    const T *ds = dS.data<T>(), *s = S.defined() ? S.data<T>() : nullptr;
    T* du = dU.data<T>();
    T* dbias = dBias.defined() ? dBias.data<T>() : nullptr;
    const int64_t matrices = dS.numel() / (Tk * Tq);
    if (indexed_only(shape)) {  // u = S + table[h, index]: dU = dS' (no chain factor), dBias[n] = Σ_{index = n} dU
      const std::vector<int32_t> idx = dbias ? transposed_index(mods.index, mods.index_row, Tq, Tk) : std::vector<int32_t>{};
      for_rows(matrices, Tk * Tq, [&](int64_t matrix) {
        const int64_t at = matrix * Tk * Tq;
        if (du != ds) std::copy(ds + at, ds + at + Tk * Tq, du + at);
        if (!dbias) return;
        std::vector<double> sums(static_cast<size_t>(entries), 0.0);
        for (int64_t j = 0; j < Tk; ++j) {
          const int64_t i0 = first_query_seeing(shape, j);
          indexed_row_sums(ds + at + j * Tq + i0, idx.data() + j * Tq + i0, Tq - i0, entries, sums.data());
        }
        for (int64_t n = 0; n < entries; ++n) dbias[matrix * entries + n] = static_cast<T>(sums[n]);
      });
      return;
    }
    std::vector<int64_t> bucket(Tq + Tk - 1);  // as attention_score_mods'
    fill_buckets(mods, q_offset - (Tk - 1), Tq + Tk - 1, bucket.data());
    if (!mods.custom) {  // a key's row at a time, as the forward: the chain factor in a vector pass, then
                         // the tables' sums per score in the general loop's order (key, then query)
      for_rows(matrices, Tk * Tq, [&](int64_t matrix) {
        const int64_t at = matrix * Tk * Tq, h = matrix % Hq;
        T* row_dbias = dbias ? dbias + matrix * entries : nullptr;
        if (row_dbias) std::fill_n(row_dbias, entries, T(0));
        std::vector<T> s_mod(mods.soft_cap > 0 && s ? static_cast<size_t>(Tq) : 0);
        for (int64_t j = 0; j < Tk; ++j) {
          const int64_t i0 = first_query_seeing(shape, j), row = at + j * Tq, n = Tq - i0;
          const int64_t* row_bucket = bucket.data() + (i0 - j + Tk - 1);
          if (du != ds) std::copy(ds + row, ds + row + i0, du + row);  // hidden: dU = dS' (0)
          if (!s_mod.empty()) {  // S' again, as the forward formed it, for 1 − (S'/cap)²
            modified_row(mods, s + row + i0, h, row_bucket, i0, j, n, s_mod.data());
            capped_chain_row(s_mod.data(), ds + row + i0, du + row + i0, n, static_cast<T>(mods.soft_cap));
          } else if (du != ds) {
            std::copy(ds + row + i0, ds + row + Tq, du + row + i0);
          }
          if (!row_dbias) continue;
          const T* g = du + row + i0;
          if (mods.relative)
            for (int64_t r = 0; r < n; ++r) row_dbias[row_bucket[r]] += g[r];
          if (mods.indexed) {
            const int64_t* index = mods.index + j;  // index[i, j] at i · index_row + j
            T* indexed = row_dbias + (mods.relative ? mods.relative_buckets : 0);
            for (int64_t r = 0; r < n; ++r) indexed[index[(i0 + r) * mods.index_row]] += g[r];
          }
        }
      });
      return;
    }
    for_rows(matrices, Tk * Tq, [&](int64_t matrix) {
      const int64_t at = matrix * Tk * Tq, h = matrix % Hq;
      T* row_dbias = dbias ? dbias + matrix * entries : nullptr;  // [n, Hq, entries]: matrix (b, h) is row b·Hq + h
      if (row_dbias) std::fill_n(row_dbias, entries, T(0));
      for (int64_t j = 0; j < Tk; ++j)
        for (int64_t i = 0; i < Tq; ++i) {
          const int64_t e = at + j * Tq + i;
          if (shape.mask.causal && j > i + q_offset) {
            du[e] = ds[e];
            continue;
          }
          const int64_t b = bucket[i - j + Tk - 1];
          T factor = T(1);  // ∂S'/∂u, recomputed from S as the forward formed S'
          if (s) mods.host_modify(s[e], h, i + q_offset, b, i, j, &factor);
          const T g = ds[e] * factor;
          du[e] = g;
          if (row_dbias) mods.add_bias_gradient(g, b, i, j, row_dbias);
        }
    });
  });
}

namespace {
// α_i = Σ_c Q_ic over head h's Tq rows (or β_j over a kv head's Tk rows of K), in float64, rounded to T.
template <class T> void row_sums(const T* x, const HeadStrides& at, int64_t b, int64_t h, int64_t rows, int64_t d, T* out) {
  for (int64_t t = 0; t < rows; ++t) {
    const T* row = x + at.at(b, h, t);
    double total = 0;
    for (int64_t c = 0; c < d; ++c) total += static_cast<double>(row[c]);
    out[t] = static_cast<T>(total);
  }
}
}  // namespace

// One task per (batch entry, query head) of the chunk: α and β summed once, then key j's row
// of Sᵀ from every query (a plain loop the compiler vectorises).
void attention_additive_scores(const Tensor& Q, const Tensor& K, const AttentionShape& shape, double slope,
                               int64_t first_batch, Tensor& S) {
  visit_floating(S.dtype(), "attention_additive_scores", [&](auto zero) {
    using T = decltype(zero);
    const int64_t Hq = shape.Hq, Tq = shape.Tq, Tk = shape.Tk, d = shape.d, group = shape.group();
    const T *q = Q.data<T>(), *k = K.data<T>();
    T* s = S.data<T>();
    const T a = static_cast<T>(slope);
    for_rows(S.numel() / (Tk * Tq), Tk * Tq, [&](int64_t matrix) {
      const int64_t b = first_batch + matrix / Hq, h = matrix % Hq;
      std::vector<T> alpha(Tq), beta(Tk);
      row_sums(q, shape.q, b, h, Tq, d, alpha.data());
      row_sums(k, shape.kv, b, h / group, Tk, d, beta.data());
      const T* __restrict al = alpha.data();
      for (int64_t j = 0; j < Tk; ++j) {
        T* __restrict st = s + matrix * Tk * Tq + j * Tq;
        const T bj = beta[j];
#pragma omp simd
        for (int64_t i = 0; i < Tq; ++i) st[i] = math::leaky_relu(al[i] + bj, a);
      }
    });
  });
}

// One task per (batch entry, kv head): it alone writes its kv head's rows of dK and the rows of
// dQ of the query heads that read it, so no two tasks write one element. Per query head in
// order, keys j in order, queries i in order: g = dU·LeakyReLU′(α_i + β_j) added to dα_i and
// dβ_j (float64 sums), then each sum written to all d columns of its row.
void attention_additive_scores_backward(const Tensor& Q, const Tensor& K, const Tensor& dU, const AttentionShape& shape,
                                        double slope, int64_t first_batch, Tensor& dQ, Tensor& dK) {
  visit_floating(dU.dtype(), "attention_additive_scores_backward", [&](auto zero) {
    using T = decltype(zero);
    const int64_t Hq = shape.Hq, Hkv = shape.Hkv, Tq = shape.Tq, Tk = shape.Tk, d = shape.d, group = shape.group();
    const T *q = Q.data<T>(), *k = K.data<T>(), *du = dU.data<T>();
    T *dq = dQ.data<T>(), *dk = dK.data<T>();
    const T a = static_cast<T>(slope);
    const int64_t n = dU.size(0);
    for_rows(n * Hkv, group * Tk * Tq, [&](int64_t task) {
      const int64_t chunk_b = task / Hkv, kvh = task % Hkv, b = first_batch + chunk_b;
      std::vector<T> alpha(Tq), beta(Tk);
      std::vector<double> dalpha(Tq), dbeta(Tk, 0.0);
      row_sums(k, shape.kv, b, kvh, Tk, d, beta.data());
      for (int64_t h = kvh * group; h < (kvh + 1) * group; ++h) {
        row_sums(q, shape.q, b, h, Tq, d, alpha.data());
        std::fill(dalpha.begin(), dalpha.end(), 0.0);
        const T* __restrict al = alpha.data();
        double* __restrict da = dalpha.data();
        for (int64_t j = 0; j < Tk; ++j) {
          const T* __restrict g = du + (chunk_b * Hq + h) * Tk * Tq + j * Tq;
          const T bj = beta[j];
          double column = 0;
#pragma omp simd reduction(+ : column)
          for (int64_t i = 0; i < Tq; ++i) {
            const double gij = static_cast<double>(g[i] * math::leaky_relu_grad(al[i] + bj, a));
            da[i] += gij;
            column += gij;
          }
          dbeta[j] += column;
        }
        for (int64_t i = 0; i < Tq; ++i) std::fill_n(dq + shape.q.at(b, h, i), d, static_cast<T>(dalpha[i]));
      }
      for (int64_t j = 0; j < Tk; ++j) std::fill_n(dk + shape.kv.at(b, kvh, j), d, static_cast<T>(dbeta[j]));
    });
  });
}

namespace {
// One key's row of Aᵀ, Tq queries: o_i = x_i·scale where the support a_i ≠ 0 and the draw at
// counter first + i·stride is ≥ p, else 0. A hidden pair (a_i = 0) gets 0 whatever its draw
// (the forward's Ã is 0 there, and the backward's dA is multiplied by A = 0: dS = A ∘ (…)), so
// the draw can be made for every i and the loop runs as one vector select (the float version
// compiled for AVX-512 too, where the hash's 64-bit products are one instruction).
// The draw's test is an integer one (uniform_at_least, core/random.h: the same kept entries).
template <class T>
inline void dropout_key_row(const T* x, const T* a, T* o, int64_t Tq, uint64_t first, uint64_t stride, uint64_t seed,
                            uint64_t threshold, T scale) {
#pragma omp simd
  for (int64_t i = 0; i < Tq; ++i) {
    const bool drawn = uniform_at_least(seed, first + static_cast<uint64_t>(i) * stride, threshold);
    o[i] = ((a[i] != T(0)) & drawn) ? x[i] * scale : T(0);  // & (not &&): no branch in the simd loop
  }
}
AG_VECTOR_CLONES void dropout_key_row(const float* x, const float* a, float* o, int64_t Tq, uint64_t first,
                                      uint64_t stride, uint64_t seed, uint64_t threshold, float scale) {
  dropout_key_row<float>(x, a, o, Tq, first, stride, seed, threshold, scale);
}
}  // namespace

// Element (b', h, j, i) of Aᵀ reads counter offset + ((b·Hq + h)·Tq + i)·Tk + j, b = first_batch + b'
// (ag::dropout's counters for A [B, Hq, Tq, Tk]); where the support is 0 it writes 0.
void attention_dropout(const Tensor& X, const Tensor& support, double p, uint64_t seed, uint64_t offset,
                       const uint64_t* counter_shift, int64_t first_batch, Tensor& out) {
  if (counter_shift) offset += *counter_shift;
  visit_floating(X.dtype(), "attention_dropout", [&](auto zero) {
    using T = decltype(zero);
    const int64_t Hq = X.size(1), Tk = X.size(2), Tq = X.size(3);
    const T *x = X.data<T>(), *a = support.data<T>();
    T* o = out.data<T>();
    const T scale = p < 1 ? static_cast<T>(1.0 / (1.0 - p)) : T(0);
    const uint64_t first = offset + static_cast<uint64_t>(first_batch * Hq * Tq * Tk);
    const uint64_t threshold = uniform_threshold(p);
    for_rows(X.numel() / (Tk * Tq), Tk * Tq, [&](int64_t matrix) {
      const int64_t at = matrix * Tk * Tq;
      for (int64_t j = 0; j < Tk; ++j) {
        const int64_t e = at + j * Tq;
        dropout_key_row(x + e, a + e, o + e, Tq, first + static_cast<uint64_t>(at + j), static_cast<uint64_t>(Tk), seed,
                        threshold, scale);
      }
    });
  });
}

void rotary_embedding(const Tensor& X, const RotaryShape& shape, Tensor& Y) {
  visit_floating(X.dtype(), "rotary_embedding", [&](auto zero) {
    using T = decltype(zero);
    const T* x = X.data<T>();
    T* y = Y.data<T>();
    const int64_t half = shape.d / 2;
    // The rotations depend on (t, i) alone: T·d/2 of them, formed once for the B·H rows that share them.
    std::vector<double> frequency(half);
    for (int64_t i = 0; i < half; ++i) frequency[i] = shape.frequency(i);
    std::vector<T> cosine(shape.T * half), sine(shape.T * half);
    for (int64_t t = 0; t < shape.T; ++t)
      for (int64_t i = 0; i < half; ++i) {
        const double angle = shape.angle(shape.first_position + t, frequency[i]);
        cosine[t * half + i] = static_cast<T>(std::cos(angle));
        sine[t * half + i] = static_cast<T>(std::sin(angle));
      }
    // One task per (b, h), its T rows in order: no division per row (they cost more than the rotation).
    for_rows(shape.B * shape.H, shape.T * shape.d, [&](int64_t bh) {
      const int64_t b = bh / shape.H, h = bh % shape.H;
      for (int64_t t = 0; t < shape.T; ++t) {
        const int64_t at = shape.at.at(b, h, t);
        const T *c = cosine.data() + t * half, *sn = sine.data() + t * half, *in = x + at;
        T* out = y + at;
#pragma omp simd
        for (int64_t i = 0; i < half; ++i) rotate_pair(in, out, half, i, c[i], sn[i]);
      }
    });
  });
}

void flash_attention(const Tensor& Q, const Tensor& K, const Tensor& V, const AttentionShape& shape, Tensor& Z,
                     Tensor& lse) {
  visit_floating(Q.dtype(), "flash_attention", [&](auto zero) {
    using T = decltype(zero);
    const auto blocks = attention_block_map(shape, kQueryTile, kKeyTile);
    const Operands<T> in{Q.data<T>(), K.data<T>(), V.data<T>(), shape, *blocks};
    T* z = Z.data<T>();
    double* row_lse = lse.data<double>();
    const int64_t tiles = (shape.Tq + kQueryTile - 1) / kQueryTile, tasks = shape.B * shape.Hq * tiles;
#pragma omp parallel if (worth_threads(shape, tasks))
    {
      ForwardScratch<T> scratch(shape.d, shape.Tk);
#pragma omp for schedule(dynamic)
      for (int64_t task = 0; task < tasks; ++task) {
        const int64_t bh = task / tiles, i0 = task % tiles * kQueryTile;
        flash_forward_tile(in, bh / shape.Hq, bh % shape.Hq, i0, scratch, z, row_lse);
      }
    }
  });
}

void flash_attention_backward(const Tensor& Q, const Tensor& K, const Tensor& V, const Tensor& lse, const Tensor& dZ,
                              const Tensor& D, const AttentionShape& shape, bool accumulate, Tensor& dQ, Tensor& dK,
                              Tensor& dV, Tensor& dBias) {
  visit_floating(Q.dtype(), "flash_attention_backward", [&](auto zero) {
    using T = decltype(zero);
    const auto blocks = attention_block_map(shape, kQueryTile, kKeyTile);
    const Operands<T> in{Q.data<T>(), K.data<T>(), V.data<T>(), shape, *blocks};
    const int64_t tasks = shape.B * shape.Hkv, per_batch = shape.Hq * shape.mods.bias_entries();
    T* dbias = dBias.defined() ? dBias.data<T>() : nullptr;  // [B, Hq, bias_entries()]
#pragma omp parallel if (worth_threads(shape, tasks))
    {
      BackwardScratch<T> scratch(shape.d, shape.Tk, shape.mods.has_chain());
#pragma omp for schedule(dynamic)
      for (int64_t task = 0; task < tasks; ++task) {
        const int64_t b = task / shape.Hkv;
        flash_backward_group(in, lse.data<double>(), dZ.data<T>(), D.defined() ? D.data<T>() : nullptr, accumulate, b,
                             task % shape.Hkv, scratch, dQ.data<T>(), dK.data<T>(), dV.data<T>(),
                             dbias ? dbias + b * per_batch : nullptr);
      }
    }
  });
}

void attention_merge(Tensor& Z, Tensor& lse, const Tensor& Z_part, const Tensor& lse_part, const AttentionShape& shape) {
  visit_floating(Z.dtype(), "attention_merge", [&](auto zero) {
    using T = decltype(zero);
    T* z = Z.data<T>();
    const T* z_part = Z_part.data<T>();
    double* row_lse = lse.data<double>();
    const double* part_lse = lse_part.data<double>();
    const int64_t d = shape.d;
    for_rows(shape.B * shape.Hq * shape.Tq, d, [&](int64_t row) {  // row = lse_at(b, h, i)
      const int64_t at = shape.q.at(row / (shape.Hq * shape.Tq), row / shape.Tq % shape.Hq, row % shape.Tq);
      const math::SoftmaxMerge merged = math::merge_softmax_parts(row_lse[row], part_lse[row]);
      const T w1 = static_cast<T>(merged.weight_1), w2 = static_cast<T>(merged.weight_2);
      for (int64_t e = 0; e < d; ++e) z[at + e] = w1 * z[at + e] + w2 * z_part[at + e];
      row_lse[row] = merged.log_sum_exp;
    });
  });
}

}  // namespace ag::cpu
