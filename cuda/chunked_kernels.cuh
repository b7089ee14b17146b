// The chunked decayed product on the GPU (Mamba-2's SSD algorithm), shared by
// state-space attention (cuda/ssd.cu, contract DecayedProduct in
// core/ssd_math.h) and linear attention (cuda/linear_attention.cu, contract
// PrefixProduct in core/linear_attention_math.h, where every decay is 1). Per
// problem n (batch entry × head of Out) and position i:
//   Out_i = Σ_g Σ_{j visible from i} exp(σ(i, j)) (A_i · B_gj) w_j C_gj
// (g over the in-heads a linear-attention kv gradient sums; one g for ssd).
// The CPU's algorithm (core/cpu/ssd.cpp, its reference), in three launches:
//
//   1. chunk states, one block per (problem, chunk c = [j0, j1)), in parallel:
//        S_c = Σ_g Σ_{j∈c} keep_j w_j B_gjᵀ C_gj   [r, e],   Λ_c = Π_{j∈c} a_j
//      keep_j = Π_{r=j+1..j1−1} a_r (Causal: B_j's term decayed to the chunk's
//      last position) or Π_{r=j0..j} a_r (Anticausal: to the one before its first).
//   2. state passing, one thread per (problem, element of [r, e]): the short scan
//      over the T / chunk chunks, in the direction's order,
//        E_first = the given state (decoding) or 0,   E_next = Λ_c E_c + S_c,
//      overwriting S_c with E_c, the state entering chunk c; the last E is the
//      state a decode step keeps. (All: every E_c is Σ_c S_c, and no chunk term.)
//   3. outputs, one block per (problem, chunk):
//        Out_i = read_i · A_i E_c + Σ_g Σ_{j∈c} (mask ∘ A_c B_gcᵀ)_ij w_j C_gj
//      read_i = Π_{r=j0..i} a_r (Causal) or Π_{r=i+1..j1−1} a_r (Anticausal), and
//      mask_ij = exp(σ(i, j)) a running product along j's column (one a per
//      step, as the CPU forms it: no difference of long sums, no exp of a
//      positive number).
//
// Layout. A chunk is at most kChunk = 64 positions (the op's `chunk` option,
// clamped to it: the result does not depend on the chunk but for rounding, and
// 64 rows keep a chunk's scores G [64, 64] in shared memory). A block has 256
// threads; each pass produces an output tile of 64 rows × 64 columns, thread t
// owning column t % 64 of rows t / 64 + 4k (k < 16), so that a warp reads one
// shared row element as a broadcast and consecutive columns without bank
// conflicts (rows padded to 65 or 33). Wider r and e loop over tiles inside
// the block, and the contraction over r is staged in slices of 32: any r and e
// (d + 1 for linear attention's v', T for the implied weights) fit the same
// shared memory: 34 KB in float32, 68 KB in float64 (above the 48 KB default,
// so the launch raises the block's limit). The chunk states live in global
// scratch [problems, chunks, r, e], in the operands' type (fp32 for float32,
// double for float64): S_c and E_c for T = 131072, 6 heads of 64 take 200 MB.
//
// Every sum runs in a fixed order in one thread (over the chunk's positions,
// the r slices, the chunks): no atomics, the same bits every run. The products
// use CUDA cores in the operands' precision; tensor-core GEMMs for the chunk
// products are the next step once a device has timed this.
//
// Device code that a host build compiles too (tests/test_cuda_on_host.cpp runs these kernels
// with a block's threads as host fibers, through product() below): #pragma unroll is AG_UNROLL
// (cuda/host_compilable.cuh).
#pragma once
#include <algorithm>
#include <cstdint>

#include "core/linear_attention_math.h"  // PrefixDirection
#include "core/ssd_math.h"               // chunk_decays
#include "cuda/host_compilable.cuh"
#include "cuda/shared_buffers.cuh"

namespace ag::cuda::chunked {

constexpr int64_t kChunk = 64;                     // the most positions in a chunk: rows of a tile, and G's size
constexpr int64_t kTile = 64;                      // columns of an output tile
constexpr int64_t kSlice = 32;                     // the width of r staged at once
constexpr int kBlockThreads = 256;                 // threads per block
constexpr int kRowStep = kBlockThreads / kTile;    // thread t owns rows t / kTile + kRowStep·k
constexpr int kRowsPerThread = kChunk / kRowStep;  // k < 16
static_assert(kChunk == kTile, "the scores G [kChunk, kChunk] are computed as an output tile");

// The sizes of one product; chunk and chunks as the GPU runs them.
struct Plan {
  PrefixDirection direction;
  int64_t problems, T, r, e, chunk, chunks;
  bool from_state;  // the scan starts from the caller's state (causal decoding)
  __host__ __device__ bool causal() const { return direction == PrefixDirection::Causal; }
  __host__ __device__ bool all() const { return direction == PrefixDirection::All; }
};

inline Plan make_plan(PrefixDirection direction, int64_t problems, int64_t T, int64_t r, int64_t e, int64_t chunk,
                      bool from_state) {
  const int64_t length = std::clamp<int64_t>(chunk, 1, kChunk);
  return {direction, problems, T, r, e, length, (T + length - 1) / length, from_state};
}

// Rows of one operand from position j on: rows[i] is row j + i. Found once per block (the operands'
// head mappings divide), then stepped by the stride.
template <class T> struct Rows {
  T* first;
  int64_t stride;
  __device__ T* operator[](int64_t i) const { return first + i * stride; }
};

// The operands P of a product provide, for problem n, in-head g < groups() and position j:
//   Rows<const T> a(n, j), b(n, g, j), c(n, g, j): A [r], B_g [r], C_g [e] from row j on;
//   Rows<T> out(n, j): Out [e] from row j on;  T log_decay(n, j): λ_j (0 where nothing decays);  T weight(n, j): w_j.

// Per position j of the chunk: a_j = exp(λ_j), w_j and the running products of a
// from the chunk's start (to_start_j = Π_{r=j0..j} a_r) and to its end (to_end_j = Π_{r=j+1..j1−1} a_r).
template <class T> struct ChunkDecays {
  T *a, *w, *to_start, *to_end;
  __device__ explicit ChunkDecays(SharedBuffers<T>& shared)
      : a(shared.take(kChunk)), w(shared.take(kChunk)), to_start(shared.take(kChunk)), to_end(shared.take(kChunk)) {}

  template <class P> __device__ void load(const P& p, int64_t n, int64_t j0, int64_t m) {
    for (int64_t j = threadIdx.x; j < m; j += blockDim.x) {
      a[j] = exp(p.log_decay(n, j0 + j));
      w[j] = p.weight(n, j0 + j);
    }
    __syncthreads();
    if (threadIdx.x == 0) chunk_decays(a, m, to_start, to_end);  // 64 multiplies: one thread, in the CPU's order
    __syncthreads();
  }
};

// dst[j · pitch + k] = src[j][k0 + k] · scale(j) for j < rows and k < width: 0 for rows j ≥ m and
// columns k0 + k ≥ limit, so the tiles' padding adds nothing.
template <class T, class Scale>
__device__ void stage(T* dst, int64_t pitch, int64_t rows, int64_t width, int64_t m, int64_t k0, int64_t limit,
                      const Rows<const T>& src, const Scale& scale) {
  for (int64_t index = threadIdx.x; index < rows * width; index += blockDim.x) {
    const int64_t j = index / width, k = index % width;
    dst[j * pitch + k] = j < m && k0 + k < limit ? src[j][k0 + k] * scale(j) : T(0);
  }
}
struct NoScale {
  template <class I> __device__ int operator()(I) const { return 1; }
};

// --- 1. chunk states ----------------------------------------------------------------------------------
// Block task = n · chunks + c writes S_c [r, e] to states + task·r·e and Λ_c to decays[task].
template <class T, class P>
__global__ __launch_bounds__(kBlockThreads) void chunk_states_kernel(P p, Plan plan, T* states, T* decays) {
  SharedBuffers<T> shared;
  ChunkDecays<T> d(shared);
  constexpr int64_t pitch = kTile + 1;
  T *sB = shared.take(kChunk * pitch), *sC = shared.take(kChunk * pitch);
  const int col = threadIdx.x % kTile, row0 = threadIdx.x / kTile;
  for (int64_t task = blockIdx.x; task < plan.problems * plan.chunks; task += gridDim.x) {
    const int64_t n = task / plan.chunks, j0 = task % plan.chunks * plan.chunk;
    const int64_t m = plan.chunk < plan.T - j0 ? plan.chunk : plan.T - j0;
    __syncthreads();  // the previous task is done with the shared buffers
    d.load(p, n, j0, m);
    if (threadIdx.x == 0) decays[task] = d.to_start[m - 1];
    const T* keep = plan.causal() ? d.to_end : d.to_start;
    T* S = states + task * plan.r * plan.e;
    for (int64_t r0 = 0; r0 < plan.r; r0 += kTile)
      for (int64_t e0 = 0; e0 < plan.e; e0 += kTile) {
        T acc[kRowsPerThread] = {};
        for (int64_t g = 0; g < p.groups(); ++g) {
          stage(sB, pitch, kChunk, kTile, m, r0, plan.r, p.b(n, g, j0),
                [&](int64_t j) { return keep[j] * d.w[j]; });  // B_j scaled as the CPU's decayed_b
          stage(sC, pitch, kChunk, kTile, m, e0, plan.e, p.c(n, g, j0), NoScale{});
          __syncthreads();
          for (int64_t j = 0; j < m; ++j) {
            const T cj = sC[j * pitch + col];
            AG_UNROLL
            for (int k = 0; k < kRowsPerThread; ++k) acc[k] += sB[j * pitch + row0 + k * kRowStep] * cj;
          }
          __syncthreads();
        }
        AG_UNROLL
        for (int k = 0; k < kRowsPerThread; ++k) {
          const int64_t row = r0 + row0 + k * kRowStep, column = e0 + col;
          if (row < plan.r && column < plan.e) S[row * plan.e + column] = acc[k];
        }
      }
  }
}

// --- 2. state passing ---------------------------------------------------------------------------------
// Element i = n·r·e + at of every state, one thread each: S_c is replaced by E_c, the state entering
// chunk c; `state` [problems, r, e] (or null) gives the first E and receives the last.
template <class T> struct StatePassing {
  T* states;
  const T* decays;
  T* state;
  Plan plan;
  __device__ void operator()(int64_t i) const {
    const int64_t size = plan.r * plan.e, n = i / size, at = i % size;
    const auto slot = [&](int64_t c) -> T& { return states[(n * plan.chunks + c) * size + at]; };
    T carry = state ? state[i] : T(0);
    if (plan.all()) {  // every chunk reads all of them
      for (int64_t c = 0; c < plan.chunks; ++c) carry += slot(c);
      for (int64_t c = 0; c < plan.chunks; ++c) slot(c) = carry;
      return;
    }
    for (int64_t step = 0; step < plan.chunks; ++step) {
      const int64_t c = plan.causal() ? step : plan.chunks - 1 - step;
      const T own = slot(c);
      slot(c) = carry;
      carry = decays[n * plan.chunks + c] * carry + own;
    }
    if (state) state[i] = carry;
  }
};

// --- 3. outputs ---------------------------------------------------------------------------------------
// G [kChunk, kChunk + 1] = (mask ∘ A_c B_gcᵀ) w for in-head g: the dot products as an output tile (i
// rows, j columns), then one thread per column j walks the visible rows, multiplying one a per step.
template <class T, class P>
__device__ void masked_scores(const P& p, const Plan& plan, const ChunkDecays<T>& d, int64_t n, int64_t g, int64_t j0,
                              int64_t m, T* G, T* sA, T* sB) {
  constexpr int64_t pitch = kSlice + 1, g_pitch = kChunk + 1;
  const int col = threadIdx.x % kTile, row0 = threadIdx.x / kTile;
  const Rows<const T> Ac = p.a(n, j0), Bc = p.b(n, g, j0);
  T acc[kRowsPerThread] = {};
  for (int64_t r0 = 0; r0 < plan.r; r0 += kSlice) {
    stage(sA, pitch, kChunk, kSlice, m, r0, plan.r, Ac, NoScale{});
    stage(sB, pitch, kChunk, kSlice, m, r0, plan.r, Bc, NoScale{});
    __syncthreads();
    for (int64_t s = 0; s < kSlice; ++s) {
      const T bj = sB[col * pitch + s];
      AG_UNROLL
      for (int k = 0; k < kRowsPerThread; ++k) acc[k] += sA[(row0 + k * kRowStep) * pitch + s] * bj;
    }
    __syncthreads();
  }
  AG_UNROLL
  for (int k = 0; k < kRowsPerThread; ++k) G[(row0 + k * kRowStep) * g_pitch + col] = acc[k];
  __syncthreads();
  if (threadIdx.x < m) {
    const int64_t j = threadIdx.x;
    T mask = 1;  // exp(σ(i, j)), from 1 at i = j
    if (plan.causal()) {
      for (int64_t i = 0; i < j; ++i) G[i * g_pitch + j] = 0;
      for (int64_t i = j; i < m; ++i) {
        if (i > j) mask *= d.a[i];
        G[i * g_pitch + j] *= mask * d.w[j];
      }
    } else {
      for (int64_t i = j + 1; i < m; ++i) G[i * g_pitch + j] = 0;
      for (int64_t i = j; i >= 0; --i) {
        if (i < j) mask *= d.a[i + 1];
        G[i * g_pitch + j] *= mask * d.w[j];
      }
    }
  }
  __syncthreads();
}

// Block task = n · chunks + c writes Out's rows [j0, j0 + m), tile by tile of e; the first in-head's pass
// starts from the state's part, the others add to what the block wrote.
template <class T, class P>
__global__ __launch_bounds__(kBlockThreads) void chunk_outputs_kernel(P p, Plan plan, const T* states) {
  SharedBuffers<T> shared;
  ChunkDecays<T> d(shared);
  constexpr int64_t pitch = kSlice + 1, tile_pitch = kTile + 1;
  T* G = shared.take(kChunk * (kChunk + 1));
  T* work = shared.take(2 * kChunk * pitch);  // sA and sB, or sA and sE, or sC
  T *sA = work, *sB = work + kChunk * pitch, *sE = work + kChunk * pitch, *sC = work;
  const int col = threadIdx.x % kTile, row0 = threadIdx.x / kTile;
  const bool within = !plan.all();  // All: no chunk term, every position reads the total state
  for (int64_t task = blockIdx.x; task < plan.problems * plan.chunks; task += gridDim.x) {
    const int64_t n = task / plan.chunks, c = task % plan.chunks, j0 = c * plan.chunk;
    const int64_t m = plan.chunk < plan.T - j0 ? plan.chunk : plan.T - j0;
    const int64_t step = plan.causal() ? c : plan.chunks - 1 - c;
    const bool has_state = !within || step > 0 || plan.from_state;
    __syncthreads();  // the previous task is done with the shared buffers
    d.load(p, n, j0, m);
    const T* read = plan.causal() ? d.to_start : d.to_end;
    const T* E = states + task * plan.r * plan.e;
    const Rows<const T> Ac = p.a(n, j0);
    const Rows<T> Oc = p.out(n, j0);
    const int64_t passes = within ? p.groups() : 1;
    for (int64_t g = 0; g < passes; ++g) {
      if (within) masked_scores(p, plan, d, n, g, j0, m, G, sA, sB);
      for (int64_t e0 = 0; e0 < plan.e; e0 += kTile) {
        T acc[kRowsPerThread] = {};
        const int64_t column = e0 + col;
        if (g > 0) {
          AG_UNROLL
          for (int k = 0; k < kRowsPerThread; ++k) {
            const int64_t i = row0 + k * kRowStep;
            if (i < m && column < plan.e) acc[k] = Oc[i][column];  // this thread wrote it
          }
        } else if (has_state) {  // read_i · A_i E_c, as the CPU: the product, then the decay
          for (int64_t r0 = 0; r0 < plan.r; r0 += kSlice) {
            stage(sA, pitch, kChunk, kSlice, m, r0, plan.r, Ac, NoScale{});
            stage(sE, tile_pitch, kSlice, kTile, plan.r - r0, e0, plan.e, Rows<const T>{E + r0 * plan.e, plan.e},
                  NoScale{});
            __syncthreads();
            for (int64_t s = 0; s < kSlice; ++s) {
              const T es = sE[s * tile_pitch + col];
              AG_UNROLL
              for (int k = 0; k < kRowsPerThread; ++k) acc[k] += sA[(row0 + k * kRowStep) * pitch + s] * es;
            }
            __syncthreads();
          }
          AG_UNROLL
          for (int k = 0; k < kRowsPerThread; ++k) {
            const int64_t i = row0 + k * kRowStep;
            if (i < m) acc[k] *= read[i];
          }
        }
        if (within) {
          stage(sC, tile_pitch, kChunk, kTile, m, e0, plan.e, p.c(n, g, j0), NoScale{});
          __syncthreads();
          for (int64_t j = 0; j < m; ++j) {
            const T cj = sC[j * tile_pitch + col];
            AG_UNROLL
            for (int k = 0; k < kRowsPerThread; ++k) acc[k] += G[(row0 + k * kRowStep) * (kChunk + 1) + j] * cj;
          }
          __syncthreads();
        }
        AG_UNROLL
        for (int k = 0; k < kRowsPerThread; ++k) {
          const int64_t i = row0 + k * kRowStep;
          if (i < m && column < plan.e) Oc[i][column] = acc[k];
        }
      }
    }
  }
}

// The whole product on a device `dev` (cuda/launch.cuh's Gpu; the host tests' Device): the three
// launches with their scratch, Out through p, `state` [problems, r, e] read and overwritten when
// plan.from_state. The shared memory each kernel asks: its buffers above.
template <class T, class P, class Device> void product(Device& dev, const P& p, const Plan& plan, T* state) {
  if (plan.problems == 0 || plan.T == 0) return;
  T* states = dev.template scratch<T>(plan.problems * plan.chunks * plan.r * plan.e);
  T* decays = dev.template scratch<T>(plan.problems * plan.chunks);
  const int64_t tasks = plan.problems * plan.chunks;
  dev.blocks(chunk_states_kernel<T, P>, tasks, kBlockThreads, (4 * kChunk + 2 * kChunk * (kTile + 1)) * sizeof(T), p,
             plan, states, decays);
  dev(plan.problems * plan.r * plan.e, StatePassing<T>{states, decays, plan.from_state ? state : nullptr, plan});
  dev.blocks(chunk_outputs_kernel<T, P>, tasks, kBlockThreads,
             (4 * kChunk + kChunk * (kChunk + 1) + 2 * kChunk * (kSlice + 1)) * sizeof(T), p, plan,
             static_cast<const T*>(states));
}

}  // namespace ag::cuda::chunked
