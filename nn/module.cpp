#include "nn/module.h"

#include <map>
#include <set>

#include "core/dispatch.h"
#include "cuda/graph.h"

namespace ag::nn {

namespace {
bool has_name(const auto& entries, const std::string& name) {
  for (const auto& [entry_name, value] : entries)
    if (entry_name == name) return true;
  return false;
}

// Swaps the storage inside the TensorImpl, so every holder of `t` (a module
// member, a tied head, an optimizer) sees the converted values.
void convert_in_place(const Tensor& t, const Tensor& converted) {
  t.impl()->storage = converted.impl()->storage;
  t.impl()->offset = converted.impl()->offset;
  t.impl()->dtype = converted.dtype();
  t.impl()->grad.reset();
  t.impl()->grad_pinned = false;
}
}  // namespace

Tensor Module::register_parameter(const std::string& name, Tensor value) {
  AG_CHECK(!name.empty() && name.find('.') == std::string::npos,
           "register_parameter: invalid name '" << name << "' (non-empty, no dots)");
  AG_CHECK(!has_name(parameters_, name) && !has_name(children_, name),
           "register_parameter: name '" << name << "' is already taken");
  value.requires_grad_();
  parameters_.emplace_back(name, value);
  return value;
}

void Module::add_child(const std::string& name, std::shared_ptr<Module> module) {
  AG_CHECK(!name.empty(), "register_module: empty name");
  AG_CHECK(!has_name(parameters_, name) && !has_name(children_, name),
           "register_module: name '" << name << "' is already taken");
  children_.emplace_back(name, std::move(module));
}

void Module::set_activation_hook(ActivationHook hook) {
  set_hook(hook ? std::make_shared<const ActivationHook>(std::move(hook)) : nullptr, "");
}

void Module::set_hook(const std::shared_ptr<const ActivationHook>& hook, const std::string& path) {
  hook_ = hook;
  path_ = path;
  for (const auto& [name, child] : children_) child->set_hook(hook, path.empty() ? name : path + "." + name);
}

Tensor Module::observe(const std::string& part, Tensor activation) const {
  if (!hook_) return activation;
  // A CUDA graph would run the hook once, at its capture, and never at a replay: refuse there, so the
  // capture fails and the step runs eagerly (optim::TrainStep says why and keeps the graph off).
  AG_CHECK(!cuda::capturing_graph(), "an activation hook (Module::set_activation_hook) cannot run inside a "
                                     "captured CUDA graph: it would see the captured step alone");
  (*hook_)(path_.empty() || part.empty() ? path_ + part : path_ + "." + part, activation);
  return activation;
}

// Own parameters first, then each child's subtree, in registration order.
void Module::collect(const std::string& prefix, std::vector<NamedTensor>& out) const {
  for (const auto& [name, tensor] : parameters_) out.push_back({prefix + name, tensor});
  for (const auto& [name, child] : children_) child->collect(prefix + name + ".", out);
}

std::vector<NamedTensor> Module::named_parameters() const {
  std::vector<NamedTensor> all, unique;
  collect("", all);
  std::set<const TensorImpl*> seen;
  for (NamedTensor& p : all)
    if (seen.insert(p.tensor.impl()).second) unique.push_back(std::move(p));
  return unique;
}

std::vector<Tensor> Module::parameters() const {
  std::vector<Tensor> out;
  for (NamedTensor& p : named_parameters()) out.push_back(std::move(p.tensor));
  return out;
}

int64_t Module::num_parameters() const {
  int64_t n = 0;
  for (const NamedTensor& p : named_parameters()) n += p.tensor.numel();
  return n;
}

void Module::zero_grad() {
  for (Tensor& p : parameters()) p.zero_grad();
}

void Module::train(bool training) {
  training_ = training;
  for (auto& [name, child] : children_) child->train(training);
}

std::vector<NamedTensor> Module::state() const {
  std::vector<NamedTensor> out = named_parameters();
  for (NamedTensor& p : out) p.tensor = p.tensor.detach();
  return out;
}

void Module::load_state(const std::vector<NamedTensor>& state) {
  std::map<std::string, const Tensor*> given;
  for (const NamedTensor& s : state) given[s.name] = &s.tensor;
  const std::vector<NamedTensor> params = named_parameters();
  for (const NamedTensor& p : params) {
    const auto it = given.find(p.name);
    AG_CHECK(it != given.end(), "load_state: parameter '" << p.name << "' is missing from the state");
    const Tensor& src = *it->second;
    AG_CHECK(src.shape() == p.tensor.shape() && src.dtype() == p.tensor.dtype(),
             "load_state: parameter '" << p.name << "' is " << describe(p.tensor)
                                       << " but the state holds " << describe(src));
  }
  for (const NamedTensor& s : state)
    AG_CHECK(has_name(params, s.name),
             "load_state: the state holds '" << s.name << "', which is not a parameter here");
  for (const NamedTensor& p : params) {
    Tensor dst = p.tensor;
    kernel::cast(given[p.name]->to(dst.device()), dst);  // same dtype: a plain copy
  }
}

void Module::to(DType dtype) {
  for (const Tensor& p : parameters()) convert_in_place(p, p.detach().to(dtype));
}

void Module::to(Device device) {
  for (const Tensor& p : parameters()) convert_in_place(p, p.detach().to(device));
}

}  // namespace ag::nn
