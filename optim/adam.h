// Adam and AdamW in torch.optim's form. For each parameter p with gradient g,
// at step t = 1, 2, ...:
//   Adam:   g ← g + weight_decay·p          (L2: the decay passes through m and v)
//   AdamW:  p ← p − lr·weight_decay·p       (decoupled: applied to p directly)
//   m ← β1·m + (1 − β1)·g,    v ← β2·v + (1 − β2)·g²
//   p ← p − lr · m̂ / (√v̂ + ε),   m̂ = m / (1 − β1^t),  v̂ = v / (1 − β2^t)
// m and v live in flat buffers laid out like the parameters' (one kernel per
// group updates p, m and v together). State per parameter, for checkpoints:
// "exp_avg.<name>" (m), "exp_avg_sq.<name>" (v), both shaped like p, and
// "step.<name>" (t, an int64 tensor of shape [1]; the same for every parameter).
// t counts the updates applied: a step skipped by its guard leaves p, m, v and t,
// on the CPU and on CUDA alike (optim/optimizer.h). eps must be > 0: with eps = 0 a zero gradient gives 0/0.
#pragma once
#include "optim/optimizer.h"

namespace ag::optim {

struct AdamOptions {
  double lr = 1e-3;
  double beta1 = 0.9, beta2 = 0.999;
  double eps = 1e-8;
};

class Adam : public Optimizer {
 public:
  // Each group decays with its own weight_decay.
  Adam(std::vector<ParamGroup> groups, AdamOptions options = {});
  // One group.
  Adam(const std::vector<NamedParameter>& params, AdamOptions options = {}, double weight_decay = 0.0);

  void step(const Tensor& skip_unless_finite = Tensor()) override;
  NamedTensors state() const override;
  void load_state(const NamedTensors& state) override;

 protected:
  // Where weight_decay enters: the gradient (Adam's L2 penalty) or p itself (AdamW).
  enum class WeightDecay { L2, Decoupled };
  // AdamW's constructors: the same update with decoupled decay.
  Adam(const char* kind, std::vector<ParamGroup> groups, AdamOptions options, WeightDecay decay);

 private:
  AdamOptions options_;  // options_.lr is only the initial value; lr() is current
  bool decoupled_;
  std::vector<Tensor> exp_avg_, exp_avg_sq_;  // m and v, one per flat buffer
};

// torch.optim.AdamW: Adam with decoupled weight decay. The one-group constructor
// decays by 0.01 by default, as torch; with groups, each names its own. torch's
// decay is multiplied by lr: λ_torch = λ_paper / α (Loshchilov & Hutter's α, the
// learning rate; their decay is scaled by the schedule's multiplier only).
class AdamW : public Adam {
 public:
  AdamW(std::vector<ParamGroup> groups, AdamOptions options = {});
  AdamW(const std::vector<NamedParameter>& params, AdamOptions options = {}, double weight_decay = 0.01);
};

}  // namespace ag::optim
