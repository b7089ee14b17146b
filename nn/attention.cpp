#include "nn/attention.h"

#include "core/autograd.h"

namespace ag::nn {

MultiHeadSelfAttention::MultiHeadSelfAttention(const Config& config, Generator* gen)
    : H_(config.H), H_kv_(config.H_kv == 0 ? config.H : config.H_kv) {
  const int64_t C = config.C, H = H_, H_kv = H_kv_;
  AG_CHECK(H > 0 && C > 0 && C % H == 0, "MultiHeadSelfAttention: C = " << C << " is not a multiple of H = " << H);
  AG_CHECK(H_kv > 0 && H % H_kv == 0,
           "MultiHeadSelfAttention: H = " << H << " is not a multiple of H_kv = " << H_kv);
  const int64_t d_h = C / H, kv_width = H_kv * d_h;  // H_kv heads of d_h columns
  spec_ = {.function = config.function, .causal = config.causal, .layout = AttentionLayout::BTHD,
           .position = config.position, .rope_base = config.rope_base, .impl = config.impl, .pattern = config.pattern,
           .feature_map = config.feature_map};
  if (attention_function_traits(config.function).reads_feature_map && config.feature_map == FeatureMap::Favor)
    omega_ = favor_projection(config.n_features, d_h, config.seed, config.stream);
  w_q_ = register_module("w_q", std::make_shared<Linear>(Linear::Config{.in = C, .out = C}, gen));
  w_k_ = register_module("w_k", std::make_shared<Linear>(Linear::Config{.in = C, .out = kv_width}, gen));
  w_v_ = register_module("w_v", std::make_shared<Linear>(Linear::Config{.in = C, .out = kv_width}, gen));
  w_o_ = register_module("w_o", std::make_shared<Linear>(Linear::Config{.in = C, .out = C}, gen));
  dropout_ = register_module("dropout", std::make_shared<Dropout>(config.dropout));
}

MultiHeadSelfAttention::Heads MultiHeadSelfAttention::project(const Tensor& x) {
  const int64_t C = w_q_->weight().size(0);
  AG_CHECK(x.dim() == 3 && x.size(2) == C, "MultiHeadSelfAttention: input " << describe(x) << " is not [B, T, " << C << "]");
  const int64_t B = x.size(0), T = x.size(1), d_h = C / H_;
  // [B, T, H·d_h] viewed as [B, T, H, d_h]: head h reads columns h·d_h … (h+1)·d_h − 1 in place.
  return {w_q_->forward(x).reshape({B, T, H_, d_h}), w_k_->forward(x).reshape({B, T, H_kv_, d_h}),
          w_v_->forward(x).reshape({B, T, H_kv_, d_h})};
}

// Q [B, T, H, d_h], K, V [B, T, H_kv, d_h] -> O [B, T, C], through the one attention op.
Tensor MultiHeadSelfAttention::attend(const Heads& heads, LayerKVCache* cache) {
  AttentionSpec spec = spec_;
  spec.cache = cache;
  if (omega_.defined()) {
    if (!omega_here_.defined() || omega_here_.dtype() != heads.q.dtype() || omega_here_.device() != heads.q.device())
      omega_here_ = omega_.to(heads.q.dtype()).to(heads.q.device());  // once per dtype and device, not every forward
    spec.omega = omega_here_;
  }
  if (keep_attention_ && spec.impl == AttentionImpl::Flash) spec.impl = AttentionImpl::Dense;  // flash has no A
  AttentionInternals internals;
  const Tensor Z = ag::attention(heads.q, heads.k, heads.v, spec, keep_attention_ ? &internals : nullptr);
  attention_ = internals.probabilities;  // undefined unless kept: never a stale A from an earlier forward
  return output(Z);
}

// Z [B, T, H, d_h] -> O [B, T, C]: the heads gated, merged and projected.
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

Tensor MultiHeadSelfAttention::forward(const Tensor& x) { return attend(project(x), nullptr); }

Tensor MultiHeadSelfAttention::forward_cached(const Tensor& x, LayerKVCache& cache) {
  return attend(project(x), &cache);
}

void MultiHeadSelfAttention::set_head_gates(const Tensor& gates) {
  AG_CHECK(!gates.defined() || gates.shape() == Shape{H_},
           "MultiHeadSelfAttention: head gates " << describe(gates) << " are not [H = " << H_ << "]");
  head_gates_ = gates;
}

}  // namespace ag::nn
