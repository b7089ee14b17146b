#include "optim/adam.h"

#include <cmath>

#include "core/autograd.h"
#include "core/dispatch.h"

namespace ag::optim {

Adam::Adam(const char* kind, std::vector<ParamGroup> groups, AdamOptions options, bool decoupled)
    : Optimizer(kind, std::move(groups), options.lr), options_(options), decoupled_(decoupled) {
  AG_CHECK(options.beta1 >= 0 && options.beta1 < 1 && options.beta2 >= 0 && options.beta2 < 1,
           kind_ << ": betas must lie in [0, 1), got (" << options.beta1 << ", " << options.beta2 << ")");
  AG_CHECK(options.eps >= 0, kind_ << ": eps must be >= 0, got " << options.eps);
}

Adam::Adam(std::vector<ParamGroup> groups, AdamOptions options)
    : Adam("adam", std::move(groups), options, /*decoupled=*/false) {}
Adam::Adam(const std::vector<NamedParameter>& params, AdamOptions options, double weight_decay)
    : Adam("adam", {{params, weight_decay}}, options, /*decoupled=*/false) {}

AdamW::AdamW(std::vector<ParamGroup> groups, AdamOptions options)
    : Adam("adamw", std::move(groups), options, /*decoupled=*/true) {}
AdamW::AdamW(const std::vector<NamedParameter>& params, AdamOptions options, double weight_decay)
    : Adam("adamw", {{params, weight_decay}}, options, /*decoupled=*/true) {}

void Adam::step() {
  NoGradGuard no_grad;
  for (ParamGroup& group : groups_) {
    for (NamedParameter& p : group.params) {
      const Tensor grad = p.tensor.grad();
      if (!grad.defined()) continue;
      AG_CHECK(grad.shape() == p.tensor.shape() && grad.dtype() == p.tensor.dtype(),
               kind_ << ": parameter '" << p.name << "' is " << describe(p.tensor) << " but its grad is "
                     << describe(grad));
      Moments& s = moments_[p.name];
      if (s.step == 0) {
        s.exp_avg = Tensor::zeros(p.tensor.shape(), p.tensor.dtype(), p.tensor.device());
        s.exp_avg_sq = Tensor::zeros(p.tensor.shape(), p.tensor.dtype(), p.tensor.device());
      }
      ++s.step;
      const kernel::AdamHyper hyper{lr_, options_.beta1, options_.beta2, options_.eps, group.weight_decay,
                                    s.step, decoupled_};
      kernel::adam_step(p.tensor, grad, s.exp_avg, s.exp_avg_sq, hyper);
    }
  }
}

NamedTensors Adam::state() const {
  NamedTensors out;
  for (const ParamGroup& group : groups_) {
    for (const NamedParameter& p : group.params) {
      const auto it = moments_.find(p.name);
      if (it == moments_.end()) continue;
      out.emplace_back("exp_avg." + p.name, it->second.exp_avg.clone());
      out.emplace_back("exp_avg_sq." + p.name, it->second.exp_avg_sq.clone());
      out.emplace_back("step." + p.name, Tensor::from_indices({it->second.step}, {1}));
    }
  }
  return out;
}

void Adam::load_state(const NamedTensors& state) {
  std::unordered_map<std::string, Moments> loaded;
  for (const auto& [name, saved] : state) {
    const auto [kind, param] = parse_state_name(name);
    Moments& s = loaded[param->name];
    if (kind == "exp_avg") {
      s.exp_avg = copy_like(saved, *param, name);
    } else if (kind == "exp_avg_sq") {
      s.exp_avg_sq = copy_like(saved, *param, name);
    } else if (kind == "step") {
      AG_CHECK(saved.defined() && saved.numel() == 1,
               kind_ << ": load_state: '" << name << "' must hold one element");
      const double step = saved.item();
      AG_CHECK(step >= 1 && step == std::floor(step),
               kind_ << ": load_state: '" << name << "' is " << step << ", not a step count >= 1");
      s.step = static_cast<int64_t>(step);
    } else {
      throw Error(std::string(kind_) + ": load_state: unknown state '" + name + "'");
    }
  }
  // A parameter's state is all three pieces or none.
  for (const auto& [name, s] : loaded)
    AG_CHECK(s.exp_avg.defined() && s.exp_avg_sq.defined() && s.step > 0,
             kind_ << ": load_state: parameter '" << name << "' lacks one of exp_avg, exp_avg_sq, step");
  moments_ = std::move(loaded);
}

}  // namespace ag::optim
