// The kernels of FlashAttention-2 on tensor cores (sm_80 and later) and their launches
// (forward_launch, backward_launch; cuda/flash_mma.cu calls them): bf16 inputs through
// mma.sync.m16n8k16 under --precision bf16, tf32 inputs through mma.sync.m16n8k8
// under --precision tf32; fp32 accumulation, the running max and sum in fp32. The
// kernels are written once for both operand formats (cuda/mma_fragments.cuh). The float32
// kernel of cuda/attention.cu is their reference (and the CPU's, core/cpu/attention.cpp,
// that kernel's); tests/test_flash_mma.cpp checks them against the CPU in float64
// within each format's derived bound. Chosen by flash_mma_takes (cuda/flash_mma.cuh).
//
// The math is the float32 kernel's (docs/backprop.md, "FlashAttention"):
//   forward:  S = scale·Q Kᵀ (+ ALiBi's bias), online softmax over key tiles, Z = P V / l, lse = m + log l
//   backward: P = exp(S − lse), dP = dZ Vᵀ, D = rowsum(P ∘ dP), dS = P ∘ (dP − D),
//             dV = Pᵀ dZ, dQ = scale·dS K, dK = scale·dSᵀ Q.
//
// Data. Q, K, V (and dZ) are rounded once to the operand format into compact
// [B, H, T, d_h] copies (operand_rows), so that the kernels read 16-byte rows whatever the tensors'
// strides; Z, lse, D, dQ, dK, dV are written in fp32 (float64 for lse) where the
// float32 kernel writes them.
//
// Thread mapping (4 warps, 128 threads per block; kRows = kCols = 64):
//   forward:  one block per (b, query head h, tile of 64 queries); warp w owns
//             query rows 16w … 16w + 15 and keeps its S tile [16, 64], the
//             running m and l and its rows of the accumulator O [16, d_h] in
//             registers. K and V tiles of 64 keys are streamed through shared
//             memory; key tiles that no query of the tile sees (AttentionMask::tile,
//             as the float32 kernel classifies them: after the last query under
//             causality, outside a window) are never loaded, and tiles that every
//             query sees wholly skip the per-element test.
//   backward, dQ: one block per (b, h, query tile), as the forward; pass 1 sums
//             D = rowsum(P ∘ dP) over the key tiles (unless D is given), pass 2
//             accumulates dQ in registers. A separate pass rather than FA2's fp32
//             atomics on dQ: every output element is written by one thread, summed
//             in a fixed order, so the same bits every run — core/kernels.inc's
//             contract for flash_attention_backward, which the float32 kernel keeps.
//             Its price: S and dP are recomputed for D and for dQ (the op does not
//             hand the backward Z, so D cannot be rowsum(dZ ∘ Z)).
//   backward, dK dV: one block per (b, kv head, tile of 64 keys); warp w owns
//             keys 16w … 16w + 15 and computes the transposed tiles Sᵀ, Pᵀ, dPᵀ,
//             dSᵀ [16, kQueries] in registers over every query tile that sees the
//             keys, of every query head that reads the kv head (GQA); dK and dV
//             accumulate in registers and are written once: no atomics.
//
// The fragments (how a warp's lanes hold the tiles of one mma, the two operand formats,
// and the products built of them): cuda/mma_fragments.cuh.
//
// Device code that a host build compiles too (tests/test_cuda_on_host.cpp runs these
// kernels with a block's threads as host fibers and a model of mma.sync): it writes
// AG_UNROLL and AG_NOINLINE (cuda/host_compilable.cuh) where CUDA code writes #pragma
// unroll and __noinline__.
#pragma once
#include <cstdint>
#include <limits>
#include <string>
#include <type_traits>

#include "core/error.h"
#include "cuda/attention_tiles.cuh"
#include "cuda/host_compilable.cuh"
#include "cuda/mma_fragments.cuh"
#include "cuda/shared_buffers.cuh"

namespace ag::cuda::flash_mma {
namespace {

using mma::Bf16;  // the operand formats and the products: cuda/mma_fragments.cuh
using mma::kPad;
using mma::product_columns;
using mma::product_rows;
using mma::Tf32;

constexpr int kWarps = 4, kBlockThreads = 32 * kWarps;
constexpr int kRows = 16 * kWarps;  // query rows per block (forward, dQ): 16 per warp, one mma's M
constexpr int kCols = 64;           // keys per tile (forward, dQ); keys per block in the dK dV kernel
constexpr float kInfF = std::numeric_limits<float>::infinity();

// Query rows per tile in the dK dV kernel: its warps hold dK and dV [16, d_h] in
// registers besides Sᵀ and dPᵀ [16, kQueries], so d_h = 128 takes half the tile.
template <int D> constexpr int kQueries = D == 128 ? 32 : 64;

__host__ __device__ constexpr int64_t tiles_of(int64_t n, int tile) { return (n + tile - 1) / tile; }

// The sum over the 4 lanes (t = 0 … 3) that hold one row of a C fragment.
__device__ inline float quad_sum(float v) {
  v += __shfl_xor_sync(0xffffffffu, v, 1);
  return v + __shfl_xor_sync(0xffffffffu, v, 2);
}
__device__ inline float quad_max(float v) {
  v = fmaxf(v, __shfl_xor_sync(0xffffffffu, v, 1));
  return fmaxf(v, __shfl_xor_sync(0xffffffffu, v, 2));
}

// Rows row0 … row0 + n − 1 of `src` (compact [rows, D] operands) into shared dst [n][D + kPad],
// rows at or past `rows` as zeros (their scores are masked; zeros keep them finite).
template <int D, class E> __device__ void load_rows(const E* src, int64_t row0, int64_t rows, int n, E* dst) {
  constexpr int per = 16 / static_cast<int>(sizeof(E)), chunks = D / per;  // 16 bytes each
  for (int idx = threadIdx.x; idx < n * chunks; idx += blockDim.x) {
    const int r = idx / chunks, c = idx % chunks;
    uint4 v = make_uint4(0, 0, 0, 0);
    if (row0 + r < rows) v = *reinterpret_cast<const uint4*>(src + (row0 + r) * D + per * c);
    *reinterpret_cast<uint4*>(dst + r * (D + kPad<E>) + per * c) = v;
  }
}

// Under a sparse pattern or ALiBi the kernels' masked instantiation (kMasked) asks the mask
// (AttentionMask, the float32 kernel's and the CPU's) once per tile — the whole block together,
// block_tile (cuda/attention_tiles.cuh), so every thread of the block must call classify — and
// per element only on a tile's edge, through the two functions below. They are not inlined: the pattern's row
// (its random blocks an array) would otherwise sit in every unrolled entry of the fragment
// loops, spilling their registers. The calls still cost registers (the plain forward at
// d_h = 64: 101 without them, 166 with), so problems without a pattern or ALiBi run the
// plain instantiation, whose causal test is inline. flash_mma_takes sends no mask function here, so shape.mask
// serves every batch entry as it is (at_batch changes only a mask function's pointers).
//
// How the query rows [i0, i_end) of head h see the key tile from j0: None is skipped;
// `edge` says whether its entries need the per-element test — a Partial tile, or one whose
// padding (keys past Tk, or query rows past Tq where `rows` counts the tile's padded rows)
// would otherwise count as seen.
struct TileTest {
  bool skip, edge;
};
__device__ AG_NOINLINE TileTest classify(const AttentionMask& mask, int64_t Tq, int64_t Tk, int64_t h, int64_t i0,
                                          int64_t i_end, int rows, int64_t j0, int cols) {
  const TileVisibility visibility = block_tile(mask, h, i0, i_end, j0, min(j0 + cols, Tk));
  return {visibility == TileVisibility::None, visibility == TileVisibility::Partial || j0 + cols > Tk || i0 + rows > Tq};
}
// This lane's entries of a [16, N] C fragment tile whose lane rows are r and r + 8 and whose
// columns start at c0 (see the top of the file): bit 4·nt + e set where entry e of column tile
// nt is seen — rows are queries and columns keys, or the reverse when `transposed` (the
// dK dV kernel's Sᵀ). Inside the problem only: the rows past Tq and the keys past Tk are padding.
__device__ AG_NOINLINE uint32_t seen_entries(const AttentionMask& mask, int64_t Tq, int64_t Tk, int64_t h, int n,
                                              bool transposed, int64_t r, int64_t c0) {
  const int t = threadIdx.x % 4;
  uint32_t bits = 0;
  for (int idx = 0; idx < n / 2; ++idx) {  // n / 8 column tiles of 4 entries: at most 32
    const int64_t a = r + 8 * (idx % 4 / 2), b = c0 + 8 * (idx / 4) + 2 * t + idx % 2;
    const int64_t i = transposed ? b : a, j = transposed ? a : b;
    if (i < Tq && j < Tk && mask.visible(h, i, j)) bits |= 1u << idx;
  }
  return bits;
}
__device__ inline bool seen(uint32_t bits, int nt, int e) { return (bits >> (4 * nt + e)) & 1u; }
// Whether query i sees key j without a pattern: causality with the query offset (the keys
// past Tk are padding). The kernels' plain instantiation (kMasked false) tests this alone,
// inline, where the masked one calls the two functions above.
__device__ inline bool sees_causal(const AttentionShape& shape, int64_t i, int64_t j) {
  return j < shape.Tk && !(shape.mask.causal && j > i + shape.mask.q_offset);
}
// Whether a problem needs the masked instantiation: a sparse pattern or ALiBi.
inline bool masked(const AttentionShape& shape) { return shape.mask.pattern.limited() || shape.mask.alibi_heads > 0; }
// The keys that queries [i0, i_end) see at all: [0, key_end).
__device__ inline int64_t key_end(const AttentionShape& shape, int64_t i_end) {
  return shape.mask.causal ? min(shape.Tk, i_end - 1 + shape.mask.q_offset + 1) : shape.Tk;
}

// (b, h, query tile i0) of task `task` in the grid of (b, h, tile) tasks.
struct QueryTask {
  int64_t b, h, kvh, i0;
};
__device__ inline QueryTask query_task(const AttentionShape& shape, int64_t task) {
  const int64_t q_tiles = tiles_of(shape.Tq, kRows), bh = task / q_tiles, h = bh % shape.Hq;
  return {bh / shape.Hq, h, h / shape.group(), task % q_tiles * kRows};
}

// --- forward --------------------------------------------------------------------------------

// Shared memory: Q [kRows], K, V [kCols] rows of D + kPad operands.
template <class F, int D>
constexpr size_t forward_bytes = (kRows + 2 * kCols) * (D + kPad<typename F::Element>) * sizeof(typename F::Element);

// Q, K, V compact operands [B, H, T, D]; Z fp32 laid out by shape.q; lse [B, Hq, Tq].
template <class F, int D, bool kMasked>
__global__ void __launch_bounds__(kBlockThreads)
    forward_kernel(const typename F::Element* Q, const typename F::Element* K, const typename F::Element* V,
                   AttentionShape shape, float* Z, double* lse) {
  using E = typename F::Element;
  unsigned char* shared = dynamic_shared_bytes();
  constexpr int ld = D + kPad<E>;
  E *sQ = reinterpret_cast<E*>(shared), *sK = sQ + kRows * ld, *sV = sK + kCols * ld;
  const int warp = threadIdx.x / 32, g = threadIdx.x % 32 / 4, t = threadIdx.x % 4;
  const float scale = static_cast<float>(shape.scale);

  for (int64_t task = blockIdx.x; task < shape.B * shape.Hq * tiles_of(shape.Tq, kRows); task += gridDim.x) {
    const QueryTask q = query_task(shape, task);
    const E* k_rows = K + (q.b * shape.Hkv + q.kvh) * shape.Tk * D;
    const E* v_rows = V + (q.b * shape.Hkv + q.kvh) * shape.Tk * D;
    const int64_t i_end = min(q.i0 + kRows, shape.Tq), row = q.i0 + 16 * warp + g;  // this lane's rows: row, row + 8
    __syncthreads();  // the previous task is done with sQ
    load_rows<D>(Q + (q.b * shape.Hq + q.h) * shape.Tq * D, q.i0, shape.Tq, kRows, sQ);

    float o[D / 8][4] = {};                // this lane's entries of O = Σ P V (unnormalised)
    float m[2] = {-kInfF, -kInfF}, l[2] = {0, 0};  // running max and this lane's part of the running sum
    const float slope = kMasked ? static_cast<float>(shape.mask.alibi_slope(q.h)) : 0.0f;
    for (int64_t j0 = 0; j0 < key_end(shape, i_end); j0 += kCols) {
      // Rows past Tq are not written, so only the keys' padding makes a whole tile an edge here.
      bool edge = j0 + kCols > shape.Tk || (shape.mask.causal && j0 + kCols - 1 > q.i0 + shape.mask.q_offset);
      if constexpr (kMasked) {
        const TileTest test =
            classify(shape.mask, shape.Tq, shape.Tk, q.h, q.i0, i_end, static_cast<int>(i_end - q.i0), j0, kCols);
        if (test.skip) continue;  // the same for the whole block: no query of the tile sees a key of it
        edge = test.edge;
      }
      __syncthreads();  // the previous K, V tile consumed (and sQ written, on the first)
      load_rows<D>(k_rows, j0, shape.Tk, kCols, sK);
      load_rows<D>(v_rows, j0, shape.Tk, kCols, sV);
      __syncthreads();
      // S = scale·Q Kᵀ (+ ALiBi's bias), −inf where hidden; a tile wholly seen skips the test
      float s[kCols / 8][4] = {};
      product_rows<F, D, kCols>(sQ, 16 * warp, sK, s);
      if constexpr (kMasked) {
        const uint32_t shown = edge ? seen_entries(shape.mask, shape.Tq, shape.Tk, q.h, kCols, false, row, j0) : ~0u;
        AG_UNROLL
        for (int nt = 0; nt < kCols / 8; ++nt)
          AG_UNROLL
          for (int e = 0; e < 4; ++e) s[nt][e] = seen(shown, nt, e) ? scale * s[nt][e] : -kInfF;
        if (slope != 0.0f)  // ALiBi's −m_h·(p − j) (docs/backprop.md, "ALiBi"), as score() adds it; −inf stays −inf
          AG_UNROLL
          for (int nt = 0; nt < kCols / 8; ++nt)
            AG_UNROLL
            for (int e = 0; e < 4; ++e) s[nt][e] += shape.mask.bias(slope, row + 8 * (e / 2), j0 + 8 * nt + 2 * t + e % 2);
      } else {
        AG_UNROLL
        for (int nt = 0; nt < kCols / 8; ++nt)
          AG_UNROLL
          for (int e = 0; e < 4; ++e)
            s[nt][e] = !edge || sees_causal(shape, row + 8 * (e / 2), j0 + 8 * nt + 2 * t + e % 2) ? scale * s[nt][e] : -kInfF;
      }
      // Per row (r = 0: row, r = 1: row + 8; each held by the 4 lanes of a quad):
      // m_new = max(m, max_j S), P = exp(S − m_new), l ← l·e^(m − m_new) + Σ P, O ← O·e^(m − m_new)
      AG_UNROLL
      for (int r = 0; r < 2; ++r) {
        float tile_max = -kInfF;
        AG_UNROLL
        for (int nt = 0; nt < kCols / 8; ++nt) tile_max = fmaxf(tile_max, fmaxf(s[nt][2 * r], s[nt][2 * r + 1]));
        const float new_max = fmaxf(m[r], quad_max(tile_max));
        const float reference = math::softmax_reference(new_max);  // 0 while the row has seen no key: no NaN
        const float rescale = expf(m[r] - reference);
        float sum = 0;
        AG_UNROLL
        for (int nt = 0; nt < kCols / 8; ++nt)
          AG_UNROLL
          for (int e = 2 * r; e < 2 * r + 2; ++e) {
            s[nt][e] = expf(s[nt][e] - reference);
            sum += s[nt][e];
          }
        l[r] = l[r] * rescale + sum;  // the quad's lanes share m, so their parts of l add up at the end
        m[r] = new_max;
        AG_UNROLL
        for (int nt = 0; nt < D / 8; ++nt) {
          o[nt][2 * r] *= rescale;
          o[nt][2 * r + 1] *= rescale;
        }
      }
      product_columns<F, D, kCols>(s, sV, o);  // O += P V, P rounded to the operand format (l keeps P's fp32 sum)
    }
    // Z = O / l (0 on a row that saw no key), lse = m + log l (+inf there)
    AG_UNROLL
    for (int r = 0; r < 2; ++r) {
      const int64_t i = row + 8 * r;
      const float total = quad_sum(l[r]);
      if (i >= shape.Tq) continue;
      const float inv = total == 0 ? 0.0f : 1.0f / total;
      float* z = Z + shape.q.at(q.b, q.h, i);
      AG_UNROLL
      for (int nt = 0; nt < D / 8; ++nt) {
        z[8 * nt + 2 * t] = o[nt][2 * r] * inv;
        z[8 * nt + 2 * t + 1] = o[nt][2 * r + 1] * inv;
      }
      if (t == 0) lse[shape.lse_at(q.b, q.h, i)] = math::log_sum_exp<double>(m[r], total);
    }
  }
}

// --- backward: dQ (and D) -------------------------------------------------------------------

// Shared memory: Q, dZ [kRows], K, V [kCols] rows of D + kPad operands.
template <class F, int D>
constexpr size_t query_bytes = (2 * kRows + 2 * kCols) * (D + kPad<typename F::Element>) * sizeof(typename F::Element);

// P = exp(scale·S + ALiBi's bias − lse) over one tile of head h, S overwritten: lse = hi + lo
// (math::split_lse), 0 where hidden (tested per element on an edge tile only).
template <int N, bool kMasked>
__device__ inline void probabilities(float (&s)[N / 8][4], const AttentionShape& shape, int64_t h, float scale,
                                     float slope, int64_t row, int64_t j0, bool edge, const float (&hi)[2],
                                     const float (&lo)[2]) {
  const int t = threadIdx.x % 4;
  if constexpr (!kMasked) {
    AG_UNROLL
    for (int nt = 0; nt < N / 8; ++nt)
      AG_UNROLL
      for (int e = 0; e < 4; ++e)
        s[nt][e] = sees_causal(shape, row + 8 * (e / 2), j0 + 8 * nt + 2 * t + e % 2)
                       ? expf(scale * s[nt][e] - hi[e / 2] - lo[e / 2])
                       : 0.0f;
    return;
  }
  const uint32_t shown = edge ? seen_entries(shape.mask, shape.Tq, shape.Tk, h, N, false, row, j0) : ~0u;
  AG_UNROLL
  for (int nt = 0; nt < N / 8; ++nt)
    AG_UNROLL
    for (int e = 0; e < 4; ++e) s[nt][e] *= scale;
  if (slope != 0.0f)
    AG_UNROLL
    for (int nt = 0; nt < N / 8; ++nt)
      AG_UNROLL
      for (int e = 0; e < 4; ++e) s[nt][e] += shape.mask.bias(slope, row + 8 * (e / 2), j0 + 8 * nt + 2 * t + e % 2);
  AG_UNROLL
  for (int nt = 0; nt < N / 8; ++nt)
    AG_UNROLL
    for (int e = 0; e < 4; ++e) s[nt][e] = seen(shown, nt, e) ? expf(s[nt][e] - hi[e / 2] - lo[e / 2]) : 0.0f;
}

// Q, K, V, dZ compact operands; lse [B, Hq, Tq] float64; D [B, Hq, Tq] fp32, read if given_D
// else written; dQ fp32 laid out by shape.q.
template <class F, int D, bool kMasked>
__global__ void __launch_bounds__(kBlockThreads)
    backward_query_kernel(const typename F::Element* Q, const typename F::Element* K, const typename F::Element* V,
                          const typename F::Element* dZ, const double* lse, AttentionShape shape, bool given_D,
                          bool accumulate, float* Dsum, float* dQ) {
  using E = typename F::Element;
  unsigned char* shared = dynamic_shared_bytes();
  constexpr int ld = D + kPad<E>;
  E *sQ = reinterpret_cast<E*>(shared), *sdZ = sQ + kRows * ld, *sK = sdZ + kRows * ld, *sV = sK + kCols * ld;
  const int warp = threadIdx.x / 32, g = threadIdx.x % 32 / 4, t = threadIdx.x % 4;
  const float scale = static_cast<float>(shape.scale);

  for (int64_t task = blockIdx.x; task < shape.B * shape.Hq * tiles_of(shape.Tq, kRows); task += gridDim.x) {
    const QueryTask q = query_task(shape, task);
    const int64_t q_first = (q.b * shape.Hq + q.h) * shape.Tq * D, kv_first = (q.b * shape.Hkv + q.kvh) * shape.Tk * D;
    const int64_t i_end = min(q.i0 + kRows, shape.Tq), row = q.i0 + 16 * warp + g;
    __syncthreads();
    load_rows<D>(Q + q_first, q.i0, shape.Tq, kRows, sQ);
    load_rows<D>(dZ + q_first, q.i0, shape.Tq, kRows, sdZ);
    float hi[2], lo[2], Drow[2];  // lse split, and D, of this lane's rows (row, row + 8); rows past Tq see nothing
    AG_UNROLL
    for (int r = 0; r < 2; ++r) {
      const int64_t i = row + 8 * r;
      hi[r] = kInfF, lo[r] = 0, Drow[r] = 0;
      if (i < shape.Tq) math::split_lse(lse[shape.lse_at(q.b, q.h, i)], hi[r], lo[r]);
      if (i < shape.Tq && given_D) Drow[r] = Dsum[shape.lse_at(q.b, q.h, i)];
    }
    float dq[D / 8][4] = {};
    const float slope = kMasked ? static_cast<float>(shape.mask.alibi_slope(q.h)) : 0.0f;
    for (int pass = given_D ? 2 : 1; pass <= 2; ++pass) {
      float Dpart[2] = {0, 0};
      for (int64_t j0 = 0; j0 < key_end(shape, i_end); j0 += kCols) {
        // Rows past Tq hold lse = +inf (P = 0) and are not written: the keys' padding alone makes an edge.
        bool edge = true;  // the plain instantiation tests every entry, as it always has
        if constexpr (kMasked) {
          const TileTest test =
              classify(shape.mask, shape.Tq, shape.Tk, q.h, q.i0, i_end, static_cast<int>(i_end - q.i0), j0, kCols);
          if (test.skip) continue;  // uniform in the block, as in the forward
          edge = test.edge;
        }
        __syncthreads();
        load_rows<D>(K + kv_first, j0, shape.Tk, kCols, sK);
        load_rows<D>(V + kv_first, j0, shape.Tk, kCols, sV);
        __syncthreads();
        float p[kCols / 8][4] = {}, dp[kCols / 8][4] = {};
        product_rows<F, D, kCols>(sQ, 16 * warp, sK, p);    // S = Q Kᵀ (scaled in probabilities)
        product_rows<F, D, kCols>(sdZ, 16 * warp, sV, dp);  // dP = dZ Vᵀ
        probabilities<kCols, kMasked>(p, shape, q.h, scale, slope, row, j0, edge, hi, lo);
        if (pass == 1) {  // D += rowsum(P ∘ dP): this lane's columns, the quad's parts summed below
          AG_UNROLL
          for (int nt = 0; nt < kCols / 8; ++nt)
            AG_UNROLL
            for (int e = 0; e < 4; ++e) Dpart[e / 2] += p[nt][e] * dp[nt][e];
          continue;
        }
        // dS = P ∘ (dP − D) in place of dP, then dQ += dS K (scale applied once, at the end)
        AG_UNROLL
        for (int nt = 0; nt < kCols / 8; ++nt)
          AG_UNROLL
          for (int e = 0; e < 4; ++e) dp[nt][e] = p[nt][e] * (dp[nt][e] - Drow[e / 2]);
        product_columns<F, D, kCols>(dp, sK, dq);
      }
      if (pass == 1)
        AG_UNROLL
        for (int r = 0; r < 2; ++r) {
          Drow[r] = quad_sum(Dpart[r]);
          if (t == 0 && row + 8 * r < shape.Tq) Dsum[shape.lse_at(q.b, q.h, row + 8 * r)] = Drow[r];
        }
    }
    AG_UNROLL
    for (int r = 0; r < 2; ++r) {
      const int64_t i = row + 8 * r;
      if (i >= shape.Tq) continue;
      float* out = dQ + shape.q.at(q.b, q.h, i);
      AG_UNROLL
      for (int nt = 0; nt < D / 8; ++nt)
        AG_UNROLL
        for (int c = 0; c < 2; ++c) {
          float& x = out[8 * nt + 2 * t + c];
          x = (accumulate ? x : 0.0f) + scale * dq[nt][2 * r + c];
        }
    }
  }
}

// --- backward: dK, dV -----------------------------------------------------------------------

// Shared memory: K, V [kCols] and Q, dZ [kQueries] rows of D + kPad operands; lse (hi, lo)
// and D of the query tile's rows in fp32.
template <class F, int D>
constexpr size_t key_bytes = (2 * kCols + 2 * kQueries<D>) * (D + kPad<typename F::Element>) *
                                 sizeof(typename F::Element) +
                             3 * kQueries<D> * sizeof(float);

template <class F, int D, bool kMasked>
__global__ void __launch_bounds__(kBlockThreads)
    backward_key_kernel(const typename F::Element* Q, const typename F::Element* K, const typename F::Element* V,
                        const typename F::Element* dZ, const double* lse, const float* Dsum, AttentionShape shape,
                        bool accumulate, float* dK, float* dV) {
  using E = typename F::Element;
  unsigned char* shared = dynamic_shared_bytes();
  constexpr int ld = D + kPad<E>, NQ = kQueries<D>;
  E *sK = reinterpret_cast<E*>(shared), *sV = sK + kCols * ld, *sQ = sV + kCols * ld, *sdZ = sQ + NQ * ld;
  float *s_hi = reinterpret_cast<float*>(sdZ + NQ * ld), *s_lo = s_hi + NQ, *s_D = s_lo + NQ;
  const int warp = threadIdx.x / 32, g = threadIdx.x % 32 / 4, t = threadIdx.x % 4;
  const float scale = static_cast<float>(shape.scale);
  const int64_t k_tiles = tiles_of(shape.Tk, kCols), group = shape.group();

  for (int64_t task = blockIdx.x; task < shape.B * shape.Hkv * k_tiles; task += gridDim.x) {
    const int64_t bkv = task / k_tiles, b = bkv / shape.Hkv, kvh = bkv % shape.Hkv, j0 = task % k_tiles * kCols;
    const int64_t key = j0 + 16 * warp + g;  // this lane's keys: key, key + 8 (the rows of Sᵀ's fragments)
    __syncthreads();
    load_rows<D>(K + bkv * shape.Tk * D, j0, shape.Tk, kCols, sK);
    load_rows<D>(V + bkv * shape.Tk * D, j0, shape.Tk, kCols, sV);
    float dk[D / 8][4] = {}, dv[D / 8][4] = {};
    // The first query that sees key j0 sits at j0 − q_offset (causal): earlier query tiles are skipped.
    const int64_t first_query = shape.mask.causal && j0 > shape.mask.q_offset ? j0 - shape.mask.q_offset : 0;
    for (int64_t h = kvh * group; h < (kvh + 1) * group; ++h) {
      const float slope = kMasked ? static_cast<float>(shape.mask.alibi_slope(h)) : 0.0f;
      for (int64_t i0 = first_query / NQ * NQ; i0 < shape.Tq; i0 += NQ) {
        const int64_t q_first = (b * shape.Hq + h) * shape.Tq * D;
        bool edge = true;  // the plain instantiation tests every entry, as it always has
        if constexpr (kMasked) {
          const TileTest test = classify(shape.mask, shape.Tq, shape.Tk, h, i0, min(i0 + NQ, shape.Tq), NQ, j0, kCols);
          if (test.skip) continue;  // uniform in the block: no query of the tile sees a key of the block's
          edge = test.edge;
        }
        __syncthreads();  // the previous query tile consumed (and sK, sV written, on the first)
        load_rows<D>(Q + q_first, i0, shape.Tq, NQ, sQ);
        load_rows<D>(dZ + q_first, i0, shape.Tq, NQ, sdZ);
        for (int c = threadIdx.x; c < NQ; c += blockDim.x) {
          const int64_t i = i0 + c;
          s_hi[c] = kInfF, s_lo[c] = 0, s_D[c] = 0;
          if (i < shape.Tq) {
            math::split_lse(lse[shape.lse_at(b, h, i)], s_hi[c], s_lo[c]);
            s_D[c] = Dsum[shape.lse_at(b, h, i)];
          }
        }
        __syncthreads();
        float pt[NQ / 8][4] = {}, dpt[NQ / 8][4] = {};
        product_rows<F, D, NQ>(sK, 16 * warp, sQ, pt);    // Sᵀ = K Qᵀ
        product_rows<F, D, NQ>(sV, 16 * warp, sdZ, dpt);  // dPᵀ = V dZᵀ
        // Pᵀ = exp(scale·Sᵀ + ALiBi's bias − lse), dSᵀ = Pᵀ ∘ (dPᵀ − D): entry (key, query c) of the fragments
        uint32_t shown = ~0u;
        if constexpr (kMasked) {
          if (edge) shown = seen_entries(shape.mask, shape.Tq, shape.Tk, h, NQ, true, key, i0);
        } else {
          AG_UNROLL
          for (int nt = 0; nt < NQ / 8; ++nt)
            AG_UNROLL
            for (int e = 0; e < 4; ++e)
              if (!sees_causal(shape, i0 + 8 * nt + 2 * t + e % 2, key + 8 * (e / 2))) shown &= ~(1u << (4 * nt + e));
        }
        AG_UNROLL
        for (int nt = 0; nt < NQ / 8; ++nt)
          AG_UNROLL
          for (int e = 0; e < 4; ++e) pt[nt][e] *= scale;
        if (kMasked && slope != 0.0f)
          AG_UNROLL
          for (int nt = 0; nt < NQ / 8; ++nt)
            AG_UNROLL
            for (int e = 0; e < 4; ++e) pt[nt][e] += shape.mask.bias(slope, i0 + 8 * nt + 2 * t + e % 2, key + 8 * (e / 2));
        AG_UNROLL
        for (int nt = 0; nt < NQ / 8; ++nt)
          AG_UNROLL
          for (int e = 0; e < 4; ++e) {
            const int c = 8 * nt + 2 * t + e % 2;
            const float p = seen(shown, nt, e) ? expf(pt[nt][e] - s_hi[c] - s_lo[c]) : 0.0f;
            pt[nt][e] = p;
            dpt[nt][e] = p * (dpt[nt][e] - s_D[c]);
          }
        product_columns<F, D, NQ>(pt, sdZ, dv);  // dV += Pᵀ dZ
        product_columns<F, D, NQ>(dpt, sQ, dk);  // dK += dSᵀ Q (scale applied once, at the end)
      }
    }
    AG_UNROLL
    for (int r = 0; r < 2; ++r) {
      const int64_t j = key + 8 * r;
      if (j >= shape.Tk) continue;
      float *k_out = dK + shape.kv.at(b, kvh, j), *v_out = dV + shape.kv.at(b, kvh, j);
      AG_UNROLL
      for (int nt = 0; nt < D / 8; ++nt)
        AG_UNROLL
        for (int c = 0; c < 2; ++c) {
          const int e = 8 * nt + 2 * t + c;
          k_out[e] = (accumulate ? k_out[e] : 0.0f) + scale * dk[nt][2 * r + c];
          v_out[e] = (accumulate ? v_out[e] : 0.0f) + dv[nt][2 * r + c];
        }
    }
  }
}

// --- the launches on a device `dev` (cuda/launch.cuh's Gpu; the host tests' Device) ---------
// Contracts: core/kernels.inc (flash_attention, flash_attention_backward); which problems come
// here: flash_mma_takes (cuda/flash_mma.cu).

// dst[(b·H + h)·T + t][e] = F::operand(src[at(b, h, t) + e]): one entry per thread.
template <class F> struct RoundRows {
  const float* src;
  typename F::Element* dst;
  HeadStrides at;
  int64_t H, T, d;
  __device__ void operator()(int64_t idx) const {
    const int64_t e = idx % d, t = idx / d % T, h = idx / (d * T) % H, b = idx / (d * T * H);
    dst[idx] = F::operand(src[at.at(b, h, t) + e]);
  }
};

// A compact copy [B, H, T, d] of the rows `at` lays out, rounded to F's operands, in dev's
// scratch (held for the call; on a device the caching allocator reuses the block only for
// work queued after it on the one stream).
template <class F, class Device>
const typename F::Element* operand_rows(Device& dev, const float* src, const HeadStrides& at, int64_t B, int64_t H,
                                        int64_t T, int64_t d) {
  typename F::Element* dst = dev.template scratch<typename F::Element>(B * H * T * d);
  dev(B * H * T * d, RoundRows<F>{src, dst, at, H, T, d});
  return dst;
}

// f(std::integral_constant<int, D>{}) for d_h = D ∈ {64, 128}.
template <class Fn> void with_head_width(int64_t d, Fn&& f) {
  if (d == 64) return f(std::integral_constant<int, 64>{});
  if (d == 128) return f(std::integral_constant<int, 128>{});
  throw Error("flash_attention (tensor cores): head width d = " + std::to_string(d) + " is not 64 or 128");
}

// Q, K, V fp32 laid out by shape.q and shape.kv; Z fp32 likewise, lse [B, Hq, Tq].
template <class F, class Device>
void forward_launch(Device& dev, const float* Q, const float* K, const float* V, const AttentionShape& shape,
                    float* Z, double* lse) {
  const auto *q = operand_rows<F>(dev, Q, shape.q, shape.B, shape.Hq, shape.Tq, shape.d),
             *k = operand_rows<F>(dev, K, shape.kv, shape.B, shape.Hkv, shape.Tk, shape.d),
             *v = operand_rows<F>(dev, V, shape.kv, shape.B, shape.Hkv, shape.Tk, shape.d);
  with_head_width(shape.d, [&](auto width) {
    constexpr int D = decltype(width)::value;
    dev.blocks(masked(shape) ? forward_kernel<F, D, true> : forward_kernel<F, D, false>,
               shape.B * shape.Hq * tiles_of(shape.Tq, kRows), kBlockThreads, forward_bytes<F, D>, q, k, v, shape, Z,
               lse);
  });
}

// given_D: the caller's D = rowsum(P ∘ dP) [B, Hq, Tq], or null (the dQ kernel sums it into
// scratch, which the dK dV kernel reads). No bias tables: flash_mma_takes admits none.
template <class F, class Device>
void backward_launch(Device& dev, const float* Q, const float* K, const float* V, const double* lse,
                     const float* dZ, float* given_D, const AttentionShape& shape, bool accumulate, float* dQ,
                     float* dK, float* dV) {
  float* D_sum = given_D ? given_D : dev.template scratch<float>(shape.B * shape.Hq * shape.Tq);
  const auto *q = operand_rows<F>(dev, Q, shape.q, shape.B, shape.Hq, shape.Tq, shape.d),
             *dz = operand_rows<F>(dev, dZ, shape.q, shape.B, shape.Hq, shape.Tq, shape.d),
             *k = operand_rows<F>(dev, K, shape.kv, shape.B, shape.Hkv, shape.Tk, shape.d),
             *v = operand_rows<F>(dev, V, shape.kv, shape.B, shape.Hkv, shape.Tk, shape.d);
  with_head_width(shape.d, [&](auto width) {
    constexpr int Dh = decltype(width)::value;
    const bool mask = masked(shape);
    dev.blocks(mask ? backward_query_kernel<F, Dh, true> : backward_query_kernel<F, Dh, false>,
               shape.B * shape.Hq * tiles_of(shape.Tq, kRows), kBlockThreads, query_bytes<F, Dh>, q, k, v, dz, lse,
               shape, given_D != nullptr, accumulate, D_sum, dQ);
    dev.blocks(mask ? backward_key_kernel<F, Dh, true> : backward_key_kernel<F, Dh, false>,
               shape.B * shape.Hkv * tiles_of(shape.Tk, kCols), kBlockThreads, key_bytes<F, Dh>, q, k, v, dz, lse,
               static_cast<const float*>(D_sum), shape, accumulate, dK, dV);
  });
}

}  // namespace
}  // namespace ag::cuda::flash_mma
