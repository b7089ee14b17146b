#include "nn/attention.h"

#include <cmath>
#include <vector>

#include "core/autograd.h"

namespace ag::nn {

MultiHeadSelfAttention::MultiHeadSelfAttention(const Config& config, Generator* gen)
    : H_(config.H), H_kv_(config.H_kv == 0 ? config.H : config.H_kv) {
  const int64_t C = config.C, H = H_, H_kv = H_kv_;
  AG_CHECK(H > 0 && C > 0 && C % H == 0, "MultiHeadSelfAttention: C = " << C << " is not a multiple of H = " << H);
  AG_CHECK(H_kv > 0 && H % H_kv == 0,
           "MultiHeadSelfAttention: H = " << H << " is not a multiple of H_kv = " << H_kv);
  const int64_t d_h = C / H, kv_width = H_kv * d_h;  // H_kv heads of d_h columns
  // The function's own parameters from the config's; ω and ssd's Δ, a_log, D are added per call (attend).
  AttentionParams function = SoftmaxAttention{.impl = config.impl, .pattern = config.pattern};
  if (config.function == AttentionFunction::Linear) function = LinearAttention{.feature_map = config.feature_map};
  if (config.function == AttentionFunction::Ssd) function = SsdAttention{};
  spec_ = {.function = function, .causal = config.causal, .layout = AttentionLayout::BTHD,
           .position = config.position, .rope_base = config.rope_base, .alibi_slopes = config.alibi_slopes};
  if (config.function == AttentionFunction::Linear && config.feature_map == FeatureMap::Favor)
    omega_ = favor_projection(config.n_features, d_h, config.seed, config.stream);
  w_q_ = register_module("w_q", std::make_shared<Linear>(Linear::Config{.in = C, .out = C}, gen));
  w_k_ = register_module("w_k", std::make_shared<Linear>(Linear::Config{.in = C, .out = kv_width}, gen));
  w_v_ = register_module("w_v", std::make_shared<Linear>(Linear::Config{.in = C, .out = kv_width}, gen));
  w_o_ = register_module("w_o", std::make_shared<Linear>(Linear::Config{.in = C, .out = C}, gen));
  dropout_ = register_module("dropout", std::make_shared<Dropout>(config.dropout));
  if (config.function != AttentionFunction::Ssd) return;
  AG_CHECK(config.ssd_conv >= 0, "MultiHeadSelfAttention: ssd_conv " << config.ssd_conv << " must be >= 0 (0: no convolution)");
  if (config.ssd_conv > 0)
    conv_ = register_module("conv", std::make_shared<CausalConv1d>(
                                        CausalConv1d::Config{.channels = C + 2 * kv_width, .width = config.ssd_conv}, gen));
  w_dt_ = register_module("w_dt", std::make_shared<Linear>(Linear::Config{.in = C, .out = H}, gen));
  // Mamba's initialisation: decay rates exp(a_log) ∈ [1, 16] and steps Δ log-uniform in [1e-3, 0.1]
  // at x = 0, so that a head keeps a = exp(−rate·Δ) between e^−1.6 and e^−0.001 per step: memories
  // from under one position to about a thousand (docs/backprop.md §30).
  const Tensor rate = Tensor::uniform({H}, 1.0, 16.0, DType::Float32, gen);
  a_log_ = register_parameter("a_log", log(rate).detach());
  const Tensor step = exp(Tensor::uniform({H}, std::log(1e-3), std::log(0.1), DType::Float64, gen));
  std::vector<double> inverse_softplus = step.to_vector();  // softplus⁻¹(Δ) = Δ + log(1 − e^−Δ)
  for (double& x : inverse_softplus) x += std::log(-std::expm1(-x));
  const Tensor dt_bias = Tensor::from_vector(inverse_softplus, {H});
  std::vector<NamedTensor> dt_params = w_dt_->named_parameters();
  for (NamedTensor& p : dt_params)
    if (p.name == "bias") p.tensor = dt_bias;
  w_dt_->load_state(dt_params);
  d_skip_ = register_parameter("d_skip", Tensor::ones({H}));
  if (config.ssd_gate) w_g_ = register_module("w_g", std::make_shared<Linear>(Linear::Config{.in = C, .out = C}, gen));
}

bool MultiHeadSelfAttention::keeps_own_init(std::string_view name) {
  return name == "a_log" || name == "d_skip" || name == "w_dt.bias" || name == "conv.weight" || name == "conv.bias";
}

MultiHeadSelfAttention::Heads MultiHeadSelfAttention::project(const Tensor& x, LayerKVCache* cache) {
  const int64_t C = w_q_->weight().size(0);
  AG_CHECK(x.dim() == 3 && x.size(2) == C, "MultiHeadSelfAttention: input " << describe(x) << " is not [B, T, " << C << "]");
  const int64_t B = x.size(0), T = x.size(1), d_h = C / H_;
  Tensor q = w_q_->forward(x), k = w_k_->forward(x), v = w_v_->forward(x);
  if (conv_) {  // ssd: u' = SiLU(conv([q | k | v])), split back
    const Tensor u = concat({q, k, v}, 2);
    const std::vector<Tensor> parts =
        split(silu(cache            ? conv_->forward_cached(u, cache->conv)
                   : spec_.context ? conv_->forward(u, *spec_.context)
                                   : conv_->forward(u)),
              {C, k.size(2), v.size(2)}, 2);
    q = parts[0], k = parts[1], v = parts[2];
  }
  // [B, T, H·d_h] viewed as [B, T, H, d_h]: head h reads columns h·d_h … (h+1)·d_h − 1 in place.
  Heads heads{q.reshape({B, T, H_, d_h}), k.reshape({B, T, H_kv_, d_h}), v.reshape({B, T, H_kv_, d_h})};
  if (w_dt_) heads.dt = softplus(w_dt_->forward(x));  // Δ [B, T, H] > 0
  if (w_g_) heads.gate = silu(w_g_->forward(x));
  return heads;
}

// Q [B, T, H, d_h], K, V [B, T, H_kv, d_h] -> O [B, T, C], through the one attention op.
Tensor MultiHeadSelfAttention::attend(const Heads& heads, LayerKVCache* cache) {
  AttentionSpec spec = spec_;
  spec.cache = cache;
  if (auto* ssd = std::get_if<SsdAttention>(&spec.function)) {
    ssd->dt = heads.dt;
    ssd->a_log = a_log_;
    ssd->d_skip = d_skip_;
  }
  if (omega_.defined()) {
    if (!omega_here_.defined() || omega_here_.dtype() != heads.q.dtype() || omega_here_.device() != heads.q.device())
      omega_here_ = omega_.to(heads.q.dtype()).to(heads.q.device());  // once per dtype and device, not every forward
    std::get<LinearAttention>(spec.function).omega = omega_here_;
  }
  if (auto* softmax = std::get_if<SoftmaxAttention>(&spec.function); softmax && keep_attention_ &&
                                                                      softmax->impl == AttentionImpl::Flash)
    softmax->impl = AttentionImpl::Dense;  // flash has no A
  AttentionInternals internals;
  const Tensor Z = ag::attention(heads.q, heads.k, heads.v, spec, keep_attention_ ? &internals : nullptr);
  attention_ = internals.probabilities;  // undefined unless kept: never a stale A from an earlier forward
  queries_ = keep_attention_ ? heads.q.detach() : Tensor();
  keys_ = keep_attention_ ? heads.k.detach() : Tensor();
  values_ = keep_attention_ ? heads.v.detach() : Tensor();
  decays_ = keep_attention_ && heads.dt.defined() ? exp(-(exp(a_log_.detach()) * heads.dt.detach())) : Tensor();
  return output(Z, heads.gate);
}

// Z [B, T, H, d_h] -> O [B, T, C]: the heads gated, merged (and scaled by ssd's gate) and projected.
Tensor MultiHeadSelfAttention::output(const Tensor& Z, const Tensor& gate) {
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

const SparsePattern& MultiHeadSelfAttention::pattern() const {
  static const SparsePattern every_key;
  const auto* softmax = std::get_if<SoftmaxAttention>(&spec_.function);
  return softmax ? softmax->pattern : every_key;
}

AttentionImpl MultiHeadSelfAttention::impl() const {
  const auto* softmax = std::get_if<SoftmaxAttention>(&spec_.function);
  return softmax ? softmax->impl : kDefaultAttentionImpl;
}

Tensor MultiHeadSelfAttention::forward(const Tensor& x) { return attend(project(x, nullptr), nullptr); }

Tensor MultiHeadSelfAttention::forward_cached(const Tensor& x, LayerKVCache& cache) {
  return attend(project(x, &cache), &cache);
}

void MultiHeadSelfAttention::set_head_gates(const Tensor& gates) {
  AG_CHECK(!gates.defined() || gates.shape() == Shape{H_},
           "MultiHeadSelfAttention: head gates " << describe(gates) << " are not [H = " << H_ << "]");
  head_gates_ = gates;
}

}  // namespace ag::nn
