#include "nn/s4.h"

#include "core/autograd.h"

namespace ag::nn {

S4Mixer::S4Mixer(const Config& config, Generator* gen) : Mixer("S4Mixer"), config_(config) {
  AG_CHECK(config.C >= 1, "S4Mixer: the channel count C must be >= 1, got " << config.C);
  const S4dParameters init = s4d_init(config.C, config.N, config.dt_min, config.dt_max, DType::Float32, gen);
  p_.log_dt = register_parameter("log_dt", init.log_dt);
  p_.log_A_re = register_parameter("log_A_re", init.log_A_re);
  p_.A_im = register_parameter("A_im", init.A_im);
  p_.B = register_parameter("B", init.B);
  p_.C = register_parameter("C", init.C);
  p_.D = register_parameter("D", init.D);
  w_o_ = register_module("w_o", std::make_shared<Linear>(Linear::Config{.in = config.C, .out = config.C}, gen));
  dropout_ = register_module("dropout", std::make_shared<Dropout>(config.dropout));
}

// Its weights over positions are the kernel (kernel()), not formed per input: the probe's record is empty.
Tensor S4Mixer::forward(const Tensor& x) {
  if (probe()) probe()(MixerRecord{});
  return dropout_->forward(w_o_->forward(gelu(s4d(x, p_))));
}

// The recurrent form from the cache's state: the same rows forward() gives for these positions
// after the cached ones (tests/test_s4.cpp).
Tensor S4Mixer::forward_cached(const Tensor& x, LayerKVCache& cache) {
  NoGradGuard no_grad;
  const Tensor y = s4d_recurrent(x, p_, cache.state);
  cache.length += x.size(1);
  if (probe()) probe()(MixerRecord{});
  return dropout_->forward(w_o_->forward(gelu(y)));
}

bool S4Mixer::keeps_own_init(std::string_view name) const { return !name.starts_with("w_o."); }

int64_t S4Mixer::state_floats(int64_t) const { return config_.C * config_.N; }

}  // namespace ag::nn
