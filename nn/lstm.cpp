#include "nn/lstm.h"

#include <cmath>
#include <vector>

#include "core/autograd.h"

namespace ag::nn {

LstmMixer::LstmMixer(const Config& config, Generator* gen) : Mixer("LstmMixer"), config_(config) {
  const int64_t C = config.C;
  AG_CHECK(C >= 1, "LstmMixer: hidden size C = n_embd " << C << " must be >= 1");
  const double bound = 1.0 / std::sqrt(static_cast<double>(C));
  const auto uniform = [&](const Shape& shape) { return Tensor::uniform(shape, -bound, bound, DType::Float32, gen); };
  weight_ih_ = register_parameter("weight_ih", uniform({C, 4 * C}));
  weight_hh_ = register_parameter("weight_hh", uniform({C, 4 * C}));
  std::vector<double> b_ih = uniform({4 * C}).to_vector();
  for (int64_t j = C; j < 2 * C; ++j) b_ih[j] = 1.0;  // the forget gate's bias (gates i, f, g, o)
  bias_ih_ = register_parameter("bias_ih", Tensor::from_vector(b_ih, {4 * C}));
  std::vector<double> b_hh = uniform({4 * C}).to_vector();
  for (int64_t j = C; j < 2 * C; ++j) b_hh[j] = 0.0;
  bias_hh_ = register_parameter("bias_hh", Tensor::from_vector(b_hh, {4 * C}));
  dropout_ = register_module("dropout", std::make_shared<Dropout>(config.dropout));
}

bool LstmMixer::keeps_own_init(std::string_view name) const { return name == "bias_ih" || name == "bias_hh"; }

int64_t LstmMixer::state_floats(int64_t) const { return 2 * config_.C; }

Tensor LstmMixer::mix(const Tensor& x, LstmState* state) {
  const Tensor H = lstm(x, weight_ih_, weight_hh_, bias_ih_, bias_hh_, state);  // [B, T, C]
  if (probe()) probe()(MixerRecord{});  // no weights over positions, no q, k, v: an empty record
  return dropout_->forward(H);
}

Tensor LstmMixer::forward(const Tensor& x) { return mix(x, nullptr); }

// LayerKVCache::state [2, B, C]: h_{t−1} then c_{t−1} of the last position taken.
Tensor LstmMixer::forward_cached(const Tensor& x, LayerKVCache& cache) {
  const int64_t B = x.size(0), C = config_.C;
  LstmState state;
  if (cache.state.defined()) {
    const std::vector<Tensor> hc = split(cache.state, {1, 1}, 0);
    state = {.h = hc[0].reshape({B, C}), .c = hc[1].reshape({B, C})};
  }
  const Tensor O = mix(x, &state);
  cache.state = concat({state.h.reshape({1, B, C}), state.c.reshape({1, B, C})}, 0);
  cache.length += x.size(1);
  return O;
}

}  // namespace ag::nn
