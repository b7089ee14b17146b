// The reverse-mode engine. Each differentiable op, after computing its output,
// records a Node: its inputs and a closure that maps dL/d(output) to dL/d(input)
// for each input. backward() sorts the nodes topologically (iteratively: deep
// graphs must not overflow the stack) and walks them in reverse, summing the
// gradients of a tensor used several times.
//
// Backward closures are written against the ops and kernel entry points, never a
// device's kernels, so one derivative serves every device. The engine runs them
// with gradient recording off.
#pragma once
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "core/tensor.h"

namespace ag {

// dL/d(input) for each input, in order; an undefined Tensor means "no gradient"
// (the input does not require one).
using Gradients = std::vector<Tensor>;
using BackwardFn = std::function<Gradients(const Tensor& dOut)>;

struct Node {
  std::string op;             // for error messages: "matmul", "softmax", ...
  std::vector<Tensor> inputs; // the tensors the op read, in the closure's order: leaves
                              // themselves, the others as edges without their memory
                              // (record: the closure keeps what it needs)
  BackwardFn backward;        // released (empty) once the graph is freed
  bool released() const { return !backward; }

  Node() = default;
  Node(const Node&) = delete;
  Node& operator=(const Node&) = delete;
  // Unlinks the chain of nodes only this one keeps alive, iteratively: the
  // default recursive destruction overflows the stack on deep graphs.
  ~Node();
};

// Whether ops record nodes. Off inside NoGradGuard and during backward.
bool grad_enabled();

// Inside a backward closure: whether this backward keeps the graph
// (retain_graph), so that the closure may run again. When it does not, the
// closure runs once and may write its gradients into the memory of tensors
// it saved (nothing else holds them), instead of new memory that would have to
// be fetched into cache before it is written.
bool graph_retained();

class NoGradGuard {
 public:
  NoGradGuard();
  ~NoGradGuard();
  NoGradGuard(const NoGradGuard&) = delete;
  NoGradGuard& operator=(const NoGradGuard&) = delete;

 private:
  bool previous_;
};

// Anomaly mode, as PyTorch's detect_anomaly: while a guard lives, the output of
// every recorded op and every gradient backward passes on is checked for NaN
// and Inf, and the first one found is an ag::Error naming the op (and saying
// whether its inputs were already non-finite). For finding where a diverged
// step went wrong: each check copies the tensor to the host.
bool anomaly_mode();
class AnomalyModeGuard {
 public:
  AnomalyModeGuard();
  ~AnomalyModeGuard();
  AnomalyModeGuard(const AnomalyModeGuard&) = delete;
  AnomalyModeGuard& operator=(const AnomalyModeGuard&) = delete;

 private:
  bool previous_;
};

// True unless the (floating) tensor holds a NaN or an infinity. Copies it to the host.
bool all_finite(const Tensor& t);

// For a backward closure: the gradient buffer `input` accumulates into, when
// the closure may add its gradient for `input` there itself, and otherwise an
// undefined tensor. That is a leaf's gradient pinned to a flat buffer
// (optim/flat_parameters.h), or the gradient already pending for an interior
// node's output when nothing else holds it (a tensor read by several ops gets
// one gradient from each: the first is pending when the next arrives). A
// closure that adds into it returns an undefined gradient for that input
// (nothing is left to accumulate). Lets a product write dW = Xᵀ dY straight
// into the flat buffer, or dX = dY Wᵀ onto the attention input's pending
// gradient (GEMM with beta = 1): no gradient tensor, no zeroing pass, no
// separate addition.
Tensor accumulation_target(const Tensor& input);

// True when recording is on and some input requires a gradient.
bool any_requires_grad(const std::vector<Tensor>& inputs);

// Makes `out` the result of a tracked op if any input needs a gradient; returns out.
// Ops call it as:  return record("mul", {a, b}, out, [=](const Tensor& dOut) { ... });
// The closure must capture saved tensors with detach() (or its inputs), never `out`
// itself: the output owns its node, so capturing it would make a reference cycle.
Tensor record(const char* op, std::vector<Tensor> inputs, Tensor out, BackwardFn backward);

}  // namespace ag
