// Linear attention (Katharopoulos et al. 2020): softmax's exp(q·k) replaced by
// a kernel φ(q)·φ(k), so the causal sums Σ_j φ(k_j) [v_j, 1]ᵀ can be carried
// from one position to the next in O(T) time and a state of constant size
// (docs/backprop.md, "Linear attention"; the op: core/ops/linear_attention.cpp).
// The projections are AttentionMixer's (nn/attention.h); the feature map is
// this mixer's own.
#pragma once

#include "nn/attention.h"

namespace ag::nn {

struct LinearOptions {
  FeatureMap feature_map = FeatureMap::Elu1;
  // FAVOR+ draws its n_features × d_h features from (seed, stream) at
  // construction, once: not parameters, recomputed from the seed whenever the
  // model is built (the checkpoint holds only the seed).
  int64_t n_features = 64;
  uint64_t seed = 0, stream = 0;
};

class LinearSelfAttention : public AttentionMixer {
 public:
  using Options = LinearOptions;
  explicit LinearSelfAttention(const AttentionConfig& config, const Options& options = {}, Generator* gen = nullptr);

  int64_t state_floats(int64_t positions) const override;

  const Tensor& favor_features() const { return omega_; }  // ω [m, d_h] float64 (favor only)

 private:
  Tensor mix(const Tensor& x, LayerKVCache* cache) override;

  Tensor omega_, omega_here_;  // favor's ω: float64 on the CPU, and converted as the input (cached)
};

}  // namespace ag::nn
