// ssd: Mamba-2's selective state space as an attention function (docs/backprop.md,
// "State-space attention"; the op: core/ops/ssd.cpp). Per layer:
//   u = [X W_Q | X W_K | X W_V],  u' = SiLU(conv(u)) (a causal depthwise convolution of width
//   W; 0: u' = u), split back into Q, K, V;  Δ = softplus(X w_dt + b_dt) [B, T, H];
//   Z = the op's ssd with a_log, d_skip [H];  then, with the gate, Concat(heads) ⊙ SiLU(X W_g + b_g)
// before W_O. Decoding, the cache keeps the convolution's last W − 1 inputs beside the state.
// The projections are AttentionMixer's (nn/attention.h); conv, w_dt, a_log, d_skip and w_g are this
// mixer's own.
#pragma once

#include "nn/attention.h"

namespace ag::nn {

struct SsdOptions {
  int64_t conv = 4;   // the convolution's width W (0: none)
  bool gate = true;   // whether a SiLU gate scales the merged heads
};

class SsdSelfAttention : public AttentionMixer {
 public:
  using Options = SsdOptions;
  // Adds to AttentionMixer's projections: conv (CausalConv1d over C + 2·H_kv·d_h channels, if
  // conv > 0), w_dt: Linear(C, H), a_log and d_skip [H] and, with the gate, w_g: Linear(C, C);
  // initialised as Mamba: a_log = log U[1, 16], Δ = exp(U[log 1e-3, log 0.1]) with w_dt's bias its
  // inverse softplus, d_skip = 1.
  explicit SsdSelfAttention(const AttentionConfig& config, const Options& options = {}, Generator* gen = nullptr);

  // FLOPs (2 a multiply-add) of one forward over BT positions of what this mixer adds to
  // AttentionMixer's projections and to ssd's row of the attention functions' table: w_dt, w_g
  // (with the gate) and the convolution, W multiply-adds per position and channel of [q|k|v].
  static int64_t own_forward_flops(const AttentionConfig& config, const Options& options, int64_t BT);

  // a_log, d_skip, w_dt.bias and the convolution: their initialisation is part of the function.
  bool keeps_own_init(std::string_view name) const override;
  int64_t state_floats(int64_t positions) const override;

 private:
  Tensor mix(const Tensor& x, LayerKVCache* cache) override;

  std::shared_ptr<CausalConv1d> conv_;   // with conv > 0
  std::shared_ptr<Linear> w_dt_, w_g_;   // w_g_ with the gate
  Tensor a_log_, d_skip_;
};

}  // namespace ag::nn
