#include "nn/ssd.h"

#include <cmath>
#include <vector>

#include "core/autograd.h"

namespace ag::nn {

SsdSelfAttention::SsdSelfAttention(const AttentionConfig& config, const Options& options, Generator* gen)
    : AttentionMixer(config, gen) {
  spec_.function = SsdAttention{};
  const int64_t C = config.C, H = H_, kv_width = H_kv_ * d_h_;
  AG_CHECK(options.conv >= 0, "MultiHeadSelfAttention: ssd_conv " << options.conv << " must be >= 0 (0: no convolution)");
  if (options.conv > 0)
    conv_ = register_module("conv", std::make_shared<CausalConv1d>(
                                        CausalConv1d::Config{.channels = C + 2 * kv_width, .width = options.conv}, gen));
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
  if (options.gate) w_g_ = register_module("w_g", std::make_shared<Linear>(Linear::Config{.in = C, .out = C}, gen));
}

int64_t SsdSelfAttention::own_forward_flops(const AttentionConfig& config, const Options& options, int64_t BT) {
  const int64_t C = config.C, H = config.H, H_kv = config.H_kv == 0 ? H : config.H_kv, kv_width = H_kv * (C / H);
  return 2 * BT * C * H + (options.gate ? 2 * BT * C * C : 0) + 2 * BT * options.conv * (C + 2 * kv_width);
}

bool SsdSelfAttention::keeps_own_init(std::string_view name) const {
  return name == "a_log" || name == "d_skip" || name == "w_dt.bias" || name == "conv.weight" || name == "conv.bias";
}

Tensor SsdSelfAttention::mix(const Tensor& x, LayerKVCache* cache) {
  Tensor q = project_q(x), k = project_k(x), v = project_v(x);
  if (conv_) {  // u' = SiLU(conv([q | k | v])), split back
    const Tensor u = concat({q, k, v}, 2);
    const std::vector<Tensor> parts =
        split(silu(cache            ? conv_->forward_cached(u, cache->conv)
                   : spec_.context ? conv_->forward(u, *spec_.context)
                                   : conv_->forward(u)),
              {q.size(2), k.size(2), v.size(2)}, 2);
    q = parts[0], k = parts[1], v = parts[2];
  }
  const Heads heads = split_heads(q, k, v);
  const Tensor dt = softplus(w_dt_->forward(x));                 // Δ [B, T, H] > 0
  const Tensor gate = w_g_ ? silu(w_g_->forward(x)) : Tensor();  // [B, T, C]
  AttentionSpec spec = spec_;
  spec.cache = cache;
  SsdAttention& ssd = std::get<SsdAttention>(spec.function);
  ssd.dt = dt;
  ssd.a_log = a_log_;
  ssd.d_skip = d_skip_;
  MixerRecord record;
  const Tensor Z = attend(heads, spec, &record);
  if (probe()) record.decays = exp(-(exp(a_log_.detach()) * dt.detach()));  // a_t [B, T, H]
  report(record);
  return output(Z, gate);
}

// The state S [H, d_h, d_h] and the convolution's last W − 1 inputs of C + 2·H_kv·d_h channels.
int64_t SsdSelfAttention::state_floats(int64_t) const {
  const int64_t conv = conv_ ? (conv_->named_parameters().front().tensor.size(0) - 1) * (H_ * d_h_ + 2 * H_kv_ * d_h_) : 0;
  return H_ * d_h_ * d_h_ + conv;
}

}  // namespace ag::nn
