// The attention functions behind attention() (core/ops.h), one per file, for
// its dispatch in core/ops/attention.cpp (not part of the public API). Each
// gets inputs whose ranks, batch, widths and heads attention() has checked, and
// spec.cache only under the decode rules it has checked too (causal, BTHD,
// Tq = Tk, room in the cache); each checks what only it reads.
#pragma once
#include "core/ops/common.h"

namespace ag::detail {

// core/ops/linear_attention.cpp. With spec.cache: folds the new positions into
// cache->state (the caller advances cache->length).
Tensor linear_attention(const Tensor& q, const Tensor& k, const Tensor& v, const AttentionSpec& spec,
                        AttentionInternals* internals);

}  // namespace ag::detail
