// The attention functions behind attention() (core/ops.h), one per file, for
// its dispatch in core/ops/attention.cpp (not part of the public API). Each
// gets inputs whose ranks, batch, widths and heads attention() has checked, and
// spec.cache only under the decode rules it has checked too (causal, BTHD,
// Tq = Tk, room in the cache); each checks the values of what only it reads.
#pragma once
#include "core/ops/common.h"

namespace ag::detail {

// An operand [B, H, T, w] (BHTD) or [B, T, H, w] (BTHD): its heads, its positions, and where
// each head's rows start (core/ops/attention.cpp).
int64_t heads_of(const Tensor& t, AttentionLayout layout);
int64_t positions_of(const Tensor& t, AttentionLayout layout);
HeadStrides head_strides(const Tensor& t, AttentionLayout layout);
// [B, T, H, w] -> [B, H, T, w] under BTHD (a copy; the swap is its own inverse), t itself under BHTD.
Tensor heads_first(const Tensor& t, AttentionLayout layout);
// Each kv head repeated for the query heads that read it, [B, Hkv, T, w] -> [B, Hq, T, w] (a copy;
// expand's backward sums the group's gradients into the kv head): the references' GQA.
Tensor repeat_kv_heads(const Tensor& t, int64_t Hq);

// Each function takes its own parameters and the shared spec (whose `function`
// holds those parameters; attention() passes them from its one std::visit).

// core/ops/linear_attention.cpp. With spec.cache: folds the new positions into
// cache->state (the caller advances cache->length).
Tensor linear_attention(const Tensor& q, const Tensor& k, const Tensor& v, const LinearAttention& linear,
                        const AttentionSpec& spec, AttentionInternals* internals);

// core/ops/ssd.cpp. With spec.cache: runs the new positions from cache->state and leaves the state
// after them there (the caller advances cache->length).
Tensor ssd_attention(const Tensor& q, const Tensor& k, const Tensor& v, const SsdAttention& ssd, const AttentionSpec& spec,
                     AttentionInternals* internals);

// core/ops/ring_attention.cpp: softmax attention under spec.context, `whole` the problem
// as describe_problem sees this process's rows (its scale, mask and heads).
Tensor ring_attention(const Tensor& q, const Tensor& k, const Tensor& v, const AttentionShape& whole,
                      const SoftmaxAttention& softmax, const AttentionSpec& spec, AttentionInternals* internals);
// core/ops/edge_attention.cpp: softmax attention over softmax.masks.edges (whatever softmax.impl says).
Tensor edge_attention(const Tensor& q, const Tensor& k, const Tensor& v, const SoftmaxAttention& softmax,
                      const AttentionSpec& spec, AttentionInternals* internals);
// RoPE on this process's rows of a sequence split over spec.context, each half at its chunk's positions.
Tensor rope_at_context_positions(const Tensor& x, const AttentionSpec& spec);

}  // namespace ag::detail
