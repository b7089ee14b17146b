// Multi-head causal self-attention, in the users' notation:
//   Q = X W_Q,  K = X W_K,  V = X W_V          X [B, T, C], W_* [C, C]
//   split heads: [B, T, C] -> [B, T, H, d_h] -> [B, H, T, d_h],  d_h = C / H
//   S = Q Kᵀ / √d_h,  A = softmax(S + M),  Z = A V   (per head; M the causal mask)
//   O = Concat(head_1..head_H) W_O                 Z merged back to [B, T, C]
// The residual (Y = X + O) is added by the Block, not here.
//
// Two implementations of the per-head part, switchable at run time:
//   Composed: core ops only (matmul, transpose, scale, + M, softmax, matmul);
//             each has its own backward, so this is the readable reference.
//   Fused:    ag::scaled_dot_product_attention, one op with a hand-derived backward.
// Tests check that the two agree in the output and every gradient.
#pragma once
#include "nn/layers.h"
#include "nn/linear.h"
#include "nn/module.h"

namespace ag::nn {

enum class AttentionImpl { Composed, Fused };
}  // namespace ag::nn
namespace ag {
template <> struct EnumNames<nn::AttentionImpl> {
  static constexpr std::pair<nn::AttentionImpl, const char*> values[] = {{nn::AttentionImpl::Composed, "composed"},
                                                                          {nn::AttentionImpl::Fused, "fused"}};
};
}  // namespace ag
namespace ag::nn {

class MultiHeadSelfAttention : public Module {
 public:
  // Submodules w_q, w_k, w_v, w_o: Linear(C, C) with biases. `dropout` applies
  // to the output of w_o (residual dropout, as nanoGPT).
  MultiHeadSelfAttention(int64_t C, int64_t H, bool causal = true, double dropout = 0.0,
                         AttentionImpl impl = AttentionImpl::Fused, Generator* gen = nullptr);

  // X [B, T, C] -> O [B, T, C]
  Tensor forward(const Tensor& x);

  void set_impl(AttentionImpl impl) { impl_ = impl; }
  AttentionImpl impl() const { return impl_; }

  // With keep_attention on, each forward stores A [B, H, T, T] (detached) for
  // attention() to return, so every head's pattern can be inspected.
  void set_keep_attention(bool keep) { keep_attention_ = keep; }
  const Tensor& attention() const { return attention_; }

 private:
  // q, k, v [B, H, T, d_h] -> Z [B, H, T, d_h]; A [B, H, T, T] into *attention if given.
  Tensor composed(const Tensor& q, const Tensor& k, const Tensor& v, Tensor* attention) const;

  int64_t H_;
  bool causal_;
  AttentionImpl impl_;
  bool keep_attention_ = false;
  Tensor attention_;
  std::shared_ptr<Linear> w_q_, w_k_, w_v_, w_o_;
  std::shared_ptr<Dropout> dropout_;
};

}  // namespace ag::nn
