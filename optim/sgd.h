// Stochastic gradient descent in torch.optim.SGD's form, for each parameter p
// with gradient g (all shaped like p):
//   g ← g + weight_decay·p
//   with momentum μ ≠ 0:  b ← g on the first step, else b ← μ·b + (1 − dampening)·g
//                         g ← g + μ·b (nesterov) or g ← b
//   p ← p − lr·g
// State: "momentum.<name>", one buffer shaped like p, only when μ ≠ 0 (a flat
// buffer laid out like the parameters', as Adam's moments).
#pragma once
#include "optim/optimizer.h"

namespace ag::optim {

struct SgdOptions {
  double lr = 1e-3;  // torch 2's default
  double momentum = 0.0;
  double dampening = 0.0;
  bool nesterov = false;  // needs momentum > 0 and dampening 0, as in torch
};

class SGD : public Optimizer {
 public:
  // Each group decays with its own weight_decay.
  SGD(std::vector<ParamGroup> groups, SgdOptions options);
  // One group.
  SGD(const std::vector<NamedParameter>& params, SgdOptions options, double weight_decay = 0.0);

  void step(const Tensor& skip_unless_finite = Tensor()) override;
  NamedTensors state() const override;
  void load_state(const NamedTensors& state) override;

 private:
  SgdOptions options_;  // options_.lr is only the initial value; lr() is current
  std::vector<Tensor> momentum_;  // one per flat buffer, when momentum != 0
};

}  // namespace ag::optim
