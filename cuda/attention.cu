// Attention kernels on the GPU: FlashAttention's forward and backward launched, and the
// one-thread-per-index kernels of cuda/attention_kernels.cuh (the dense implementation's
// masked softmax, the score modifiers, additive scores, dropout, RoPE, the merge) through
// their launches. Reference: core/cpu/attention.cpp (the same formulas;
// tests/test_attention_op.cpp runs every case on both devices). The mask, the tile
// classification and the guarded softmax formulas come from core/attention_math.h, shared
// with the CPU.
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
#include "cuda/attention_kernels.cuh"
#include "cuda/attention_tiles.cuh"
#include "cuda/cuda.h"
#include "cuda/flash_kernels.cuh"
#include "cuda/flash_mma.cuh"
#include "cuda/launch.cuh"

namespace ag::cuda {

namespace {

// Sᵀ's (or A's, dA's) sizes: [n, Hq, Tk, Tq].
TransposedScores transposed(const Tensor& S) { return {S.size(0), S.size(1), S.size(2), S.size(3)}; }

}  // namespace

void attention_softmax(const Tensor& S, const AttentionMask& mask, const Tensor& sinks, Tensor& A, Tensor& lse) {
  visit_floating(S.dtype(), "attention_softmax", [&](auto zero) {
    using T = decltype(zero);
    attention_softmax_launch(Gpu(), ptr<const T>(S), transposed(S), mask,
                             sinks.defined() ? ptr<const T>(sinks) : nullptr, ptr<T>(A),
                             lse.defined() ? ptr<double>(lse) : nullptr);
  });
}

void attention_score_mods(const Tensor& S, const AttentionShape& shape, Tensor& S_mod) {
  visit_floating(S.dtype(), "attention_score_mods", [&](auto zero) {
    using T = decltype(zero);
    attention_score_mods_launch(Gpu(), ptr<const T>(S), S.numel(), shape, ptr<T>(S_mod));
  });
}

void attention_score_mods_backward(const Tensor& dS, const Tensor& S, const AttentionShape& shape, Tensor& dU,
                                   Tensor& dBias) {
  visit_floating(dS.dtype(), "attention_score_mods_backward", [&](auto zero) {
    using T = decltype(zero);
    attention_score_mods_backward_launch(Gpu(), ptr<const T>(dS), S.defined() ? ptr<const T>(S) : nullptr,
                                         dS.numel(), shape, ptr<T>(dU), dBias.defined() ? ptr<T>(dBias) : nullptr,
                                         dBias.defined() ? dBias.numel() : 0);
  });
}

void attention_additive_scores(const Tensor& Q, const Tensor& K, const AttentionShape& shape, double slope,
                               int64_t first_batch, Tensor& S) {
  visit_floating(S.dtype(), "attention_additive_scores", [&](auto zero) {
    using T = decltype(zero);
    attention_additive_scores_launch(Gpu(), ptr<const T>(Q), ptr<const T>(K), shape, static_cast<T>(slope),
                                     first_batch, S.numel(), ptr<T>(S));
  });
}

void attention_additive_scores_backward(const Tensor& Q, const Tensor& K, const Tensor& dU, const AttentionShape& shape,
                                        double slope, int64_t first_batch, Tensor& dQ, Tensor& dK) {
  visit_floating(dU.dtype(), "attention_additive_scores_backward", [&](auto zero) {
    using T = decltype(zero);
    attention_additive_scores_backward_launch(Gpu(), ptr<const T>(Q), ptr<const T>(K), ptr<const T>(dU),
                                              dU.size(0), shape, static_cast<T>(slope), first_batch, ptr<T>(dQ),
                                              ptr<T>(dK));
  });
}

void attention_dropout(const Tensor& X, const Tensor& support, double p, uint64_t seed, uint64_t offset,
                       const uint64_t* counter_shift, int64_t first_batch, Tensor& out) {
  visit_floating(X.dtype(), "attention_dropout", [&](auto zero) {
    using T = decltype(zero);
    attention_dropout_launch(Gpu(), ptr<const T>(X), ptr<const T>(support), transposed(X), p, seed, offset,
                             counter_shift, first_batch, ptr<T>(out));
  });
}

void attention_softmax_backward(const Tensor& A, const Tensor& dA, Tensor& dS) {
  visit_floating(A.dtype(), "attention_softmax_backward", [&](auto zero) {
    using T = decltype(zero);
    attention_softmax_backward_launch(Gpu(), ptr<const T>(A), ptr<const T>(dA), transposed(A), ptr<T>(dS));
  });
}

void rotary_embedding(const Tensor& X, const RotaryShape& shape, Tensor& Y) {
  visit_floating(X.dtype(), "rotary_embedding", [&](auto zero) {
    using T = decltype(zero);
    rotary_embedding_launch(Gpu(), ptr<const T>(X), shape, ptr<T>(Y));
  });
}

void flash_attention(const Tensor& Q, const Tensor& K, const Tensor& V, const AttentionShape& shape, Tensor& Z,
                     Tensor& lse) {
  if (flash_mma_takes(Q, shape)) return flash_attention_mma(Q, K, V, shape, Z, lse);  // bf16 or tf32: tensor cores
  visit_floating(Q.dtype(), "flash_attention", [&](auto zero) {
    using T = decltype(zero);
    flash_attention_launch(Gpu(), ptr<const T>(Q), ptr<const T>(K), ptr<const T>(V), shape, ptr<T>(Z),
                           ptr<double>(lse));
  });
}

void flash_attention_backward(const Tensor& Q, const Tensor& K, const Tensor& V, const Tensor& lse, const Tensor& dZ,
                              const Tensor& given_D, const AttentionShape& shape, bool accumulate, Tensor& dQ,
                              Tensor& dK, Tensor& dV, Tensor& dBias) {
  if (flash_mma_takes(Q, shape))  // --precision bf16 or tf32: tensor cores (no bias tables: dBias stays undefined)
    return flash_attention_backward_mma(Q, K, V, lse, dZ, given_D, shape, accumulate, dQ, dK, dV);
  visit_floating(Q.dtype(), "flash_attention_backward", [&](auto zero) {
    using T = decltype(zero);
    Gpu gpu;
    flash_attention_backward_launch(gpu, ptr<const T>(Q), ptr<const T>(K), ptr<const T>(V), ptr<const double>(lse),
                                    ptr<const T>(dZ), given_D.defined() ? ptr<T>(given_D) : nullptr, shape, accumulate,
                                    ptr<T>(dQ), ptr<T>(dK), ptr<T>(dV), dBias.defined() ? ptr<T>(dBias) : nullptr);
  });
}

void attention_merge(Tensor& Z, Tensor& lse, const Tensor& Z_part, const Tensor& lse_part, const AttentionShape& shape) {
  visit_floating(Z.dtype(), "attention_merge", [&](auto zero) {
    using T = decltype(zero);
    attention_merge_launch(Gpu(), ptr<T>(Z), ptr<double>(lse), ptr<const T>(Z_part), ptr<const double>(lse_part),
                           shape);
  });
}

}  // namespace ag::cuda
