#include "optim/adam.h"

#include <cmath>
#include <map>

#include "core/autograd.h"
#include "core/dispatch.h"

namespace ag::optim {

namespace {
// A saved step count: one int64 in [1, 2^53] (beyond that β^t no longer changes,
// and a larger count is a corrupt file, not a long run).
int64_t saved_step(const char* kind, const Tensor& saved, const std::string& name) {
  AG_CHECK(saved.defined() && saved.dtype() == DType::Int64 && saved.numel() == 1,
           kind << ": load_state: '" << name << "' is " << describe(saved) << ", not one int64");
  const int64_t step = saved.to_indices()[0];
  AG_CHECK(step >= 1 && step <= (int64_t{1} << 53),
           kind << ": load_state: '" << name << "' is " << step << ", not a step count in [1, 2^53]");
  return step;
}

// The moments a checkpoint may hold: finite, and v (a mean of squares) never negative.
void check_moment(const char* kind, const Tensor& saved, const std::string& name, bool non_negative) {
  for (double x : saved.to_vector())
    AG_CHECK(std::isfinite(x) && (!non_negative || x >= 0),
             kind << ": load_state: '" << name << "' holds " << x << (non_negative ? " (must be finite and >= 0)" : " (must be finite)"));
}
}  // namespace

Adam::Adam(const char* kind, std::vector<ParamGroup> groups, AdamOptions options, WeightDecay decay)
    : Optimizer(kind, std::move(groups), options.lr), options_(options), decoupled_(decay == WeightDecay::Decoupled) {
  AG_CHECK(options.beta1 >= 0 && options.beta1 < 1 && options.beta2 >= 0 && options.beta2 < 1,
           kind_ << ": betas must lie in [0, 1), got (" << options.beta1 << ", " << options.beta2 << ")");
  // ε = 0 would make a zero gradient's update 0/0 = NaN (m = v = 0).
  AG_CHECK(options.eps > 0, kind_ << ": eps must be > 0 (with eps = 0 a zero gradient gives 0/0), got " << options.eps);
  for (size_t b = 0; b < flat_.buffers().size(); ++b) {
    exp_avg_.push_back(flat_.zeros_like_buffer(b));
    exp_avg_sq_.push_back(flat_.zeros_like_buffer(b));
  }
}

Adam::Adam(std::vector<ParamGroup> groups, AdamOptions options)
    : Adam("adam", std::move(groups), options, WeightDecay::L2) {}
Adam::Adam(const std::vector<NamedParameter>& params, AdamOptions options, double weight_decay)
    : Adam("adam", {{params, weight_decay}}, options, WeightDecay::L2) {}

AdamW::AdamW(std::vector<ParamGroup> groups, AdamOptions options)
    : Adam("adamw", std::move(groups), options, WeightDecay::Decoupled) {}
AdamW::AdamW(const std::vector<NamedParameter>& params, AdamOptions options, double weight_decay)
    : Adam("adamw", {{params, weight_decay}}, options, WeightDecay::Decoupled) {}

// One kernel per segment: a group's parameters, gradients and moments are each
// one contiguous range.
void Adam::step(const Tensor& skip_unless_finite) {
  NoGradGuard no_grad;
  flat_.check_in_place(kind_);
  const double* guard = guard_pointer(skip_unless_finite);
  for (const FlatParameters::Segment& s : flat_.segments()) {
    const FlatParameters::Buffer& buffer = flat_.buffers()[s.buffer];
    Tensor p = FlatParameters::range(buffer.values, s), m = FlatParameters::range(exp_avg_[s.buffer], s),
           v = FlatParameters::range(exp_avg_sq_[s.buffer], s);
    // t = the applied steps + 1, read by the kernel where the count lives: a skipped step left m and v, so it left t too
    const kernel::AdamHyper hyper{lr_, options_.beta1, options_.beta2, options_.eps, groups_[s.group].weight_decay,
                                  applied_steps_pointer(), decoupled_, guard, lr_pointer()};
    kernel::adam_step(p, FlatParameters::range(buffer.grads, s), m, v, hyper);
  }
  count_step(skip_unless_finite);
}

NamedTensors Adam::state() const {
  NamedTensors out;
  const int64_t t = applied_steps();
  if (t == 0) return out;
  for (const FlatParameters::Segment& s : flat_.segments()) {
    for (size_t i = 0; i < s.params.size(); ++i) {
      const std::string& name = s.params[i].name;
      out.push_back({"exp_avg." + name, FlatParameters::param_view(exp_avg_[s.buffer], s, i).clone()});
      out.push_back({"exp_avg_sq." + name, FlatParameters::param_view(exp_avg_sq_[s.buffer], s, i).clone()});
      out.push_back({"step." + name, Tensor::from_indices({t}, {1})});
    }
  }
  return out;
}

void Adam::load_state(const NamedTensors& state) {
  struct Pieces {
    const Tensor *exp_avg = nullptr, *exp_avg_sq = nullptr;
    int64_t step = 0;
  };
  std::map<std::string, Pieces> loaded;  // by parameter name
  for (const auto& [name, saved] : state) {
    const auto [kind, param] = parse_state_name(name);
    Pieces& pieces = loaded[param->name];
    // A moment's tensor (defined, floating, the parameter's shape) before its values are read.
    if (kind == "exp_avg") {
      check_state(saved, *param, name);
      check_moment(kind_, saved, name, false);
      pieces.exp_avg = &saved;
    } else if (kind == "exp_avg_sq") {
      check_state(saved, *param, name);
      check_moment(kind_, saved, name, true);
      pieces.exp_avg_sq = &saved;
    } else if (kind == "step") {
      pieces.step = saved_step(kind_, saved, name);
    } else {
      throw Error(std::string(kind_) + ": load_state: unknown state '" + name + "'");
    }
  }
  // Everything is checked before anything is written: a refused state leaves the optimizer as it was.
  int64_t step = 0;
  for (const FlatParameters::Segment& s : flat_.segments()) {
    for (size_t i = 0; loaded.size() && i < s.params.size(); ++i) {
      const NamedParameter& p = s.params[i];
      const Pieces& pieces = loaded[p.name];
      AG_CHECK(pieces.exp_avg && pieces.exp_avg_sq && pieces.step > 0,
               kind_ << ": load_state: parameter '" << p.name << "' lacks one of exp_avg, exp_avg_sq, step");
      AG_CHECK(step == 0 || pieces.step == step,
               kind_ << ": load_state: parameter '" << p.name << "' is at step " << pieces.step << ", the others at "
                     << step << " (all parameters step together)");
      step = pieces.step;
    }
  }
  for (size_t b = 0; b < exp_avg_.size(); ++b) {
    kernel::fill(exp_avg_[b], 0.0);
    kernel::fill(exp_avg_sq_[b], 0.0);
  }
  for (const FlatParameters::Segment& s : flat_.segments()) {
    for (size_t i = 0; loaded.size() && i < s.params.size(); ++i) {
      const Pieces& pieces = loaded[s.params[i].name];
      copy_state(*pieces.exp_avg, FlatParameters::param_view(exp_avg_[s.buffer], s, i));
      copy_state(*pieces.exp_avg_sq, FlatParameters::param_view(exp_avg_sq_[s.buffer], s, i));
    }
  }
  restore_applied_steps(step);
}

}  // namespace ag::optim
