// The LSTM as a block's mixer: not an attention function of q, k, v but a
// recurrent network with its own op, lstm() (core/ops/lstm.cpp; derivation:
// docs/backprop.md, "The LSTM"). The model option `attention` names it `lstm`
// (AttentionFunction::Lstm, after the attention functions; docs/attention.md).
//   H = LSTM(X)   X, H [B, T, C]: hidden size C, one layer, gates i, f, g, o (PyTorch's order)
//   O = dropout(H)  (no output projection: H is the mixer's output, as nn.LSTM(C, C)'s)
// Parameters, PyTorch's names without "_l0" and stored [in, out] as a Linear's:
//   weight_ih, weight_hh [C, 4C] (PyTorch's transposed), bias_ih, bias_hh [4C].
// Decoding, LayerKVCache::state holds (h, c) as one tensor [2, B, C] (h first):
// 2·C floats per sequence, whatever the positions.
#pragma once

#include "nn/layers.h"
#include "nn/mixer.h"

namespace ag::nn {

class LstmMixer : public Mixer {
 public:
  struct Config {
    int64_t C = 0;         // width of X and H (the hidden size), >= 1
    double dropout = 0.0;  // on H (residual dropout, as the attention mixers' on W_O's output)
  };
  // Initialised as PyTorch's nn.LSTM, U(−1/√C, 1/√C) for every weight and bias, but for the forget gate's
  // bias: bias_ih's f block is 1 (bias_hh's 0), so that c is kept, not halved, at the start (Gers et al.
  // 2000; PyTorch's is drawn as the others). A GPT re-initialises the weights (GPT-2's N(0, 0.02)) and keeps
  // the biases (keeps_own_init).
  explicit LstmMixer(const Config& config, Generator* gen = nullptr);

  Tensor forward(const Tensor& x) override;
  Tensor forward_cached(const Tensor& x, LayerKVCache& cache) override;
  bool keeps_own_init(std::string_view name) const override;
  // Mixer's defaults: no context parallelism (it reads its sequence in order from the first position), no heads.
  int64_t state_floats(int64_t positions) const override;  // (h, c): 2·C

 private:
  Tensor mix(const Tensor& x, LstmState* state);

  Config config_;
  Tensor weight_ih_, weight_hh_, bias_ih_, bias_hh_;
  std::shared_ptr<Dropout> dropout_;
};

}  // namespace ag::nn
