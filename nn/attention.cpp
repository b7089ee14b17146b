#include "nn/attention.h"

#include "core/autograd.h"

namespace ag::nn {

AttentionMixer::AttentionMixer(const AttentionConfig& config, Generator* gen)
    : H_(config.H), H_kv_(config.H_kv == 0 ? config.H : config.H_kv) {
  const int64_t C = config.C, H = H_, H_kv = H_kv_;
  AG_CHECK(H > 0 && C > 0 && C % H == 0, "MultiHeadSelfAttention: C = " << C << " is not a multiple of H = " << H);
  AG_CHECK(H_kv > 0 && H % H_kv == 0,
           "MultiHeadSelfAttention: H = " << H << " is not a multiple of H_kv = " << H_kv);
  d_h_ = C / H;
  const int64_t kv_width = H_kv * d_h_;  // H_kv heads of d_h columns
  spec_ = {.causal = config.causal, .layout = AttentionLayout::BTHD, .position = config.position,
           .rope_base = config.rope_base, .alibi_slopes = config.alibi_slopes};
  w_q_ = register_module("w_q", std::make_shared<Linear>(Linear::Config{.in = C, .out = C}, gen));
  w_k_ = register_module("w_k", std::make_shared<Linear>(Linear::Config{.in = C, .out = kv_width}, gen));
  w_v_ = register_module("w_v", std::make_shared<Linear>(Linear::Config{.in = C, .out = kv_width}, gen));
  w_o_ = register_module("w_o", std::make_shared<Linear>(Linear::Config{.in = C, .out = C}, gen));
  dropout_ = register_module("dropout", std::make_shared<Dropout>(config.dropout));
}

Tensor AttentionMixer::project_q(const Tensor& x) const {
  const int64_t C = H_ * d_h_;
  AG_CHECK(x.dim() == 3 && x.size(2) == C, "MultiHeadSelfAttention: input " << describe(x) << " is not [B, T, " << C << "]");
  return w_q_->forward(x);
}
Tensor AttentionMixer::project_k(const Tensor& x) const { return w_k_->forward(x); }
Tensor AttentionMixer::project_v(const Tensor& x) const { return w_v_->forward(x); }

// [B, T, H·d_h] viewed as [B, T, H, d_h]: head h reads columns h·d_h … (h+1)·d_h − 1 in place.
AttentionMixer::Heads AttentionMixer::split_heads(const Tensor& q, const Tensor& k, const Tensor& v) const {
  const int64_t B = q.size(0), T = q.size(1);
  return {q.reshape({B, T, H_, d_h_}), k.reshape({B, T, H_kv_, d_h_}), v.reshape({B, T, H_kv_, d_h_})};
}

// Q [B, T, H, d_h], K, V [B, T, H_kv, d_h] -> Z [B, T, H, d_h], through the one attention op.
Tensor AttentionMixer::attend(const Heads& heads, const AttentionSpec& spec, MixerRecord* record) const {
  AttentionInternals internals;
  const Tensor Z = ag::attention(heads.q, heads.k, heads.v, spec, probe() ? &internals : nullptr);
  if (probe()) *record = {.weights = internals.probabilities, .queries = heads.q.detach(), .keys = heads.k.detach(),
                          .values = heads.v.detach(), .decays = {}};
  return Z;
}

void AttentionMixer::report(const MixerRecord& record) const {
  if (probe()) probe()(record);
}

// Z [B, T, H, d_h] -> O [B, T, C]: the heads gated, merged (and scaled by ssd's gate) and projected.
Tensor AttentionMixer::output(const Tensor& Z, const Tensor& gate) {
  // A pruned model's constant gates follow the model to its dtype and device once (a copy per forward
  // would upload them every time); gates that require grad are made there by their owner.
  if (head_gates_.defined() && (head_gates_.dtype() != Z.dtype() || head_gates_.device() != Z.device()))
    head_gates_ = head_gates_.detach().to(Z.dtype()).to(Z.device());
  // Concat(g_1·head_1 .. g_H·head_H) is the gated Z viewed as [B, T, C].
  const Tensor gated = head_gates_.defined() ? Z * head_gates_.reshape({1, 1, H_, 1}) : Z;
  const int64_t B = Z.size(0), T = Z.size(1), C = Z.size(2) * Z.size(3);
  const Tensor merged = gated.reshape({B, T, C});
  return dropout_->forward(w_o_->forward(gate.defined() ? merged * gate : merged));  // O [B, T, C]
}

void AttentionMixer::set_head_gates(const Tensor& gates) {
  AG_CHECK(!gates.defined() || gates.shape() == Shape{H_},
           "MultiHeadSelfAttention: head gates " << describe(gates) << " are not [H = " << H_ << "]");
  head_gates_ = gates;
}

// --- softmax ------------------------------------------------------------------------

MultiHeadSelfAttention::MultiHeadSelfAttention(const AttentionConfig& config, const Options& options, Generator* gen)
    : AttentionMixer(config, gen) {
  spec_.function = SoftmaxAttention{.impl = options.impl, .pattern = options.pattern};
}

Tensor MultiHeadSelfAttention::mix(const Tensor& x, LayerKVCache* cache) {
  const Tensor q = project_q(x), k = project_k(x), v = project_v(x);
  const Heads heads = split_heads(q, k, v);
  AttentionSpec spec = spec_;
  spec.cache = cache;
  SoftmaxAttention& softmax = std::get<SoftmaxAttention>(spec.function);
  if (probe() && softmax.impl == AttentionImpl::Flash) softmax.impl = AttentionImpl::Dense;  // flash has no A
  MixerRecord record;
  const Tensor Z = attend(heads, spec, &record);
  report(record);
  return output(Z);
}

// K and V, H_kv heads of d_h, for each position the cache holds: all of them, or a rolling cache's capacity.
int64_t MultiHeadSelfAttention::state_floats(int64_t positions) const {
  const int64_t held = cache_rolls() ? rolling_cache_capacity(1) : positions;
  return 2 * held * H_kv_ * d_h_;
}

int64_t MultiHeadSelfAttention::rolling_cache_capacity(int64_t T_new) const {
  return ag::rolling_cache_capacity(pattern(), T_new);
}

}  // namespace ag::nn
