#include "optim/optimizer.h"

namespace ag::optim {

std::vector<ParamGroup> decay_groups(const std::vector<NamedParameter>& params, double weight_decay) {
  ParamGroup decayed{{}, weight_decay}, undecayed{{}, 0.0};
  for (const NamedParameter& p : params) (p.tensor.dim() >= 2 ? decayed : undecayed).params.push_back(p);
  return {decayed, undecayed};
}

Optimizer::Optimizer(const char* kind, std::vector<ParamGroup> groups, double lr)
    : kind_(kind), groups_(std::move(groups)) {
  set_lr(lr);
  for (const ParamGroup& group : groups_) {
    AG_CHECK(group.weight_decay >= 0, kind_ << ": weight_decay must be >= 0, got " << group.weight_decay);
    for (const NamedParameter& p : group.params) {
      AG_CHECK(p.tensor.defined(), kind_ << ": parameter '" << p.name << "' is undefined");
      AG_CHECK(is_floating(p.tensor.dtype()),
               kind_ << ": parameter '" << p.name << "' is " << describe(p.tensor) << ", not floating");
      // Names key the state, so two parameters may not share one.
      AG_CHECK(by_name_.emplace(p.name, &p).second, kind_ << ": parameter name '" << p.name << "' appears twice");
    }
  }
}

void Optimizer::zero_grad() {
  for (ParamGroup& group : groups_)
    for (NamedParameter& p : group.params) p.tensor.zero_grad();
}

void Optimizer::set_lr(double lr) {
  AG_CHECK(lr >= 0, kind_ << ": learning rate must be >= 0, got " << lr);
  lr_ = lr;
}

std::pair<std::string, const NamedParameter*> Optimizer::parse_state_name(const std::string& name) const {
  const size_t dot = name.find('.');
  AG_CHECK(dot != std::string::npos, kind_ << ": load_state: '" << name << "' is not <kind>.<parameter name>");
  const auto it = by_name_.find(name.substr(dot + 1));
  AG_CHECK(it != by_name_.end(), kind_ << ": load_state: '" << name << "' names no parameter of this optimizer");
  return {name.substr(0, dot), it->second};
}

Tensor Optimizer::copy_like(const Tensor& saved, const NamedParameter& param, const std::string& name) const {
  AG_CHECK(saved.defined(), kind_ << ": load_state: '" << name << "' is undefined");
  AG_CHECK(saved.shape() == param.tensor.shape(), kind_ << ": load_state: '" << name << "' is "
                                                        << describe(saved) << ", parameter '" << param.name
                                                        << "' is " << describe(param.tensor));
  Tensor copy = saved.to(param.tensor.dtype()).to(param.tensor.device());
  // to() returns the tensor itself when nothing changes; the state must not alias the caller's.
  return copy.same(saved) ? copy.clone() : copy;
}

}  // namespace ag::optim
