#include "optim/sgd.h"

#include <map>

#include "core/autograd.h"
#include "core/dispatch.h"

namespace ag::optim {

SGD::SGD(std::vector<ParamGroup> groups, SgdOptions options)
    : Optimizer("sgd", std::move(groups), options.lr), options_(options) {
  AG_CHECK(options.momentum >= 0, "sgd: momentum must be >= 0, got " << options.momentum);
  AG_CHECK(!options.nesterov || (options.momentum > 0 && options.dampening == 0),
           "sgd: nesterov needs momentum > 0 and dampening 0, got momentum "
               << options.momentum << ", dampening " << options.dampening);
  if (options.momentum != 0)
    for (size_t b = 0; b < flat_.buffers().size(); ++b) momentum_.push_back(flat_.zeros_like_buffer(b));
}

SGD::SGD(const std::vector<NamedParameter>& params, SgdOptions options, double weight_decay)
    : SGD(std::vector<ParamGroup>{{params, weight_decay}}, options) {}

// One kernel per segment, as Adam.
void SGD::step(const Tensor& skip_unless_finite) {
  NoGradGuard no_grad;
  flat_.check_in_place(kind_);
  const double* guard = guard_pointer(skip_unless_finite);
  for (const FlatParameters::Segment& s : flat_.segments()) {
    const FlatParameters::Buffer& buffer = flat_.buffers()[s.buffer];
    Tensor p = FlatParameters::range(buffer.values, s);
    // Without momentum there is no buffer (as in torch); the kernel never reads this argument.
    Tensor b = momentum_.empty() ? p : FlatParameters::range(momentum_[s.buffer], s);
    const kernel::SgdHyper hyper{.lr = lr_, .momentum = options_.momentum, .dampening = options_.dampening,
                                 .weight_decay = groups_[s.group].weight_decay, .nesterov = options_.nesterov,
                                 .applied_steps = applied_steps_pointer(),  // after a skipped first step, still the first
                                 .skip_unless_finite = guard, .lr_on_device = lr_pointer()};
    kernel::sgd_step(p, FlatParameters::range(buffer.grads, s), b, hyper);
  }
  count_step(skip_unless_finite);
}

NamedTensors SGD::state() const {
  NamedTensors out;
  if (momentum_.empty() || applied_steps() == 0) return out;
  for (const FlatParameters::Segment& s : flat_.segments())
    for (size_t i = 0; i < s.params.size(); ++i)
      out.push_back({"momentum." + s.params[i].name, FlatParameters::param_view(momentum_[s.buffer], s, i).clone()});
  return out;
}

void SGD::load_state(const NamedTensors& state) {
  std::map<std::string, const Tensor*> loaded;  // by parameter name
  for (const auto& [name, saved] : state) {
    const auto [kind, param] = parse_state_name(name);
    AG_CHECK(kind == "momentum", "sgd: load_state: unknown state '" << name << "'");
    AG_CHECK(options_.momentum != 0, "sgd: load_state: '" << name << "' given, but momentum is 0");
    check_state(saved, *param, name);
    loaded[param->name] = &saved;
  }
  for (const FlatParameters::Segment& s : flat_.segments())
    for (size_t i = 0; !loaded.empty() && i < s.params.size(); ++i)
      AG_CHECK(loaded.count(s.params[i].name), "sgd: load_state: parameter '" << s.params[i].name << "' has no momentum");
  for (Tensor& b : momentum_) kernel::fill(b, 0.0);
  for (const FlatParameters::Segment& s : flat_.segments())
    for (size_t i = 0; !loaded.empty() && i < s.params.size(); ++i)
      copy_state(*loaded[s.params[i].name], FlatParameters::param_view(momentum_[s.buffer], s, i));
  restore_applied_steps(loaded.empty() ? 0 : 1);  // only whether b holds a first step counts
}

}  // namespace ag::optim
