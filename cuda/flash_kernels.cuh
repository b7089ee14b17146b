// FlashAttention's kernels on CUDA cores, in float32 and float64, and their launches on any
// device (cuda/attention.cu, whose header gives the thread mapping, runs them on the GPU; the
// tensor-core ones are cuda/flash_mma_kernels.cuh). Device code that a host build compiles too: tests/test_cuda_on_host.cpp
// runs them with a block's threads as host fibers, in float64 against the CPU's flash.
#pragma once
#include <cstdint>
#include <string>

#include "core/attention_math.h"
#include "core/error.h"
#include "cuda/attention_tiles.cuh"
#include "cuda/reduce_ops.cuh"
#include "cuda/shared_buffers.cuh"

namespace ag::cuda {
namespace {

using math::kInf;

// --- flash: shared pieces ---------------------------------------------------------------

template <class Op, class T> __device__ T warp_reduce(T v, Op op) {
  for (int offset = 16; offset > 0; offset /= 2) v = op(v, __shfl_xor_sync(0xffffffffu, v, offset));
  return v;
}

// dst[r][e] = src(row0 + r)[e] for r < rows (zeros after, up to `tile`), src
// row t at at(t) in global memory: a tile of Q, K, V or dZ into shared memory.
template <class T, class At>
__device__ void load_tile(const T* src, At at, int64_t row0, int64_t rows, int tile, int64_t d, T* dst) {
  for (int64_t idx = threadIdx.x; idx < tile * d; idx += blockDim.x) {
    const int64_t r = idx / d, e = idx % d;
    dst[idx] = r < rows ? src[at(row0 + r) + e] : T(0);
  }
}

template <class T> __device__ T dot(const T* a, const T* b, int64_t d) {
  T acc = 0;
  for (int64_t e = 0; e < d; ++e) acc += a[e] * b[e];
  return acc;
}
// S of query i of head h (whose ALiBi slope is `slope`) with key j: scale·q·k +
// bias, one expression for the forward and the backward alike. With score
// modifiers that change the scores, S' = mods.modify(scale·q·k) before ALiBi's
// bias, and factor (if not null) receives ∂S'/∂u.
template <class T>
__device__ T score(const T* q, const T* k, int64_t d, T scale, const AttentionMask& mask, const ScoreModifiers& mods,
                   int64_t h, T slope, int64_t i, int64_t j, T* factor = nullptr) {
  if (!mods.changes_scores()) return scale * dot(q, k, d) + mask.bias(slope, i, j);
  const T s = mods.modify(scale * dot(q, k, d), h, i + mask.q_offset, i, j);
  if (factor) *factor = mods.cap_derivative(s);
  return s + mask.bias(slope, i, j);
}

// The backward's tile of one (query tile, key tile) pair: for query row r and
// key column c,  P = exp(scale·q·k − lse),  dP = dZ·v,  both 0 where the key is
// hidden or outside the problem. q, dz: `tile` rows of d of query head h; k, v likewise.
// Under a soft cap (mods.has_chain()), factor [tile][tile] receives ∂S'/∂u (0 where hidden); null otherwise.
template <class T>
__device__ void probability_tile(const T* q, const T* dz, const T* k, const T* v, const T* lse_hi, const T* lse_lo,
                                 int64_t h, int64_t i0, int64_t rows, int64_t j0, int64_t cols, int tile, int64_t d,
                                 T scale, const AttentionMask& mask, const ScoreModifiers& mods,
                                 TileVisibility visibility, T* p, T* dp, T* factor) {
  const T slope = static_cast<T>(mask.alibi_slope(h));  // once per tile, not per entry
  for (int idx = threadIdx.x; idx < tile * tile; idx += blockDim.x) {
    const int r = idx / tile, c = idx % tile;
    const bool shown =
        r < rows && c < cols && (visibility == TileVisibility::All || mask.visible(h, i0 + r, j0 + c));
    if (factor) factor[idx] = T(0);
    p[idx] = shown ? std::exp(score(q + r * d, k + c * d, d, scale, mask, mods, h, slope, i0 + r, j0 + c,
                                    factor ? factor + idx : nullptr) -
                              lse_hi[r] - lse_lo[r])
                   : T(0);  // lse = +inf: 0
    dp[idx] = shown ? dot(dz + r * d, v + c * d, d) : T(0);
  }
}

// dS = P ∘ (dP − D), in place of dP; under a soft cap, dU = dS ∘ factor (∂S'/∂u) instead.
template <class T> __device__ void score_gradient_tile(const T* p, const T* D, const T* factor, int tile, T* dp) {
  for (int idx = threadIdx.x; idx < tile * tile; idx += blockDim.x) {
    dp[idx] = p[idx] * (dp[idx] - D[idx / tile]);
    if (factor) dp[idx] *= factor[idx];
  }
}

// lse of one query tile's rows (from lse_at on), split, into shared memory.
template <class T> __device__ void load_lse(const double* lse, int64_t lse_at, int64_t rows, T* lse_hi, T* lse_lo) {
  for (int r = threadIdx.x; r < rows; r += blockDim.x) math::split_lse(lse[lse_at + r], lse_hi[r], lse_lo[r]);
}

__host__ __device__ int64_t tiles_of(int64_t n, int tile) { return (n + tile - 1) / tile; }

// Query tile `task` of the grid of (batch b, query head h, query tile) tasks:
// rows [i0, i0 + rows) of head h, which reads kv head kvh.
struct QueryTile {
  int64_t b, h, kvh, i0, rows;
};
__device__ inline QueryTile query_tile(const AttentionShape& shape, int64_t task, int tile) {
  const int64_t q_tiles = tiles_of(shape.Tq, tile), bh = task / q_tiles, h = bh % shape.Hq;
  const int64_t i0 = task % q_tiles * tile;
  return {bh / shape.Hq, h, h / shape.group(), i0, min(static_cast<int64_t>(tile), shape.Tq - i0)};
}

// For each key tile [j0, j0 + cols) that query tile q sees at least in part, in
// order (classified on the fly by the block, block_tile: AttentionMask::tile, the function
// the CPU's cached block map is built from): its K and V rows loaded into sK and sV (previous tile consumed first),
// then body(j0, cols, visibility) by the whole block.
template <class T, class Body>
__device__ void for_each_visible_key_tile(const AttentionShape& shape, const QueryTile& q, int tile, const T* K,
                                          const T* V, T* sK, T* sV, Body&& body) {
  const auto kv_at = [&](int64_t t) { return shape.kv.at(q.b, q.kvh, t); };
  for (int64_t j0 = 0; j0 < shape.Tk; j0 += tile) {
    const int64_t cols = min(static_cast<int64_t>(tile), shape.Tk - j0);
    const TileVisibility visibility = block_tile(shape.mask.at_batch(q.b), q.h, q.i0, q.i0 + q.rows, j0, j0 + cols);
    if (visibility == TileVisibility::None) continue;
    __syncthreads();
    load_tile(K, kv_at, j0, cols, tile, shape.d, sK);
    load_tile(V, kv_at, j0, cols, tile, shape.d, sV);
    __syncthreads();
    body(j0, cols, visibility);
  }
}

// --- flash: forward ---------------------------------------------------------------------

// Shared memory: Q, K, V [tile][d], S [tile][tile], acc [tile][d],
// and per row m, l and the rescale e^(m_old − m_new).
int64_t forward_floats(int tile, int64_t d) { return 4 * tile * d + tile * tile + 3 * tile; }

template <class T>
__global__ void flash_forward_kernel(const T* Q, const T* K, const T* V, AttentionShape shape, int tile, T* Z,
                                     double* lse) {
  const int64_t d = shape.d;
  SharedBuffers<T> shared;
  T *sQ = shared.take(tile * d), *sK = shared.take(tile * d), *sV = shared.take(tile * d);
  T *acc = shared.take(tile * d), *sS = shared.take(tile * tile);
  T *m = shared.take(tile), *l = shared.take(tile), *rescale = shared.take(tile);
  const T scale = T(shape.scale);
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32, warps = blockDim.x / 32;

  for (int64_t task = blockIdx.x; task < shape.B * shape.Hq * tiles_of(shape.Tq, tile); task += gridDim.x) {
    const QueryTile q = query_tile(shape, task, tile);
    const auto q_at = [&](int64_t t) { return shape.q.at(q.b, q.h, t); };
    __syncthreads();  // the previous task is done with the shared buffers
    load_tile(Q, q_at, q.i0, q.rows, tile, d, sQ);
    for (int64_t idx = threadIdx.x; idx < tile * d; idx += blockDim.x) acc[idx] = 0;
    // A sink starts each row as a key of score sink_h and no value: m = sink_h, l = e^0 = 1.
    const bool sink = shape.mods.sinks != nullptr;
    for (int r = threadIdx.x; r < tile; r += blockDim.x) {
      m[r] = sink ? shape.mods.sink<T>(q.h) : -kInf<T>;
      l[r] = sink ? T(1) : T(0);
    }
    const T slope = static_cast<T>(shape.mask.alibi_slope(q.h));
    const AttentionMask mask = shape.mask.at_batch(q.b);  // a mask function's matrix of entry b
    for_each_visible_key_tile(shape, q, tile, K, V, sK, sV, [&](int64_t j0, int64_t cols, TileVisibility visibility) {
      // S = scale·Q Kᵀ (+ ALiBi's bias), −inf where hidden
      for (int idx = threadIdx.x; idx < tile * tile; idx += blockDim.x) {
        const int r = idx / tile, c = idx % tile;
        const bool shown = r < q.rows && c < cols &&
                           (visibility == TileVisibility::All || mask.visible(q.h, q.i0 + r, j0 + c));
        sS[idx] = shown ? score(sQ + r * d, sK + c * d, d, scale, shape.mask, shape.mods, q.h, slope, q.i0 + r, j0 + c)
                        : -kInf<T>;
      }
      __syncthreads();
      // One warp per row: m_new = max(m, max_j S), P = exp(S − m_new), l ← l·e^(m − m_new) + Σ P
      for (int r = warp; r < q.rows; r += warps) {
        T row_max = -kInf<T>;
        for (int c = lane; c < tile; c += 32) row_max = MaxOp{}(row_max, sS[r * tile + c]);
        const T new_max = MaxOp{}(m[r], warp_reduce(row_max, MaxOp{}));
        const T reference = math::softmax_reference(new_max);
        T sum = 0;
        for (int c = lane; c < tile; c += 32) {
          const T p = std::exp(sS[r * tile + c] - reference);
          sS[r * tile + c] = p;
          sum += p;
        }
        sum = warp_reduce(sum, SumOp{});
        if (lane == 0) {
          rescale[r] = std::exp(m[r] - reference);
          l[r] = l[r] * rescale[r] + sum;
          m[r] = new_max;
        }
      }
      __syncthreads();
      // acc ← acc·e^(m − m_new) + P V
      for (int64_t idx = threadIdx.x; idx < q.rows * d; idx += blockDim.x) {
        const int64_t r = idx / d, e = idx % d;
        T pv = 0;
        for (int c = 0; c < cols; ++c) pv += sS[r * tile + c] * sV[c * d + e];
        acc[idx] = acc[idx] * rescale[r] + pv;
      }
    });
    __syncthreads();
    // Z = acc / l (0 on a row that saw no key), lse = m + log l
    for (int64_t idx = threadIdx.x; idx < q.rows * d; idx += blockDim.x) {
      const int64_t r = idx / d;
      Z[q_at(q.i0 + r) + idx % d] = l[r] == T(0) ? T(0) : acc[idx] / l[r];
    }
    for (int r = threadIdx.x; r < q.rows; r += blockDim.x)
      lse[shape.lse_at(q.b, q.h, q.i0 + r)] = math::log_sum_exp<double>(m[r], l[r]);
  }
}

// --- flash: backward --------------------------------------------------------------------
// D = rowsum(P ∘ dP) is summed, in the query kernel, from the same P and dP that
// dS subtracts it from (as the CPU does); the key kernel, launched after it,
// reads D and recomputes P and dP with the same arithmetic, so the same bits.

// The cap's chain factor ∂S'/∂u [tile][tile] of the backward's kernels, under a soft cap only
// (mods.has_chain(): a custom function never reaches CUDA).
int64_t factor_floats(int tile, const AttentionShape& shape) { return shape.mods.has_chain() ? tile * tile : 0; }

// Shared memory: Q, dZ, dQ [tile][d]; K, V [tile][d]; P, dP [tile][tile]; lse (hi, lo), D [tile]; the factor.
int64_t query_floats(int tile, const AttentionShape& shape) {
  return 5 * tile * shape.d + 2 * tile * tile + 3 * tile + factor_floats(tile, shape);
}

// For one query tile, over every visible key tile:
//   pass 1:  D = rowsum(P ∘ dP)           (written to D for the key kernel)
//   pass 2:  dQ = scale · Σ_j dS K_j,  dS = P ∘ (dP − D)
// With D given (given_D), pass 1 is skipped and D only read. With bias tables,
// partial [B, Hq, ⌈Tq / tile⌉, E] receives this query tile's sums of dU per table
// entry: thread e sums entry e over the key tiles, rows and columns in order.
template <class T>
__global__ void flash_backward_query_kernel(const T* Q, const T* K, const T* V, const double* lse, const T* dZ,
                                            AttentionShape shape, int tile, bool given_D, bool accumulate, T* D,
                                            T* dQ, T* partial) {
  const int64_t d = shape.d, E = shape.mods.bias_entries();
  SharedBuffers<T> shared;
  T *sQ = shared.take(tile * d), *sdZ = shared.take(tile * d), *dq = shared.take(tile * d);
  T *sK = shared.take(tile * d), *sV = shared.take(tile * d), *P = shared.take(tile * tile);
  T *dP = shared.take(tile * tile), *lse_hi = shared.take(tile), *lse_lo = shared.take(tile), *sD = shared.take(tile);
  T* factor = shape.mods.has_chain() ? shared.take(tile * tile) : nullptr;
  const T scale = T(shape.scale);
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32, warps = blockDim.x / 32;

  for (int64_t task = blockIdx.x; task < shape.B * shape.Hq * tiles_of(shape.Tq, tile); task += gridDim.x) {
    const QueryTile q = query_tile(shape, task, tile);
    const auto q_at = [&](int64_t t) { return shape.q.at(q.b, q.h, t); };
    __syncthreads();
    load_tile(Q, q_at, q.i0, q.rows, tile, d, sQ);
    load_tile(dZ, q_at, q.i0, q.rows, tile, d, sdZ);
    load_lse(lse, shape.lse_at(q.b, q.h, q.i0), q.rows, lse_hi, lse_lo);
    for (int64_t idx = threadIdx.x; idx < tile * d; idx += blockDim.x) dq[idx] = 0;
    for (int r = threadIdx.x; r < tile; r += blockDim.x) sD[r] = given_D && r < q.rows ? D[shape.lse_at(q.b, q.h, q.i0 + r)] : T(0);
    T* sums = partial ? partial + task * E : nullptr;  // task = (b·Hq + h)·q_tiles + query tile
    if (sums)
      for (int64_t e = threadIdx.x; e < E; e += blockDim.x) sums[e] = 0;
    for (int pass = given_D ? 2 : 1; pass <= 2; ++pass)
      for_each_visible_key_tile(shape, q, tile, K, V, sK, sV, [&](int64_t j0, int64_t cols, TileVisibility visibility) {
        probability_tile(sQ, sdZ, sK, sV, lse_hi, lse_lo, q.h, q.i0, q.rows, j0, cols, tile, d, scale,
                         shape.mask.at_batch(q.b),
                         shape.mods, visibility, P, dP, factor);
        __syncthreads();
        if (pass == 1) {  // D += rowsum(P ∘ dP), one warp per row, in a fixed order
          for (int r = warp; r < q.rows; r += warps) {
            T partial = 0;
            for (int c = lane; c < tile; c += 32) partial += P[r * tile + c] * dP[r * tile + c];
            partial = warp_reduce(partial, SumOp{});
            if (lane == 0) sD[r] += partial;
          }
          return;
        }
        score_gradient_tile(P, sD, factor, tile, dP);
        __syncthreads();
        if (sums)  // u = S + table entries  →  the entries' sums of dU, each entry by one thread
          for (int64_t e = threadIdx.x; e < E; e += blockDim.x) {
            const ScoreModifiers::Distances distances =
                e < (shape.mods.relative ? shape.mods.relative_buckets : 0) ? shape.mods.distances_of(e)
                                                                           : ScoreModifiers::Distances{};
            for (int r = 0; r < q.rows; ++r)
              for (int c = 0; c < cols; ++c)
                if (shape.mods.reads(e, distances, q.i0 + r + shape.mask.q_offset, q.i0 + r, j0 + c))
                  sums[e] += dP[r * tile + c];
          }
        // dQ += scale·dS K
        for (int64_t idx = threadIdx.x; idx < q.rows * d; idx += blockDim.x) {
          const int64_t r = idx / d, e = idx % d;
          T dsk = 0;
          for (int c = 0; c < cols; ++c) dsk += dP[r * tile + c] * sK[c * d + e];
          dq[idx] += scale * dsk;
        }
      });
    __syncthreads();
    for (int64_t idx = threadIdx.x; idx < q.rows * d; idx += blockDim.x) {
      T& out = dQ[q_at(q.i0 + idx / d) + idx % d];
      out = (accumulate ? out : T(0)) + dq[idx];
    }
    if (!given_D)
      for (int r = threadIdx.x; r < q.rows; r += blockDim.x) D[shape.lse_at(q.b, q.h, q.i0 + r)] = sD[r];
  }
}

// Shared memory: K, V, dK, dV [tile][d]; Q, dZ [tile][d]; P, dP [tile][tile]; lse (hi, lo), D [tile]; the factor.
int64_t key_floats(int tile, const AttentionShape& shape) {
  return 6 * tile * shape.d + 2 * tile * tile + 3 * tile + factor_floats(tile, shape);
}

// For one key tile: dV = Σ Pᵀ dZ and dK = scale · Σ dSᵀ Q over every visible
// query tile of every query head that reads its kv head.
template <class T>
__global__ void flash_backward_key_kernel(const T* Q, const T* K, const T* V, const double* lse, const T* D,
                                          const T* dZ, AttentionShape shape, int tile, bool accumulate, T* dK,
                                          T* dV) {
  const int64_t d = shape.d, g = shape.group();
  SharedBuffers<T> shared;
  T *sK = shared.take(tile * d), *sV = shared.take(tile * d), *dk = shared.take(tile * d);
  T *dv = shared.take(tile * d), *sQ = shared.take(tile * d), *sdZ = shared.take(tile * d);
  T *P = shared.take(tile * tile), *dP = shared.take(tile * tile), *lse_hi = shared.take(tile);
  T *lse_lo = shared.take(tile), *sD = shared.take(tile);
  T* factor = shape.mods.has_chain() ? shared.take(tile * tile) : nullptr;
  const T scale = T(shape.scale);
  const int64_t k_tiles = tiles_of(shape.Tk, tile);

  for (int64_t task = blockIdx.x; task < shape.B * shape.Hkv * k_tiles; task += gridDim.x) {
    const int64_t bkv = task / k_tiles, b = bkv / shape.Hkv, kvh = bkv % shape.Hkv;
    const int64_t j0 = task % k_tiles * tile, cols = min(static_cast<int64_t>(tile), shape.Tk - j0);
    const auto kv_at = [&](int64_t t) { return shape.kv.at(b, kvh, t); };
    __syncthreads();
    load_tile(K, kv_at, j0, cols, tile, d, sK);
    load_tile(V, kv_at, j0, cols, tile, d, sV);
    for (int64_t idx = threadIdx.x; idx < tile * d; idx += blockDim.x) dk[idx] = dv[idx] = 0;
    for (int64_t h = kvh * g; h < (kvh + 1) * g; ++h)
      for (int64_t i0 = 0; i0 < shape.Tq; i0 += tile) {
        const int64_t rows = min(static_cast<int64_t>(tile), shape.Tq - i0);
        const TileVisibility visibility = block_tile(shape.mask.at_batch(b), h, i0, i0 + rows, j0, j0 + cols);
        if (visibility == TileVisibility::None) continue;
        __syncthreads();  // the previous query tile is consumed
        const auto q_at = [&](int64_t t) { return shape.q.at(b, h, t); };
        load_tile(Q, q_at, i0, rows, tile, d, sQ);
        load_tile(dZ, q_at, i0, rows, tile, d, sdZ);
        load_lse(lse, shape.lse_at(b, h, i0), rows, lse_hi, lse_lo);
        for (int r = threadIdx.x; r < rows; r += blockDim.x) sD[r] = D[shape.lse_at(b, h, i0 + r)];
        __syncthreads();
        probability_tile(sQ, sdZ, sK, sV, lse_hi, lse_lo, h, i0, rows, j0, cols, tile, d, scale,
                         shape.mask.at_batch(b),
                         shape.mods, visibility, P, dP, factor);
        __syncthreads();
        score_gradient_tile(P, sD, factor, tile, dP);
        __syncthreads();
        // dV += Pᵀ dZ,  dK += scale·dSᵀ Q
        for (int64_t idx = threadIdx.x; idx < cols * d; idx += blockDim.x) {
          const int64_t c = idx / d, e = idx % d;
          T pdz = 0, dsq = 0;
          for (int r = 0; r < rows; ++r) {
            pdz += P[r * tile + c] * sdZ[r * d + e];
            dsq += dP[r * tile + c] * sQ[r * d + e];
          }
          dv[idx] += pdz;
          dk[idx] += scale * dsq;
        }
      }
    __syncthreads();
    for (int64_t idx = threadIdx.x; idx < cols * d; idx += blockDim.x) {
      const int64_t c = idx / d, e = idx % d;
      T &k_out = dK[kv_at(j0 + c) + e], &v_out = dV[kv_at(j0 + c) + e];
      k_out = (accumulate ? k_out : T(0)) + dk[idx];
      v_out = (accumulate ? v_out : T(0)) + dv[idx];
    }
  }
}

// dBias[(b, h), e] = Σ_t partial[(b, h), t, e] over the query tiles t in order: one thread per output.
template <class T> struct SumOverTiles {
  const T* partial;
  T* dbias;
  int64_t tiles, E;
  __device__ void operator()(int64_t idx) const {
    const T* p = partial + idx / E * tiles * E + idx % E;
    T sum = 0;
    for (int64_t t = 0; t < tiles; ++t) sum += p[t * E];
    dbias[idx] = sum;
  }
};

// --- flash: the launches on a device `dev` (cuda/launch.cuh's Gpu; the host tests' Device) ----
// Contracts: core/kernels.inc (flash_attention, flash_attention_backward).
constexpr int kFlashThreads = 128;  // 4 warps
constexpr size_t kSharedBudget = 48 * 1024;

// The largest tile of 32, 16, 8 whose `floats(tile)` elements of T fit in the budget.
template <class T, class Floats> int choose_tile(const char* kernel, int64_t d, Floats floats) {
  for (int tile : {32, 16, 8})
    if (static_cast<size_t>(floats(tile)) * sizeof(T) <= kSharedBudget) return tile;
  throw Error(std::string(kernel) + ": head width d = " + std::to_string(d) +
              " needs more shared memory than this kernel uses (48 KB)");
}

template <class T, class Device>
void flash_attention_launch(const Device& dev, const T* Q, const T* K, const T* V, const AttentionShape& shape, T* Z,
                            double* lse) {
  const int tile = choose_tile<T>("flash_attention", shape.d, [&](int t) { return forward_floats(t, shape.d); });
  dev.blocks(flash_forward_kernel<T>, shape.B * shape.Hq * tiles_of(shape.Tq, tile), kFlashThreads,
             forward_floats(tile, shape.d) * sizeof(T), Q, K, V, shape, tile, Z, lse);
}

// given_D: the caller's rowsum(P ∘ dP) [B, Hq, Tq], or null (the query kernel sums it into scratch).
// dBias: [B, Hq, bias_entries()] with the modifiers' tables, else null.
template <class T, class Device>
void flash_attention_backward_launch(Device& dev, const T* Q, const T* K, const T* V, const double* lse, const T* dZ,
                                     T* given_D, const AttentionShape& shape, bool accumulate, T* dQ, T* dK, T* dV,
                                     T* dBias) {
  T* D = given_D ? given_D : dev.template scratch<T>(shape.B * shape.Hq * shape.Tq);
  const int query_tile =
      choose_tile<T>("flash_attention_backward", shape.d, [&](int t) { return query_floats(t, shape); });
  const int64_t q_tiles = tiles_of(shape.Tq, query_tile), E = shape.mods.bias_entries();
  // The tables' sums per query tile [B, Hq, q_tiles, E], then summed over the tiles in order into dBias.
  T* partial = dBias ? dev.template scratch<T>(shape.B * shape.Hq * q_tiles * E) : nullptr;
  dev.blocks(flash_backward_query_kernel<T>, shape.B * shape.Hq * q_tiles, kFlashThreads,
             query_floats(query_tile, shape) * sizeof(T), Q, K, V, lse, dZ, shape, query_tile, given_D != nullptr,
             accumulate, D, dQ, partial);
  if (dBias) dev(shape.B * shape.Hq * E, SumOverTiles<T>{partial, dBias, q_tiles, E});
  const int key_tile = choose_tile<T>("flash_attention_backward", shape.d, [&](int t) { return key_floats(t, shape); });
  dev.blocks(flash_backward_key_kernel<T>, shape.B * shape.Hkv * tiles_of(shape.Tk, key_tile), kFlashThreads,
             key_floats(key_tile, shape) * sizeof(T), Q, K, V, lse, static_cast<const T*>(D), dZ, shape, key_tile,
             accumulate, dK, dV);
}

}  // namespace
}  // namespace ag::cuda
