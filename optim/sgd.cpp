#include "optim/sgd.h"

#include "core/autograd.h"
#include "core/dispatch.h"

namespace ag::optim {

SGD::SGD(std::vector<ParamGroup> groups, SgdOptions options)
    : Optimizer("sgd", std::move(groups), options.lr), options_(options) {
  AG_CHECK(options.momentum >= 0, "sgd: momentum must be >= 0, got " << options.momentum);
  AG_CHECK(!options.nesterov || (options.momentum > 0 && options.dampening == 0),
           "sgd: nesterov needs momentum > 0 and dampening 0, got momentum "
               << options.momentum << ", dampening " << options.dampening);
}

SGD::SGD(const std::vector<NamedParameter>& params, SgdOptions options, double weight_decay)
    : SGD(std::vector<ParamGroup>{{params, weight_decay}}, options) {}

void SGD::step() {
  NoGradGuard no_grad;
  for (ParamGroup& group : groups_) {
    const kernel::SgdHyper base{lr_, options_.momentum, options_.dampening, group.weight_decay,
                                options_.nesterov, /*first_step=*/false};
    for (NamedParameter& p : group.params) {
      const Tensor grad = p.tensor.grad();
      if (!grad.defined()) continue;
      AG_CHECK(grad.shape() == p.tensor.shape() && grad.dtype() == p.tensor.dtype(),
               "sgd: parameter '" << p.name << "' is " << describe(p.tensor) << " but its grad is "
                                  << describe(grad));
      kernel::SgdHyper hyper = base;
      if (options_.momentum == 0) {
        // No buffer without momentum (as in torch); the kernel never reads this argument.
        kernel::sgd_step(p.tensor, grad, p.tensor, hyper);
        continue;
      }
      auto [it, created] = momentum_.try_emplace(p.name);
      if (created) it->second = Tensor::zeros(p.tensor.shape(), p.tensor.dtype(), p.tensor.device());
      hyper.first_step = created;
      kernel::sgd_step(p.tensor, grad, it->second, hyper);
    }
  }
}

NamedTensors SGD::state() const {
  NamedTensors out;
  for (const ParamGroup& group : groups_)
    for (const NamedParameter& p : group.params)
      if (auto it = momentum_.find(p.name); it != momentum_.end())
        out.emplace_back("momentum." + p.name, it->second.clone());
  return out;
}

void SGD::load_state(const NamedTensors& state) {
  std::unordered_map<std::string, Tensor> loaded;
  for (const auto& [name, saved] : state) {
    const auto [kind, param] = parse_state_name(name);
    AG_CHECK(kind == "momentum", "sgd: load_state: unknown state '" << name << "'");
    AG_CHECK(options_.momentum != 0, "sgd: load_state: '" << name << "' given, but momentum is 0");
    loaded[param->name] = copy_like(saved, *param, name);
  }
  momentum_ = std::move(loaded);
}

}  // namespace ag::optim
