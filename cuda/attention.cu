// Attention kernels on the GPU: the dense implementation's masked softmax and
// FlashAttention's forward and backward. Reference: core/cpu/attention.cpp (the
// same formulas; tests/test_attention_op.cpp runs every case on both devices).
// The mask, the tile classification and the guarded softmax formulas come from
// core/attention_math.h, shared with the CPU.
//
// Flash thread mapping. Tiles are `tile` queries by `tile` keys, held in shared
// memory with K, V (and Q, dZ) tiles; `tile` is the largest of 32, 16, 8 whose
// buffers fit in 48 KB (so it depends on d and the dtype).
//   forward:        one block per (b, query head h, query tile); each owns its
//                   rows of Z and lse. Threads split the S tile's entries, then
//                   one warp per row does the online-softmax update, then the
//                   threads split the accumulator's entries.
//   backward, dK dV: one block per (b, kv head, key tile), looping over the
//                   query tiles of every query head that reads the kv head.
//   backward, dQ:   one block per (b, h, query tile), looping over the key tiles.
// Each output element is written by one block, summed in a fixed order: no
// atomics, the same bits every run. P and dP are recomputed three times in the
// backward (for D, for dQ, for dK and dV): the price of a deterministic dQ
// without atomics, and of D summed from the same P and dP as dS (see the CPU).
//
// The flash kernels themselves are in cuda/flash_kernels.cuh (device code a host build
// compiles too: tests/test_cuda_on_host.cpp runs them on host fibers).
//
// Under --precision bf16 or tf32, flash_attention and its backward hand the problems that
// flash_mma_takes accepts to the tensor-core kernels of cuda/flash_mma.cu (this
// file's float32 kernels stay the reference, and take everything else).
#include <limits>

#include "core/elementwise_math.h"
#include "cuda/attention_tiles.cuh"
#include "cuda/cuda.h"
#include "cuda/flash_kernels.cuh"
#include "cuda/flash_mma.cuh"
#include "cuda/launch.cuh"

namespace ag::cuda {

namespace {

using math::kInf;

constexpr int kFlashThreads = 128;  // 4 warps
constexpr size_t kSharedBudget = 48 * 1024;

// --- the dense implementation's softmax -------------------------------------------------

// One thread per query column c = (b·Hq + h)·Tq + i of Sᵀ [B, Hq, Tk, Tq]
// (core/kernels.inc): A = softmax over the visible keys, 0 elsewhere; lse = the
// column's log-sum-exp (unless lse is null). Adjacent threads read adjacent
// queries of a key's row. A may be S.
template <class T> struct MaskedSoftmaxColumns {
  const T* s;
  T* a;
  double* lse;
  int64_t Hq, Tq, Tk;
  AttentionMask mask;
  const T* sinks;  // [Hq], or null: exp(sink_h) joins each column's denominator
  __device__ void operator()(int64_t c) const {
    const int64_t matrix = c / Tq, i = c % Tq;
    const int64_t h = matrix % Hq;
    const AttentionMask::Row row = mask.at_batch(matrix / Hq).row(h, i);
    const T slope = static_cast<T>(mask.alibi_slope(h));  // 0 without ALiBi: S + 0 = S
    const T* x = s + matrix * Tk * Tq + i;
    T* y = a + matrix * Tk * Tq + i;
    T max = -kInf<T>;
    for (int64_t j = 0; j < Tk; ++j)
      if (row.visible(j)) max = MaxOp{}(max, x[j * Tq] + mask.bias(slope, i, j));
    if (sinks) max = MaxOp{}(max, sinks[h]);
    const T reference = math::softmax_reference(max);
    T sum = 0;
    for (int64_t j = 0; j < Tk; ++j) {
      y[j * Tq] = row.visible(j) ? std::exp(x[j * Tq] + mask.bias(slope, i, j) - reference) : T(0);
      sum += y[j * Tq];
    }
    if (sinks) sum += std::exp(sinks[h] - reference);  // the sink's term, after the keys' (as the CPU)
    const T inv = sum == T(0) ? T(0) : T(1) / sum;  // a query that sees no key keeps its zeros
    for (int64_t j = 0; j < Tk; ++j) y[j * Tq] *= inv;
    if (lse) lse[c] = math::log_sum_exp<double>(max, sum);
  }
};

// One thread per query column of [B, Hq, Tk, Tq]: dSᵀ = Aᵀ ∘ (dAᵀ − colsum(dAᵀ ∘ Aᵀ)); dS may be dA.
template <class T> struct SoftmaxBackwardColumns {
  const T *a, *da;
  T* ds;
  int64_t Tq, Tk;
  __device__ void operator()(int64_t c) const {
    const int64_t at = c / Tq * Tk * Tq + c % Tq;
    T dot = 0;
    for (int64_t j = 0; j < Tk; ++j) dot += da[at + j * Tq] * a[at + j * Tq];
    for (int64_t j = 0; j < Tk; ++j) ds[at + j * Tq] = a[at + j * Tq] * (da[at + j * Tq] - dot);
  }
};

// --- GAT's additive scores and attention dropout (dense; core/cpu/attention.cpp) ------------

// Σ_c x_c over the d entries of one row, in float64.
template <class T> __device__ double row_sum(const T* row, int64_t d) {
  double total = 0;
  for (int64_t c = 0; c < d; ++c) total += static_cast<double>(row[c]);
  return total;
}
// One thread per entry (b', h, j, i) of Sᵀ [n, Hq, Tk, Tq]: S_ij = LeakyReLU(α_i + β_j).
template <class T> struct AdditiveScores {
  const T *q, *k;
  T* s;
  AttentionShape shape;
  T slope;
  int64_t first_batch;
  __device__ void operator()(int64_t e) const {
    const int64_t i = e % shape.Tq, j = e / shape.Tq % shape.Tk, h = e / (shape.Tq * shape.Tk) % shape.Hq,
                  b = first_batch + e / (shape.Tq * shape.Tk * shape.Hq);
    const T alpha = static_cast<T>(row_sum(q + shape.q.at(b, h, i), shape.d));
    const T beta = static_cast<T>(row_sum(k + shape.kv.at(b, h / shape.group(), j), shape.d));
    s[e] = math::leaky_relu(alpha + beta, slope);
  }
};
// One thread per query row (b', h, i): dα_i = Σ_j dU_ij·LeakyReLU′(α_i + β_j), keys in order,
// written to the row's d entries of dQ.
template <class T> struct AdditiveQueryGradient {
  const T *q, *k, *du;
  T* dq;
  AttentionShape shape;
  T slope;
  int64_t first_batch;
  __device__ void operator()(int64_t r) const {
    const int64_t i = r % shape.Tq, h = r / shape.Tq % shape.Hq, chunk_b = r / (shape.Tq * shape.Hq), b = first_batch + chunk_b;
    const T alpha = static_cast<T>(row_sum(q + shape.q.at(b, h, i), shape.d));
    const T* g = du + (chunk_b * shape.Hq + h) * shape.Tk * shape.Tq;
    double total = 0;
    for (int64_t j = 0; j < shape.Tk; ++j) {
      const T beta = static_cast<T>(row_sum(k + shape.kv.at(b, h / shape.group(), j), shape.d));
      total += static_cast<double>(g[j * shape.Tq + i] * math::leaky_relu_grad(alpha + beta, slope));
    }
    for (int64_t c = 0; c < shape.d; ++c) dq[shape.q.at(b, h, i) + c] = static_cast<T>(total);
  }
};
// One thread per key row (b', kv head, j): dβ_j = Σ_{h of the group} Σ_i dU_ij·LeakyReLU′(α_i + β_j).
template <class T> struct AdditiveKeyGradient {
  const T *q, *k, *du;
  T* dk;
  AttentionShape shape;
  T slope;
  int64_t first_batch;
  __device__ void operator()(int64_t r) const {
    const int64_t j = r % shape.Tk, kvh = r / shape.Tk % shape.Hkv, chunk_b = r / (shape.Tk * shape.Hkv), b = first_batch + chunk_b;
    const T beta = static_cast<T>(row_sum(k + shape.kv.at(b, kvh, j), shape.d));
    double total = 0;
    for (int64_t h = kvh * shape.group(); h < (kvh + 1) * shape.group(); ++h) {
      const T* g = du + (chunk_b * shape.Hq + h) * shape.Tk * shape.Tq;
      for (int64_t i = 0; i < shape.Tq; ++i) {
        const T alpha = static_cast<T>(row_sum(q + shape.q.at(b, h, i), shape.d));
        total += static_cast<double>(g[j * shape.Tq + i] * math::leaky_relu_grad(alpha + beta, slope));
      }
    }
    for (int64_t c = 0; c < shape.d; ++c) dk[shape.kv.at(b, kvh, j) + c] = static_cast<T>(total);
  }
};
// One thread per entry (b', h, j, i) of Aᵀ: the counter of A's (b, h, i, j) (AttentionDropout).
template <class T> struct AttentionDropoutEntries {
  const T *x, *a;
  T* out;
  double p;
  uint64_t seed, first;
  const uint64_t* shift;  // inside a captured graph (core/counter_shifts.h), else null
  int64_t Tq, Tk;
  T scale;
  __device__ void operator()(int64_t e) const {
    if (a[e] == T(0)) {  // a hidden pair: nothing drawn (as the CPU)
      out[e] = T(0);
      return;
    }
    const int64_t i = e % Tq, j = e / Tq % Tk, matrix = e / (Tq * Tk);
    const uint64_t counter = (shift ? first + *shift : first) + static_cast<uint64_t>((matrix * Tq + i) * Tk + j);
    out[e] = random_uniform(seed, counter) >= p ? x[e] * scale : T(0);
  }
};

// --- the dense implementation's score modifiers ---------------------------------------------

// One thread per entry e of Sᵀ [n, Hq, Tk, Tq]: S'ᵀ = mods.modify(Sᵀ) (core/attention_math.h).
template <class T> struct ModifyScores {
  const T* s;
  T* s_mod;
  AttentionShape shape;
  __device__ void operator()(int64_t e) const {
    const int64_t i = e % shape.Tq, j = e / shape.Tq % shape.Tk, h = e / (shape.Tq * shape.Tk) % shape.Hq;
    s_mod[e] = shape.mods.modify(s[e], h, i + shape.mask.q_offset, i, j);
  }
};
// One thread per entry: dU = dS' ∘ ∂S'/∂u, the factor recomputed from S (null without a cap: 1).
template <class T> struct ScoreModsChain {
  const T* ds;
  const T* s;
  T* du;
  AttentionShape shape;
  __device__ void operator()(int64_t e) const {
    if (!s) {
      du[e] = ds[e];
      return;
    }
    const int64_t i = e % shape.Tq, j = e / shape.Tq % shape.Tk, h = e / (shape.Tq * shape.Tk) % shape.Hq;
    du[e] = ds[e] * shape.mods.cap_derivative(shape.mods.modify(s[e], h, i + shape.mask.q_offset, i, j));
  }
};
// One thread per (matrix, table entry) of dBias [n, Hq, E]: the sum of dU over the matrix's
// pairs that read the entry, keys then queries in order (the CPU's order).
template <class T> struct BiasGradientSums {
  const T* du;
  T* dbias;
  AttentionShape shape;
  __device__ void operator()(int64_t idx) const {
    const int64_t E = shape.mods.bias_entries(), matrix = idx / E, e = idx % E, Tq = shape.Tq, Tk = shape.Tk;
    const ScoreModifiers::Distances distances =
        e < (shape.mods.relative ? shape.mods.relative_buckets : 0) ? shape.mods.distances_of(e) : ScoreModifiers::Distances{};
    const T* g = du + matrix * Tk * Tq;
    T sum = 0;
    for (int64_t j = 0; j < Tk; ++j)
      for (int64_t i = 0; i < Tq; ++i)
        if (shape.mods.reads(e, distances, i + shape.mask.q_offset, i, j)) sum += g[j * Tq + i];
    dbias[idx] = sum;
  }
};

// --- flash: the launches (its kernels: cuda/flash_kernels.cuh) ----------------------------

// The largest tile of 32, 16, 8 whose `floats(tile)` elements of T fit in the budget.
template <class T, class Floats> int choose_tile(const char* kernel, int64_t d, Floats floats) {
  for (int tile : {32, 16, 8})
    if (floats(tile) * sizeof(T) <= kSharedBudget) return tile;
  throw Error(std::string(kernel) + ": head width d = " + std::to_string(d) +
              " needs more shared memory than this kernel uses (48 KB)");
}

// --- RoPE -------------------------------------------------------------------------------
// One thread per pair (row, i), i < d/2; the angle in float64, as on the CPU.
template <class T> struct RotatePairs {
  const T* x;
  T* y;
  RotaryShape shape;
  __device__ void operator()(int64_t idx) const {
    const int64_t half = shape.d / 2, row = idx / half, i = idx % half, at = shape.row_at(row);
    const double angle = shape.angle(shape.position(row), shape.frequency(i));
    rotate_pair(x + at, y + at, half, i, static_cast<T>(cos(angle)), static_cast<T>(sin(angle)));
  }
};

// Ring attention's merge: one thread per row (b, h, i), the row's index being lse_at(b, h, i).
template <class T> struct MergeSoftmaxParts {
  T* z;
  double* lse;
  const T* z_part;
  const double* lse_part;
  AttentionShape shape;
  __device__ void operator()(int64_t row) const {
    const int64_t at = shape.q.at(row / (shape.Hq * shape.Tq), row / shape.Tq % shape.Hq, row % shape.Tq);
    const math::SoftmaxMerge merged = math::merge_softmax_parts(lse[row], lse_part[row]);
    const T w1 = static_cast<T>(merged.weight_1), w2 = static_cast<T>(merged.weight_2);
    for (int64_t e = 0; e < shape.d; ++e) z[at + e] = w1 * z[at + e] + w2 * z_part[at + e];
    lse[row] = merged.log_sum_exp;
  }
};

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

// kernel<<<tasks (capped), kFlashThreads, `floats` elements of T in shared memory>>>(args...);
// the kernels loop over their tasks grid-stride.
template <class T, class... Params, class... Args>
void launch_tiles(void (*kernel)(Params...), int64_t tasks, int64_t floats, Args... args) {
  if (tasks == 0) return;
  kernel<<<grid_for(tasks), kFlashThreads, floats * sizeof(T), current_stream()>>>(args...);
  AG_CUDA_CHECK_LAUNCH();
}

}  // namespace

void attention_softmax(const Tensor& S, const AttentionMask& mask, const Tensor& sinks, Tensor& A, Tensor& lse) {
  visit_floating(S.dtype(), "attention_softmax", [&](auto zero) {
    using T = decltype(zero);
    const int64_t Hq = S.size(1), Tk = S.size(2), Tq = S.size(3);
    for_each_index(S.numel() / Tk,
                   MaskedSoftmaxColumns<T>{ptr<const T>(S), ptr<T>(A), lse.defined() ? ptr<double>(lse) : nullptr, Hq,
                                           Tq, Tk, mask, sinks.defined() ? ptr<const T>(sinks) : nullptr});
  });
}

void attention_score_mods(const Tensor& S, const AttentionShape& shape, Tensor& S_mod) {
  visit_floating(S.dtype(), "attention_score_mods", [&](auto zero) {
    using T = decltype(zero);
    for_each_index(S.numel(), ModifyScores<T>{ptr<const T>(S), ptr<T>(S_mod), shape});
  });
}

void attention_score_mods_backward(const Tensor& dS, const Tensor& S, const AttentionShape& shape, Tensor& dU,
                                   Tensor& dBias) {
  visit_floating(dS.dtype(), "attention_score_mods_backward", [&](auto zero) {
    using T = decltype(zero);
    for_each_index(dS.numel(),
                   ScoreModsChain<T>{ptr<const T>(dS), S.defined() ? ptr<const T>(S) : nullptr, ptr<T>(dU), shape});
    if (dBias.defined()) for_each_index(dBias.numel(), BiasGradientSums<T>{ptr<const T>(dU), ptr<T>(dBias), shape});
  });
}

void attention_additive_scores(const Tensor& Q, const Tensor& K, const AttentionShape& shape, double slope,
                               int64_t first_batch, Tensor& S) {
  visit_floating(S.dtype(), "attention_additive_scores", [&](auto zero) {
    using T = decltype(zero);
    for_each_index(S.numel(), AdditiveScores<T>{ptr<const T>(Q), ptr<const T>(K), ptr<T>(S), shape,
                                                static_cast<T>(slope), first_batch});
  });
}

void attention_additive_scores_backward(const Tensor& Q, const Tensor& K, const Tensor& dU, const AttentionShape& shape,
                                        double slope, int64_t first_batch, Tensor& dQ, Tensor& dK) {
  visit_floating(dU.dtype(), "attention_additive_scores_backward", [&](auto zero) {
    using T = decltype(zero);
    const int64_t n = dU.size(0);
    for_each_index(n * shape.Hq * shape.Tq, AdditiveQueryGradient<T>{ptr<const T>(Q), ptr<const T>(K), ptr<const T>(dU),
                                                                     ptr<T>(dQ), shape, static_cast<T>(slope), first_batch});
    for_each_index(n * shape.Hkv * shape.Tk, AdditiveKeyGradient<T>{ptr<const T>(Q), ptr<const T>(K), ptr<const T>(dU),
                                                                    ptr<T>(dK), shape, static_cast<T>(slope), first_batch});
  });
}

void attention_dropout(const Tensor& X, const Tensor& support, double p, uint64_t seed, uint64_t offset,
                       const uint64_t* counter_shift, int64_t first_batch, Tensor& out) {
  visit_floating(X.dtype(), "attention_dropout", [&](auto zero) {
    using T = decltype(zero);
    const int64_t Hq = X.size(1), Tk = X.size(2), Tq = X.size(3);
    const T scale = p < 1 ? static_cast<T>(1.0 / (1.0 - p)) : T(0);
    for_each_index(X.numel(), AttentionDropoutEntries<T>{ptr<const T>(X), ptr<const T>(support), ptr<T>(out), p, seed,
                                                         offset + static_cast<uint64_t>(first_batch * Hq * Tq * Tk),
                                                         counter_shift, Tq, Tk, scale});
  });
}

void attention_softmax_backward(const Tensor& A, const Tensor& dA, Tensor& dS) {
  visit_floating(A.dtype(), "attention_softmax_backward", [&](auto zero) {
    using T = decltype(zero);
    const int64_t Tk = A.size(2), Tq = A.size(3);
    for_each_index(A.numel() / Tk, SoftmaxBackwardColumns<T>{ptr<const T>(A), ptr<const T>(dA), ptr<T>(dS), Tq, Tk});
  });
}

void rotary_embedding(const Tensor& X, const RotaryShape& shape, Tensor& Y) {
  visit_floating(X.dtype(), "rotary_embedding", [&](auto zero) {
    using T = decltype(zero);
    for_each_index(shape.rows() * (shape.d / 2), RotatePairs<T>{ptr<const T>(X), ptr<T>(Y), shape});
  });
}
void flash_attention(const Tensor& Q, const Tensor& K, const Tensor& V, const AttentionShape& shape, Tensor& Z,
                     Tensor& lse) {
  if (flash_mma_takes(Q, shape)) return flash_attention_mma(Q, K, V, shape, Z, lse);  // bf16 or tf32: tensor cores
  visit_floating(Q.dtype(), "flash_attention", [&](auto zero) {
    using T = decltype(zero);
    const int tile = choose_tile<T>("flash_attention", shape.d, [&](int t) { return forward_floats(t, shape.d); });
    launch_tiles<T>(flash_forward_kernel<T>, shape.B * shape.Hq * tiles_of(shape.Tq, tile),
                    forward_floats(tile, shape.d), ptr<const T>(Q), ptr<const T>(K), ptr<const T>(V), shape, tile,
                    ptr<T>(Z), ptr<double>(lse));
  });
}

void flash_attention_backward(const Tensor& Q, const Tensor& K, const Tensor& V, const Tensor& lse, const Tensor& dZ,
                              const Tensor& given_D, const AttentionShape& shape, bool accumulate, Tensor& dQ,
                              Tensor& dK, Tensor& dV, Tensor& dBias) {
  if (flash_mma_takes(Q, shape))  // --precision bf16 or tf32: tensor cores (no bias tables: dBias stays undefined)
    return flash_attention_backward_mma(Q, K, V, lse, dZ, given_D, shape, accumulate, dQ, dK, dV);
  visit_floating(Q.dtype(), "flash_attention_backward", [&](auto zero) {
    using T = decltype(zero);
    // rowsum(P ∘ dP) [B, Hq, Tq]: the query kernel's, or the caller's
    const Tensor D = given_D.defined() ? given_D : Tensor::empty(lse.shape(), Q.dtype(), Device::CUDA);
    const int query_tile =
        choose_tile<T>("flash_attention_backward", shape.d, [&](int t) { return query_floats(t, shape); });
    const int64_t q_tiles = tiles_of(shape.Tq, query_tile), E = shape.mods.bias_entries();
    // The tables' sums per query tile [B, Hq, q_tiles, E], then summed over the tiles in order into dBias.
    const Tensor partial =
        dBias.defined() ? Tensor::empty({shape.B, shape.Hq, q_tiles, E}, Q.dtype(), Device::CUDA) : Tensor();
    launch_tiles<T>(flash_backward_query_kernel<T>, shape.B * shape.Hq * q_tiles, query_floats(query_tile, shape),
                    ptr<const T>(Q), ptr<const T>(K), ptr<const T>(V), ptr<const double>(lse), ptr<const T>(dZ), shape,
                    query_tile, given_D.defined(), accumulate, ptr<T>(D), ptr<T>(dQ),
                    partial.defined() ? ptr<T>(partial) : nullptr);
    if (partial.defined())
      for_each_index(dBias.numel(), SumOverTiles<T>{ptr<const T>(partial), ptr<T>(dBias), q_tiles, E});
    const int key_tile = choose_tile<T>("flash_attention_backward", shape.d, [&](int t) { return key_floats(t, shape); });
    launch_tiles<T>(flash_backward_key_kernel<T>, shape.B * shape.Hkv * tiles_of(shape.Tk, key_tile),
                    key_floats(key_tile, shape), ptr<const T>(Q), ptr<const T>(K), ptr<const T>(V),
                    ptr<const double>(lse), ptr<const T>(D), ptr<const T>(dZ), shape, key_tile, accumulate, ptr<T>(dK),
                    ptr<T>(dV));
  });
}

void attention_merge(Tensor& Z, Tensor& lse, const Tensor& Z_part, const Tensor& lse_part, const AttentionShape& shape) {
  visit_floating(Z.dtype(), "attention_merge", [&](auto zero) {
    using T = decltype(zero);
    for_each_index(shape.B * shape.Hq * shape.Tq, MergeSoftmaxParts<T>{ptr<T>(Z), ptr<double>(lse), ptr<const T>(Z_part),
                                                                      ptr<const double>(lse_part), shape});
  });
}

}  // namespace ag::cuda
