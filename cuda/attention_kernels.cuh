// The attention kernels that cuda/attention.cu launches one thread per index: the dense
// implementation's masked softmax and its backward, the score modifiers and their backward,
// GAT's additive scores, attention dropout, RoPE and ring attention's merge; with their launches,
// written once for any device that runs a functor per index. Device code that a host build
// compiles too: tests/test_cuda_on_host.cpp runs it on the host against core/cpu/attention.cpp.
// Contracts: core/kernels.inc. The mask, the modifiers and the guarded softmax formulas come
// from core/attention_math.h, shared with the CPU.
#pragma once
#include <cmath>
#include <cstdint>

#include "core/attention_math.h"
#include "core/elementwise_math.h"
#include "core/random.h"
#include "cuda/reduce_ops.cuh"

namespace ag::cuda {
namespace {

using math::kInf;

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
    const AttentionMask entry = mask.at_batch(matrix / Hq);  // kept: the row refers to its pattern
    const AttentionMask::Row row = entry.row(h, i);
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

// --- the launches on a device `dev` (cuda/launch.cuh's Gpu; the host tests' Device) -----------
// dev(count, f) calls f(i) for every i < count.

// The dense implementation's transposed scores Sᵀ [n, Hq, Tk, Tq] (A, dA, dS, dU alike): n batch entries.
struct TransposedScores {
  int64_t n, Hq, Tk, Tq;
  int64_t entries() const { return n * Hq * Tk * Tq; }
  int64_t columns() const { return n * Hq * Tq; }  // one per query of each head
};

template <class T, class Device>
void attention_softmax_launch(const Device& dev, const T* S, const TransposedScores& s, const AttentionMask& mask,
                              const T* sinks, T* A, double* lse) {
  dev(s.columns(), MaskedSoftmaxColumns<T>{S, A, lse, s.Hq, s.Tq, s.Tk, mask, sinks});
}

template <class T, class Device>
void attention_softmax_backward_launch(const Device& dev, const T* A, const T* dA, const TransposedScores& s, T* dS) {
  dev(s.columns(), SoftmaxBackwardColumns<T>{A, dA, dS, s.Tq, s.Tk});
}

template <class T, class Device>
void attention_score_mods_launch(const Device& dev, const T* S, int64_t entries, const AttentionShape& shape, T* S_mod) {
  dev(entries, ModifyScores<T>{S, S_mod, shape});
}

// S: null unless shape.mods.has_chain(); dBias: null without tables, else bias_count = n·Hq·bias_entries().
template <class T, class Device>
void attention_score_mods_backward_launch(const Device& dev, const T* dS, const T* S, int64_t entries,
                                          const AttentionShape& shape, T* dU, T* dBias, int64_t bias_count) {
  dev(entries, ScoreModsChain<T>{dS, S, dU, shape});
  if (dBias) dev(bias_count, BiasGradientSums<T>{dU, dBias, shape});
}

template <class T, class Device>
void attention_additive_scores_launch(const Device& dev, const T* Q, const T* K, const AttentionShape& shape, T slope,
                                      int64_t first_batch, int64_t entries, T* S) {
  dev(entries, AdditiveScores<T>{Q, K, S, shape, slope, first_batch});
}

// n: the chunk's batch entries (dU [n, Hq, Tk, Tq]).
template <class T, class Device>
void attention_additive_scores_backward_launch(const Device& dev, const T* Q, const T* K, const T* dU, int64_t n,
                                               const AttentionShape& shape, T slope, int64_t first_batch, T* dQ,
                                               T* dK) {
  dev(n * shape.Hq * shape.Tq, AdditiveQueryGradient<T>{Q, K, dU, dQ, shape, slope, first_batch});
  dev(n * shape.Hkv * shape.Tk, AdditiveKeyGradient<T>{Q, K, dU, dK, shape, slope, first_batch});
}

template <class T, class Device>
void attention_dropout_launch(const Device& dev, const T* X, const T* support, const TransposedScores& s, double p,
                              uint64_t seed, uint64_t offset, const uint64_t* counter_shift, int64_t first_batch,
                              T* out) {
  const T scale = p < 1 ? static_cast<T>(1.0 / (1.0 - p)) : T(0);
  dev(s.entries(), AttentionDropoutEntries<T>{X, support, out, p, seed,
                                              offset + static_cast<uint64_t>(first_batch * s.Hq * s.Tq * s.Tk),
                                              counter_shift, s.Tq, s.Tk, scale});
}

template <class T, class Device> void rotary_embedding_launch(const Device& dev, const T* X, const RotaryShape& shape, T* Y) {
  dev(shape.rows() * (shape.d / 2), RotatePairs<T>{X, Y, shape});
}

template <class T, class Device>
void attention_merge_launch(const Device& dev, T* Z, double* lse, const T* Z_part, const double* lse_part,
                            const AttentionShape& shape) {
  dev(shape.B * shape.Hq * shape.Tq, MergeSoftmaxParts<T>{Z, lse, Z_part, lse_part, shape});
}

}  // namespace
}  // namespace ag::cuda
