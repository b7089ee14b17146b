#include "nn/attention.h"

namespace ag::nn {

MultiHeadSelfAttention::MultiHeadSelfAttention(int64_t C, int64_t H, bool causal, double dropout,
                                               AttentionImpl impl, Generator* gen)
    : H_(H), causal_(causal), impl_(impl) {
  AG_CHECK(H > 0 && C % H == 0, "MultiHeadSelfAttention: C = " << C << " is not a multiple of H = " << H);
  w_q_ = register_module("w_q", std::make_shared<Linear>(C, C, true, gen));
  w_k_ = register_module("w_k", std::make_shared<Linear>(C, C, true, gen));
  w_v_ = register_module("w_v", std::make_shared<Linear>(C, C, true, gen));
  w_o_ = register_module("w_o", std::make_shared<Linear>(C, C, true, gen));
  dropout_ = register_module("dropout", std::make_shared<Dropout>(dropout));
}

void MultiHeadSelfAttention::use_linear_attention(const LinearOptions& options) {
  linear_ = options;
  omega_ = options.feature_map == FeatureMap::Favor
               ? favor_projection(options.n_features, w_q_->weight().size(0) / H_, options.seed, options.stream)
               : Tensor();
  omega_here_ = Tensor();
}

LinearAttentionSpec MultiHeadSelfAttention::linear_spec(const Tensor& like) {
  if (omega_.defined() && (!omega_here_.defined() || omega_here_.dtype() != like.dtype() ||
                           omega_here_.device() != like.device()))
    omega_here_ = omega_.to(like.dtype()).to(like.device());  // once per dtype and device, not every forward
  return {.causal = causal_, .feature_map = linear_->feature_map, .omega = omega_here_};
}

Tensor MultiHeadSelfAttention::forward_recurrent(const Tensor& x, LinearAttentionState& state) {
  AG_CHECK(linear_, "MultiHeadSelfAttention: only linear attention runs as a recurrence (softmax recomputes, or needs a KV cache)");
  AG_CHECK(x.dim() == 3 && x.size(2) == w_q_->weight().size(0),
           "MultiHeadSelfAttention: input " << describe(x) << " is not [B, T, " << w_q_->weight().size(0) << "]");
  return linear_forward(x, &state);
}

// Q, K, V as for softmax, then linear_attention per head (or, with `state`,
// linear_attention_step position by position), then W_O.
Tensor MultiHeadSelfAttention::linear_forward(const Tensor& x, LinearAttentionState* state) {
  AG_CHECK(!keep_attention_, "MultiHeadSelfAttention: linear attention forms no attention matrix to keep");
  const int64_t B = x.size(0), T = x.size(1), C = x.size(2), d_h = C / H_;
  // linear_attention reads [B, H, T, d_h]: the heads first (a copy each way)
  const auto heads_first = [&](const Tensor& t) { return permute(t.reshape({B, T, H_, d_h}), {0, 2, 1, 3}); };
  const Tensor q = heads_first(w_q_->forward(x)), k = heads_first(w_k_->forward(x)), v = heads_first(w_v_->forward(x));
  const LinearAttentionSpec spec = linear_spec(x);
  Tensor Z;  // [B, H, T, d_h]
  if (state) {
    std::vector<Tensor> rows;
    for (int64_t t = 0; t < T; ++t)
      rows.push_back(
          linear_attention_step(slice(q, 2, t, t + 1), slice(k, 2, t, t + 1), slice(v, 2, t, t + 1), spec, *state));
    Z = concat(rows, 2);
  } else {
    Z = linear_attention(q, k, v, spec);
  }
  return dropout_->forward(w_o_->forward(permute(Z, {0, 2, 1, 3}).reshape({B, T, C})));  // O [B, T, C]
}

Tensor MultiHeadSelfAttention::forward(const Tensor& x) {
  AG_CHECK(x.dim() == 3 && x.size(2) == w_q_->weight().size(0),
           "MultiHeadSelfAttention: input " << describe(x) << " is not [B, T, "
                                            << w_q_->weight().size(0) << "]");
  if (linear_) return linear_forward(x, nullptr);
  const int64_t B = x.size(0), T = x.size(1), C = x.size(2), d_h = C / H_;
  // [B, T, C] viewed as [B, T, H, d_h]: head h reads columns h·d_h … (h+1)·d_h − 1 in place.
  const auto heads = [&](const Tensor& t) { return t.reshape({B, T, H_, d_h}); };
  AttentionSpec spec{.causal = causal_, .layout = AttentionLayout::BTHD, .impl = impl_};
  if (keep_attention_ && impl_ == AttentionImpl::Flash) spec.impl = AttentionImpl::Dense;  // flash has no A
  AttentionInternals internals;
  const Tensor Z = ag::attention(heads(w_q_->forward(x)), heads(w_k_->forward(x)), heads(w_v_->forward(x)), spec,
                                 keep_attention_ ? &internals : nullptr);  // [B, T, H, d_h]
  attention_ = internals.probabilities;  // undefined unless kept: never a stale A from an earlier forward
  // Concat(head_1..head_H) is Z viewed as [B, T, C].
  return dropout_->forward(w_o_->forward(Z.reshape({B, T, C})));  // O [B, T, C]
}

}  // namespace ag::nn
