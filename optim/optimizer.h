// The optimizer base: parameter groups, the learning rate, the flat parameter
// and gradient buffers (optim/flat_parameters.h), and the named-state
// interface checkpoints use.
//
// Parameters are held by name (the module's hierarchical name, which is also
// the checkpoint key) and by Tensor. Making an optimizer moves its parameters
// into flat buffers: the module's tensors then read and write the buffers, so
// step() updates the model's weights in place, one kernel per group and
// buffer. Make the optimizer after moving the model to its device and dtype.
//
// Every parameter has a gradient from then on (its pinned view of the
// gradient buffer, zero after zero_grad), and every step updates every
// parameter: torch.optim's semantics with zero_grad(set_to_none=False). A
// parameter that received no gradient is updated as if its gradient were zero
// (weight decay and momentum still act), and all parameters share one step count.
#pragma once
#include <string>
#include <unordered_map>
#include <utility>
#include <vector>

#include "core/tensor.h"
#include "optim/flat_parameters.h"
#include "optim/param_group.h"

namespace ag::optim {

class Optimizer {
 public:
  virtual ~Optimizer() = default;
  Optimizer(const Optimizer&) = delete;
  Optimizer& operator=(const Optimizer&) = delete;

  // One update of every parameter, in place, under NoGradGuard. With
  // skip_unless_finite (a float64 scalar on the parameters' device, such as the
  // gradient norm) the update is skipped when it is not finite, decided on the
  // device, nothing waiting for it: a diverged step changes no parameter and no
  // state. It leaves the step count too (bias corrections, SGD's first
  // step), as torch's GradScaler skips the whole step; see applied_steps().
  virtual void step(const Tensor& skip_unless_finite = Tensor()) = 0;
  // Zeroes every gradient: one fill per flat buffer.
  void zero_grad() { flat_.zero_grad(); }

  double lr() const { return lr_; }
  void set_lr(double lr);  // e.g. each iteration, from warmup_cosine_lr
  // From now on the update kernels read the learning rate from `lr`, a float64
  // scalar on the parameters' device, instead of lr() (undefined: lr() again).
  // Its owner writes it before each step: a training step's step constant, so
  // that a CUDA graph replays each step at that step's rate (optim/train_step.h).
  void read_lr_from(const Tensor& lr);

  const std::vector<ParamGroup>& groups() const { return groups_; }
  // The gradient buffers, one 1-D tensor per (dtype, device) of the parameters:
  // what clip_grad_norm reads, and what a data-parallel all-reduce sums.
  std::vector<Tensor> gradient_buffers() const;

  // A snapshot (copies) of every state tensor, named "<kind>.<parameter name>",
  // in parameter order; empty before the first step. load_state(state()) on a
  // fresh optimizer over the same parameters resumes exactly: the following
  // steps give the same bits.
  virtual NamedTensors state() const = 0;
  // Replaces all state: either none, or every piece for every parameter. Names
  // must be ones state() produces for these parameters; tensors are copied into
  // the optimizer's buffers, converted to the parameter's dtype and device.
  virtual void load_state(const NamedTensors& state) = 0;

 protected:
  // `kind` names the optimizer in error messages ("adamw").
  Optimizer(const char* kind, std::vector<ParamGroup> groups, double lr);

  // Splits a state name "<kind>.<parameter name>" and finds the parameter;
  // throws if there is no such parameter or the name has no '.'.
  std::pair<std::string, const NamedParameter*> parse_state_name(const std::string& name) const;
  // The guard for the update kernels: null, or skip_unless_finite's value, checked
  // to be one float64 on the parameters' device.
  const double* guard_pointer(const Tensor& skip_unless_finite) const;
  // Throws unless `saved` can be state of `param`: floating, of its shape.
  void check_state(const Tensor& saved, const NamedParameter& param, const std::string& name) const;
  // Copies checked state into the optimizer's buffer view `dst`, converting dtype and device.
  static void copy_state(const Tensor& saved, Tensor dst);

  // The step count: steps applied so far; a step skipped by its guard is not
  // counted. It lives where the parameters do (one int64), so that the update
  // kernels read it there and count_step advances it there, the guard decided on
  // that device: on a GPU nothing waits for it. applied_steps() reads it (from a
  // GPU: a copy that waits, so for saving and loading only). step() passes
  // applied_steps_pointer() to its kernels and calls count_step after them.
  int64_t applied_steps() const { return applied_.to_indices()[0]; }
  const int64_t* applied_steps_pointer() const { return static_cast<const int64_t*>(applied_.raw_data()); }
  // read_lr_from's scalar for the kernels, or null.
  const double* lr_pointer() const { return lr_on_device_.defined() ? static_cast<const double*>(lr_on_device_.raw_data()) : nullptr; }
  void count_step(const Tensor& skip_unless_finite);
  // load_state's: the step count of the loaded state.
  void restore_applied_steps(int64_t steps);

  const char* kind_;
  std::vector<ParamGroup> groups_;
  FlatParameters flat_;
  double lr_;

 private:
  std::unordered_map<std::string, const NamedParameter*> by_name_;
  Tensor applied_;  // int64 [1], on the parameters' device
  Tensor lr_on_device_;  // read_lr_from's, or undefined
};

}  // namespace ag::optim
