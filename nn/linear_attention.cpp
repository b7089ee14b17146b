#include "nn/linear_attention.h"

namespace ag::nn {

LinearSelfAttention::LinearSelfAttention(const AttentionConfig& config, const Options& options, Generator* gen)
    : AttentionMixer(config, gen) {
  spec_.function = LinearAttention{.feature_map = options.feature_map};
  if (options.feature_map == FeatureMap::Favor)
    omega_ = favor_projection(options.n_features, d_h_, options.seed, options.stream);
}

Tensor LinearSelfAttention::mix(const Tensor& x, LayerKVCache* cache) {
  const Tensor q = project_q(x), k = project_k(x), v = project_v(x);
  const Heads heads = split_heads(q, k, v);
  AttentionSpec spec = spec_;
  spec.cache = cache;
  if (omega_.defined()) {
    if (!omega_here_.defined() || omega_here_.dtype() != heads.q.dtype() || omega_here_.device() != heads.q.device())
      omega_here_ = omega_.to(heads.q.dtype()).to(heads.q.device());  // once per dtype and device, not every forward
    std::get<LinearAttention>(spec.function).omega = omega_here_;
  }
  MixerRecord record;
  const Tensor Z = attend(heads, spec, &record);
  report(record);
  return output(Z);
}

// The running sums Σ_j φ(k_j) [v_j, 1]ᵀ: per kv head, r features × (d_h + 1), however many positions.
int64_t LinearSelfAttention::state_floats(int64_t) const {
  const int64_t r = omega_.defined() ? omega_.size(0) : d_h_;
  return H_kv_ * r * (d_h_ + 1);
}

}  // namespace ag::nn
