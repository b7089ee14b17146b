// The optimizer base: parameter groups, the learning rate, zero_grad, and the
// named-state interface checkpoints use.
//
// Parameters are held by name (the module's hierarchical name, which is also
// the checkpoint key) and by Tensor, which shares the module's storage: step()
// updates the module's weights in place. A parameter whose grad() is undefined
// is skipped by step(), as in PyTorch, and gets no state until it has a grad.
#pragma once
#include <string>
#include <unordered_map>
#include <utility>
#include <vector>

#include "core/tensor.h"

namespace ag::optim {

using NamedParameter = NamedTensor;  // "blocks.0.attn.w_q.weight" and its tensor

// Parameters that share hyperparameters; only weight decay varies between groups.
struct ParamGroup {
  std::vector<NamedParameter> params;
  double weight_decay = 0;
};

// Optimizer state by name, e.g. {"exp_avg.blocks.0.attn.w_q.weight", m}.
using NamedTensors = std::vector<NamedTensor>;

// GPT-2's split: matrices (dim() >= 2: linear weights, embeddings) decay; biases
// and LayerNorm gains (dim() < 2) don't. Returns {decayed group, undecayed group}.
std::vector<ParamGroup> decay_groups(const std::vector<NamedParameter>& params, double weight_decay);

class Optimizer {
 public:
  virtual ~Optimizer() = default;
  Optimizer(const Optimizer&) = delete;
  Optimizer& operator=(const Optimizer&) = delete;

  // One update of every parameter that has a gradient, in place, under NoGradGuard.
  virtual void step() = 0;
  // Drops every parameter's gradient (the next backward starts from none).
  void zero_grad();

  double lr() const { return lr_; }
  void set_lr(double lr);  // e.g. each iteration, from warmup_cosine_lr

  const std::vector<ParamGroup>& groups() const { return groups_; }

  // A snapshot (copies) of every state tensor, named "<kind>.<parameter name>",
  // in parameter order. load_state(state()) on a fresh optimizer over the same
  // parameters resumes exactly: the following steps give the same bits.
  virtual NamedTensors state() const = 0;
  // Replaces all state. Names must be ones state() produces for these parameters;
  // tensors are copied, converted to the parameter's dtype and device.
  virtual void load_state(const NamedTensors& state) = 0;

 protected:
  // `kind` names the optimizer in error messages ("adamw").
  Optimizer(const char* kind, std::vector<ParamGroup> groups, double lr);

  // Splits a state name "<kind>.<parameter name>" and finds the parameter;
  // throws if there is no such parameter or the name has no '.'.
  std::pair<std::string, const NamedParameter*> parse_state_name(const std::string& name) const;
  // A private copy of `saved` with the parameter's shape (checked), dtype and device.
  Tensor copy_like(const Tensor& saved, const NamedParameter& param, const std::string& name) const;

  const char* kind_;
  std::vector<ParamGroup> groups_;
  double lr_;

 private:
  std::unordered_map<std::string, const NamedParameter*> by_name_;
};

}  // namespace ag::optim
