// nn::Module: a named tree of parameters. A module registers its parameters
// ("weight", "bias") and its submodules ("attn", "blocks.0") by name; a
// parameter's full name is the path down the tree ("blocks.0.attn.w_q.weight"),
// and that name is its checkpoint key.
//
// Modules own no autograd logic: forward() composes differentiable ops, and
// backward() on the loss reaches every parameter through them. Each module
// defines its own forward with the shapes it takes (an embedding takes indices,
// a block takes activations), so the base class declares none.
#pragma once
#include <functional>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "core/tensor.h"

namespace ag::nn {

// Not copyable: a copy would share every parameter with the original.
class Module {
 public:
  Module() = default;
  Module(const Module&) = delete;
  Module& operator=(const Module&) = delete;
  virtual ~Module() = default;

  // Every parameter with its full name: the module's own in registration order,
  // then each submodule's, depth first (PyTorch's order). A tensor registered
  // under several names (a tied weight) is listed once, under the first.
  std::vector<NamedTensor> named_parameters() const;
  std::vector<Tensor> parameters() const;
  int64_t num_parameters() const;  // total elements, each tensor counted once
  void zero_grad();

  // Training mode switches dropout on; it applies to the whole subtree.
  void train(bool training = true);
  void eval() { train(false); }
  bool is_training() const { return training_; }

  // The parameters' values by name, as detached views that share storage
  // (save them with ag::save_safetensors).
  std::vector<NamedTensor> state() const;
  // Copies each parameter's value from `state` into the parameter's existing
  // storage, so optimizers holding the tensors see the new values. Throws
  // ag::Error naming the parameter when one is missing from `state`, has another
  // shape or dtype, or when `state` holds a name the module does not have.
  void load_state(const std::vector<NamedTensor>& state);

  // Converts every parameter in place: the Tensor objects (and anything that
  // holds them, such as a tied head) keep their identity; gradients are dropped.
  void to(DType dtype);
  void to(Device device);

  // What a program that looks at activations registers (PyTorch's forward
  // hooks): called with each activation a forward names (observe), in the
  // order computed, by the name of the module that produced it as its
  // parameters are named ("blocks.0.attn": the output of the module whose
  // parameters are blocks.0.attn.*). Set on a module, it reaches the subtree
  // registered by then; an empty function removes it. The modules themselves
  // only name their activations: what is done with them is the hook's.
  using ActivationHook = std::function<void(const std::string& name, const Tensor& activation)>;
  void set_activation_hook(ActivationHook hook);
  ActivationHook activation_hook() const { return hook_ ? *hook_ : ActivationHook(); }

 protected:
  // Hands `activation` to the hook, if one is set, named by this module's path
  // and `part`: a submodule's name ("attn"), or "" for this module's own
  // output. Returns it.
  Tensor observe(const std::string& part, Tensor activation) const;

  // Registers `value` as parameter `name` (no dots) and sets requires_grad.
  // Returns the registered tensor; subclasses keep it as a member.
  Tensor register_parameter(const std::string& name, Tensor value);

  template <class M>
  std::shared_ptr<M> register_module(const std::string& name, std::shared_ptr<M> module) {
    add_child(name, module);
    return module;
  }

 private:
  void add_child(const std::string& name, std::shared_ptr<Module> module);
  void collect(const std::string& prefix, std::vector<NamedTensor>& out) const;

  void set_hook(const std::shared_ptr<const ActivationHook>& hook, const std::string& path);

  std::vector<std::pair<std::string, Tensor>> parameters_;
  std::vector<std::pair<std::string, std::shared_ptr<Module>>> children_;
  bool training_ = true;
  std::shared_ptr<const ActivationHook> hook_;  // set_activation_hook's, shared by the subtree
  std::string path_;                            // this module's name from where the hook was set ("blocks.0")
};

}  // namespace ag::nn
