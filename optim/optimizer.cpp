#include "optim/optimizer.h"

#include <cmath>

#include "core/dispatch.h"

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
  flat_ = FlatParameters(groups_);
  restore_applied_steps(0);
}

const double* Optimizer::guard_pointer(const Tensor& skip_unless_finite) const {
  if (!skip_unless_finite.defined()) return nullptr;
  AG_CHECK(skip_unless_finite.numel() == 1 && skip_unless_finite.dtype() == DType::Float64 &&
               (flat_.buffers().empty() || skip_unless_finite.device() == flat_.buffers()[0].values.device()),
           kind_ << ": step: skip_unless_finite " << describe(skip_unless_finite)
                 << " is not one float64 on the parameters' device");
  return static_cast<const double*>(skip_unless_finite.raw_data());
}

void Optimizer::count_step(const Tensor& skip_unless_finite) {
  kernel::count_applied_step(applied_, guard_pointer(skip_unless_finite));
}

void Optimizer::restore_applied_steps(int64_t steps) {
  const Device device = flat_.buffers().empty() ? Device::CPU : flat_.buffers()[0].values.device();
  const Tensor count = Tensor::from_indices({steps}, {1}).to(device);
  // In place once it exists: a captured CUDA graph (optim/train_step.h) reads the count at its address.
  if (applied_.defined()) kernel::cast(count, applied_);
  else applied_ = count;
}

void Optimizer::set_lr(double lr) {
  AG_CHECK(lr >= 0, kind_ << ": learning rate must be >= 0, got " << lr);
  lr_ = lr;
}

void Optimizer::read_lr_from(const Tensor& lr) {
  AG_CHECK(!lr.defined() || (lr.numel() == 1 && lr.dtype() == DType::Float64 &&
                             (flat_.buffers().empty() || lr.device() == flat_.buffers()[0].values.device())),
           kind_ << ": read_lr_from: " << describe(lr) << " is not one float64 on the parameters' device");
  lr_on_device_ = lr;
}

std::vector<Tensor> Optimizer::gradient_buffers() const {
  std::vector<Tensor> grads;
  for (const FlatParameters::Buffer& b : flat_.buffers()) grads.push_back(b.grads);
  return grads;
}

std::pair<std::string, const NamedParameter*> Optimizer::parse_state_name(const std::string& name) const {
  const size_t dot = name.find('.');
  AG_CHECK(dot != std::string::npos, kind_ << ": load_state: '" << name << "' is not <kind>.<parameter name>");
  const auto it = by_name_.find(name.substr(dot + 1));
  AG_CHECK(it != by_name_.end(), kind_ << ": load_state: '" << name << "' names no parameter of this optimizer");
  return {name.substr(0, dot), it->second};
}

void Optimizer::check_state(const Tensor& saved, const NamedParameter& param, const std::string& name) const {
  AG_CHECK(saved.defined() && is_floating(saved.dtype()),
           kind_ << ": load_state: '" << name << "' is " << describe(saved) << ", not a floating tensor");
  AG_CHECK(saved.shape() == param.tensor.shape(), kind_ << ": load_state: '" << name << "' is " << describe(saved)
                                                        << ", parameter '" << param.name << "' is "
                                                        << describe(param.tensor));
}

void Optimizer::copy_state(const Tensor& saved, Tensor dst) { kernel::cast(saved.to(dst.device()), dst); }

}  // namespace ag::optim
