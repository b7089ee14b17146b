// Multi-head causal self-attention, in the users' notation:
//   Q = X W_Q,  K = X W_K,  V = X W_V          X [B, T, C], W_* [C, C]
//   heads: [B, T, C] viewed as [B, T, H, d_h], d_h = C / H (head h owns columns h·d_h … (h+1)·d_h − 1)
//   S = Q Kᵀ / √d_h,  A = softmax(S + M),  Z = A V   (per head; M the causal mask,
//                                                    or a sparse pattern: set_pattern)
//   O = Concat(head_1..head_H) W_O                 Z [B, T, H, d_h] viewed as [B, T, C]
// The residual (Y = X + O) is added by the Block, not here.
//
// The per-head part is one op, ag::attention (core/ops.h), in the layout BTHD:
// it reads each head's columns of Q, K, V in place and writes Z in the same
// layout, so splitting and merging the heads are views, not copies. Its
// implementation (AttentionImpl: Composed, Dense or Flash) is chosen per module
// at run time; all three compute the same function, which the tests check in
// the output and every gradient.
#pragma once
#include "nn/layers.h"
#include "nn/linear.h"
#include "nn/module.h"

namespace ag::nn {

using ag::AttentionImpl;

class MultiHeadSelfAttention : public Module {
 public:
  // Submodules w_q, w_k, w_v, w_o: Linear(C, C) with biases. `dropout` applies
  // to the output of w_o (residual dropout, as nanoGPT).
  MultiHeadSelfAttention(int64_t C, int64_t H, bool causal = true, double dropout = 0.0,
                         AttentionImpl impl = AttentionImpl::Dense, Generator* gen = nullptr);

  // X [B, T, C] -> O [B, T, C]
  Tensor forward(const Tensor& x);

  void set_impl(AttentionImpl impl) { impl_ = impl; }
  // Which earlier keys each query sees (window, dilation, global, random blocks):
  // part of the function the model computes. Default: all of them.
  void set_pattern(const SparsePattern& pattern) { pattern_ = pattern; }
  const SparsePattern& pattern() const { return pattern_; }
  AttentionImpl impl() const { return impl_; }

  // With keep_attention on, each forward stores A [B, H, T, T] (detached) for
  // attention() to return, so every head's pattern can be inspected. Flash never
  // forms A, so a Flash module computes those forwards with Dense (the same
  // function; only the memory differs).
  void set_keep_attention(bool keep) { keep_attention_ = keep; }
  const Tensor& attention() const { return attention_; }

 private:
  int64_t H_;
  bool causal_;
  AttentionImpl impl_;
  SparsePattern pattern_;
  bool keep_attention_ = false;
  Tensor attention_;
  std::shared_ptr<Linear> w_q_, w_k_, w_v_, w_o_;
  std::shared_ptr<Dropout> dropout_;
};

}  // namespace ag::nn
