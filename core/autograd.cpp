#include "core/autograd.h"

#include <algorithm>
#include <cmath>
#include <unordered_map>
#include <unordered_set>

#include "core/dispatch.h"
#include "core/ops.h"

namespace ag {

namespace {
thread_local bool grad_mode = true;
thread_local bool anomaly = false;
thread_local bool retained = false;  // during backward: its retain_graph
// During backward: its gradients pending for interior nodes (accumulation_target reads them).
thread_local std::unordered_map<Node*, Tensor>* running_pending = nullptr;

// dst += src in place, where dst may be undefined (then it takes a copy of src:
// src may alias a tensor the caller still uses). In place, so a gradient pinned
// to a flat buffer stays there and a step allocates no gradient tensors.
void accumulate(std::shared_ptr<TensorImpl>& dst, const Tensor& src) {
  if (!dst) {
    dst = src.clone().shared_impl();
    return;
  }
  Tensor sum(dst);
  kernel::binary(kernel::BinaryOp::Add, sum, src, sum);
}

// A pending gradient may be added to in place when nothing else holds it or its
// memory: a closure may return one tensor for two inputs, as add's does, or a
// saved tensor itself.
bool sole_owner(const Tensor& pending) {
  return pending.shared_impl().use_count() == 1 && pending.impl()->storage.use_count() == 1;
}

// A second gradient for an interior node's output, added to the one pending:
// in place when it may be (sole_owner), else into a new tensor. In place, the
// sum needs no new memory and writes memory that is in cache (the residual
// stream's gradients, every block).
void add_to_pending(Tensor& pending, const Tensor& gradient) {
  if (sole_owner(pending))
    kernel::binary(kernel::BinaryOp::Add, pending, gradient, pending);
  else
    pending = add(pending, gradient);
}

// Nodes reachable from root, each after every node that consumes its output.
// Owning pointers: freeing a node's inputs during the walk may drop the last
// other reference to a node not yet visited.
std::vector<std::shared_ptr<Node>> topological_order(const std::shared_ptr<Node>& root) {
  std::vector<std::shared_ptr<Node>> order;
  std::unordered_set<Node*> visited{root.get()};
  std::vector<std::pair<std::shared_ptr<Node>, size_t>> stack{{root, 0}};  // node, next input to visit
  while (!stack.empty()) {
    auto& [node, next] = stack.back();
    if (next < node->inputs.size()) {
      const std::shared_ptr<Node>& child = node->inputs[next++].grad_fn();
      if (child && visited.insert(child.get()).second) stack.push_back({child, 0});
    } else {
      order.push_back(node);
      stack.pop_back();
    }
  }
  std::reverse(order.begin(), order.end());  // consumers first
  return order;
}

void check_not_released(const Node& node) {
  AG_CHECK(!node.released(),
           "backward: through a freed graph (op '" << node.op << "'): the graph is freed after "
           "backward() unless backward(retain_graph=true) is used");
}
}  // namespace

Node::~Node() {
  backward = nullptr;  // a closure may hold an input too: let `inputs` hold its last reference
  std::vector<Tensor> pending = std::move(inputs);
  while (!pending.empty()) {
    Tensor t = std::move(pending.back());
    pending.pop_back();
    // If t is the last reference to its tensor and that tensor the last to its
    // node, the node dies with t: take its inputs first so it dies without recursing.
    if (t.defined() && t.shared_impl().use_count() == 1 && t.grad_fn() && t.grad_fn().use_count() == 1) {
      std::vector<Tensor>& grand = t.grad_fn()->inputs;
      std::move(grand.begin(), grand.end(), std::back_inserter(pending));
      grand.clear();
    }
  }
}

bool grad_enabled() { return grad_mode; }
bool graph_retained() { return retained; }

bool anomaly_mode() { return anomaly; }
AnomalyModeGuard::AnomalyModeGuard() : previous_(anomaly) { anomaly = true; }
AnomalyModeGuard::~AnomalyModeGuard() { anomaly = previous_; }

// One pass over the elements in their own dtype (a tensor on a device is copied to the host first): no float64 copy,
// since a check of every activation (char_lm's read-only commands) runs it on every forward.
bool all_finite(const Tensor& t) {
  if (!is_floating(t.dtype())) return true;
  const Tensor host = t.to(Device::CPU);
  return visit_dtype(host.dtype(), [&](auto zero) {
    using T = decltype(zero);
    const T* p = host.data<T>();
    return std::all_of(p, p + host.numel(), [](T v) { return std::isfinite(v); });
  });
}

NoGradGuard::NoGradGuard() : previous_(grad_mode) { grad_mode = false; }
NoGradGuard::~NoGradGuard() { grad_mode = previous_; }

Tensor accumulation_target(const Tensor& input) {
  if (!input.requires_grad()) return Tensor();
  if (input.is_leaf()) return input.impl()->grad_pinned ? input.grad() : Tensor();
  if (!running_pending) return Tensor();
  const auto found = running_pending->find(input.grad_fn().get());
  if (found == running_pending->end() || !sole_owner(found->second)) return Tensor();
  return found->second;
}

namespace {
// An input as the graph keeps it. The backward closures capture the data they
// need themselves, so every input but a leaf (whose gradient accumulates in it)
// is kept as an edge: its node, shape and dtype, and none of its memory (an
// output that only feeds this op, as the MLP's pre-activation does, is freed as
// soon as the forward has read it, not after the backward).
// The edges' storage: never destroyed (as the allocators), since an edge may
// outlive static destruction.
const std::shared_ptr<Storage>& no_memory(Device device) {
  static const auto* cpu = new std::shared_ptr<Storage>(std::make_shared<Storage>(0, Device::CPU));
  if (device == Device::CPU) return *cpu;
  static const auto* cuda = new std::shared_ptr<Storage>(std::make_shared<Storage>(0, Device::CUDA));
  return *cuda;
}
Tensor graph_edge(const Tensor& t) {
  if (!t.defined() || t.is_leaf()) return t;
  auto edge = std::make_shared<TensorImpl>();
  edge->storage = no_memory(t.device());
  edge->shape = t.shape();
  edge->dtype = t.dtype();
  edge->requires_grad = t.requires_grad();
  edge->grad_fn = t.grad_fn();
  return Tensor(std::move(edge));
}
}  // namespace

bool any_requires_grad(const std::vector<Tensor>& inputs) {
  if (!grad_mode) return false;
  for (const Tensor& t : inputs)
    if (t.defined() && t.requires_grad()) return true;
  return false;
}

Tensor record(const char* op, std::vector<Tensor> inputs, Tensor out, BackwardFn backward) {
  if (!any_requires_grad(inputs)) return out;
  if (anomaly && !all_finite(out)) {
    bool inputs_finite = true;
    for (const Tensor& t : inputs) inputs_finite = inputs_finite && (!t.defined() || all_finite(t));
    throw Error(std::string("anomaly mode: the forward of '") + op + "' " +
                (inputs_finite ? "produced a non-finite value from finite inputs" : "received a non-finite input") +
                " (output " + describe(out) + ")");
  }
  auto node = std::make_shared<Node>();
  node->op = op;
  for (Tensor& t : inputs) t = graph_edge(t);
  node->inputs = std::move(inputs);
  node->backward = std::move(backward);
  out.impl()->grad_fn = std::move(node);
  out.impl()->requires_grad = true;
  return out;
}

void Tensor::backward(bool retain_graph) const {
  AG_CHECK(numel() == 1, "backward: called on a tensor of shape "
                             << to_string(shape())
                             << " without an upstream gradient; only a one-element tensor "
                                "(a scalar loss) has the implicit gradient 1");
  backward(Tensor::ones(shape(), dtype(), device()), retain_graph);
}

void Tensor::backward(const Tensor& upstream, bool retain_graph) const {
  AG_CHECK(requires_grad(), "backward: the tensor does not require grad (no input of the "
                            "computation had requires_grad set)");
  AG_CHECK(upstream.shape() == shape() && upstream.dtype() == dtype(),
           "backward: upstream gradient " << describe(upstream) << " does not match tensor "
                                          << describe(*this));
  NoGradGuard no_grad;
  if (is_leaf()) {
    accumulate(impl_->grad, upstream);
    return;
  }
  check_not_released(*grad_fn());
  struct RetainedFlag {  // graph_retained() for the closures, restored on any exit
    bool previous = retained;
    explicit RetainedFlag(bool value) { retained = value; }
    ~RetainedFlag() { retained = previous; }
  } retained_flag(retain_graph);
  std::unordered_map<Node*, Tensor> pending{{grad_fn().get(), upstream}};
  struct RunningPending {  // accumulation_target's view of `pending`, restored on any exit
    std::unordered_map<Node*, Tensor>* previous = running_pending;
    explicit RunningPending(std::unordered_map<Node*, Tensor>* now) { running_pending = now; }
    ~RunningPending() { running_pending = previous; }
  } running(&pending);
  for (const std::shared_ptr<Node>& node : topological_order(grad_fn())) {
    check_not_released(*node);
    auto found = pending.find(node.get());
    if (found == pending.end()) continue;  // no gradient flowed to it
    const Tensor dOut = std::move(found->second);
    pending.erase(found);
    const Gradients grads = node->backward(dOut);
    for (size_t i = 0; i < node->inputs.size(); ++i) {
      const Tensor& input = node->inputs[i];
      if (!input.requires_grad() || !grads[i].defined()) continue;
      AG_CHECK(!anomaly || all_finite(grads[i]),
               "anomaly mode: the backward of '" << node->op << "' " << (all_finite(dOut) ? "produced" : "passed on")
                                                 << " a non-finite gradient for its input " << i << " ("
                                                 << describe(grads[i]) << ")");
      AG_CHECK(grads[i].shape() == input.shape(),
               "backward: internal error in '" << node->op << "': gradient " << describe(grads[i])
                                               << " for input " << describe(input));
      if (input.is_leaf()) {
        accumulate(input.impl()->grad, grads[i]);
      } else {
        auto [it, inserted] = pending.try_emplace(input.grad_fn().get(), grads[i]);
        if (!inserted) add_to_pending(it->second, grads[i]);
      }
    }
    if (!retain_graph) {
      node->backward = nullptr;
      node->inputs.clear();
    }
  }
}

}  // namespace ag
