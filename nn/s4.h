// S4D as a token mixer (docs/backprop.md §33): each of the C channels of X [B, T, C] is its own
// diagonal state space of N/2 complex modes, applied as one causal convolution,
//   O = dropout(GELU(s4d(X)) W_O + b_O)       (s4d: y = K * x + D·x per channel, core/ops.h)
// the S4D block of Gu et al. 2022 with a linear output map in place of its GLU. Decoding keeps
// the recurrent form's state [B, C, N/2, 2] in LayerKVCache::state: constant-size.
// The model option `attention` names it `s4` (AttentionFunction::S4, after the attention
// functions, as the LSTM; its own options --s4-state, --s4-dt-min, --s4-dt-max).
#pragma once
#include <cstdint>
#include <memory>
#include <string_view>

#include "core/ops.h"
#include "nn/layers.h"
#include "nn/linear.h"
#include "nn/mixer.h"

namespace ag::nn {

class S4Mixer : public Mixer {
 public:
  struct Config {
    int64_t C = 0;          // channels (the model's width)
    int64_t N = 64;         // state size per channel: N/2 complex modes; even, >= 2
    double dt_min = 1e-3;   // log Δ is drawn uniform in [log dt_min, log dt_max] (S4D-Lin)
    double dt_max = 1e-1;
    double dropout = 0.0;   // on O (residual dropout, as the attention mixers' on W_O's output)
  };
  explicit S4Mixer(const Config& config, Generator* gen = nullptr);

  Tensor forward(const Tensor& x) override;
  Tensor forward_cached(const Tensor& x, LayerKVCache& cache) override;
  // The S4D parameters and D keep S4D-Lin's initialisation; W_O takes the model's.
  bool keeps_own_init(std::string_view name) const override;
  // Mixer's defaults: whole sequences only (the convolution needs all of one), no heads (only channels).
  // N floats per channel (N/2 complex modes), whatever the number of positions.
  int64_t state_floats(int64_t positions) const override;

  // The parameters as the ops read them, and the kernel K [C, T] the layer convolves with: the
  // weights it gives to the past, the same for every input (docs/backprop.md §33).
  S4dParameters s4d_parameters() const { return p_; }
  Tensor kernel(int64_t T) const { return s4d_kernel(p_, T); }

 private:
  Config config_;
  S4dParameters p_;
  std::shared_ptr<Linear> w_o_;
  std::shared_ptr<Dropout> dropout_;
};

}  // namespace ag::nn
