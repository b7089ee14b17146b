#include "nn/attention.h"

#include "core/autograd.h"

namespace ag::nn {

MultiHeadSelfAttention::MultiHeadSelfAttention(int64_t C, int64_t H, int64_t H_kv, bool causal, double dropout,
                                               AttentionImpl impl, Generator* gen)
    : H_(H), H_kv_(H_kv), causal_(causal), impl_(impl) {
  AG_CHECK(H > 0 && C % H == 0, "MultiHeadSelfAttention: C = " << C << " is not a multiple of H = " << H);
  AG_CHECK(H_kv > 0 && H % H_kv == 0,
           "MultiHeadSelfAttention: H = " << H << " is not a multiple of H_kv = " << H_kv);
  const int64_t kv_width = H_kv * (C / H);  // H_kv heads of d_h columns
  w_q_ = register_module("w_q", std::make_shared<Linear>(C, C, true, gen));
  w_k_ = register_module("w_k", std::make_shared<Linear>(C, kv_width, true, gen));
  w_v_ = register_module("w_v", std::make_shared<Linear>(C, kv_width, true, gen));
  w_o_ = register_module("w_o", std::make_shared<Linear>(C, C, true, gen));
  dropout_ = register_module("dropout", std::make_shared<Dropout>(dropout));
}

void MultiHeadSelfAttention::use_linear_attention(const LinearOptions& options) {
  AG_CHECK(H_kv_ == H_, "MultiHeadSelfAttention: linear attention with grouped K, V heads (H_kv = "
                            << H_kv_ << " < H = " << H_ << ") is not implemented");
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

// Q, K, V as for softmax, then linear_attention per head (or, with `state`,
// linear_attention_step position by position), then the gates and W_O as for softmax.
Tensor MultiHeadSelfAttention::linear_forward(const Tensor& x, LinearAttentionState* state) {
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
  // Linear attention forms no A; kept, it is the one its output implies (Z = A V), formed for inspection.
  attention_ = keep_attention_ && !state ? linear_attention_weights(q, k, spec).detach() : Tensor();
  return output(permute(Z, {0, 2, 1, 3}));
}

// q [B, Tq, H, d_h], k, v [B, Tk, H_kv, d_h] -> O [B, Tq, C].
Tensor MultiHeadSelfAttention::attend(const Tensor& q, const Tensor& k, const Tensor& v, AttentionSpec spec) {
  spec.causal = causal_;
  spec.layout = AttentionLayout::BTHD;
  spec.impl = impl_;
  spec.pattern = pattern_;  // key positions: a decoded query with q_offset sees what it saw in training
  if (keep_attention_ && impl_ == AttentionImpl::Flash) spec.impl = AttentionImpl::Dense;  // flash has no A
  AttentionInternals internals;
  const Tensor Z = ag::attention(q, k, v, spec, keep_attention_ ? &internals : nullptr);  // [B, Tq, H, d_h]
  attention_ = internals.probabilities;  // undefined unless kept: never a stale A from an earlier forward
  return output(Z);
}

// Z [B, T, H, d_h] -> O [B, T, C], either attention function's heads gated, merged and projected.
Tensor MultiHeadSelfAttention::output(const Tensor& Z) {
  // A pruned model's constant gates follow the model to its dtype and device once (a copy per forward
  // would upload them every time); gates that require grad are made there by their owner.
  if (head_gates_.defined() && (head_gates_.dtype() != Z.dtype() || head_gates_.device() != Z.device()))
    head_gates_ = head_gates_.detach().to(Z.dtype()).to(Z.device());
  // Concat(g_1·head_1 .. g_H·head_H) is the gated Z viewed as [B, T, C].
  const Tensor gated = head_gates_.defined() ? Z * head_gates_.reshape({1, 1, H_, 1}) : Z;
  const int64_t B = Z.size(0), T = Z.size(1), C = Z.size(2) * Z.size(3);
  return dropout_->forward(w_o_->forward(gated.reshape({B, T, C})));  // O [B, T, C]
}

Tensor MultiHeadSelfAttention::forward(const Tensor& x) {
  AG_CHECK(x.dim() == 3 && x.size(2) == w_q_->weight().size(0),
           "MultiHeadSelfAttention: input " << describe(x) << " is not [B, T, "
                                            << w_q_->weight().size(0) << "]");
  if (linear_) return linear_forward(x, nullptr);
  const int64_t B = x.size(0), T = x.size(1), C = x.size(2), d_h = C / H_;
  // [B, T, H·d_h] viewed as [B, T, H, d_h]: head h reads columns h·d_h … (h+1)·d_h − 1 in place.
  const auto heads = [&](const Tensor& t, int64_t H) { return t.reshape({B, T, H, d_h}); };
  return attend(heads(w_q_->forward(x), H_), heads(w_k_->forward(x), H_kv_), heads(w_v_->forward(x), H_kv_), {});
}

Tensor MultiHeadSelfAttention::forward_cached(const Tensor& x, LayerKVCache& cache, int64_t start) {
  AG_CHECK(causal_, "MultiHeadSelfAttention: a KV cache needs causal attention (a new token would change old outputs)");
  AG_CHECK(!grad_enabled(), "MultiHeadSelfAttention: forward_cached is for generation: run it under NoGradGuard");
  AG_CHECK(x.dim() == 3 && x.size(2) == w_q_->weight().size(0),
           "MultiHeadSelfAttention: input " << describe(x) << " is not [B, T, "
                                            << w_q_->weight().size(0) << "]");
  const int64_t B = x.size(0), T_new = x.size(1), C = x.size(2), d_h = C / H_;
  if (linear_) return linear_forward(x, &cache.linear);  // the state holds positions 0 … start − 1
  AG_CHECK(cache.k.dim() == 4 && cache.k.size(0) == B && cache.k.size(2) == H_kv_ && cache.k.size(3) == d_h,
           "MultiHeadSelfAttention: cache " << describe(cache.k) << " is not [" << B << ", T_max, " << H_kv_ << ", "
                                            << d_h << "]");
  cache.write(w_k_->forward(x), w_v_->forward(x), start);
  // Query i sits at position start + i: bottom-right aligned (q_offset = Tk − Tq) over Tk = start + T_new keys.
  return attend(w_q_->forward(x).reshape({B, T_new, H_, d_h}), cache.k, cache.v, {.kv_length = start + T_new});
}

void MultiHeadSelfAttention::set_head_gates(const Tensor& gates) {
  AG_CHECK(!gates.defined() || gates.shape() == Shape{H_},
           "MultiHeadSelfAttention: head gates " << describe(gates) << " are not [H = " << H_ << "]");
  head_gates_ = gates;
}

}  // namespace ag::nn
