// The device switch. Each entry point checks that its tensors share one device
// and forwards to that device's kernel, cpu:: (core/cpu/) or cuda:: (cuda/): at
// most two hops from an op to a loop. The check is profiler::KernelCall's, which
// also times the call while the profiler records (core/profiler.h); its first
// argument is the kernel's family, the basename of the file that implements it.
//
// The entry points are generated from core/kernels.inc, one per entry, so every
// kernel's cpu:: and cuda:: definitions are referenced from here: one missing
// (or defined with another signature) fails the link of every program.
#include "core/dispatch.h"

#include <array>
#include <cstddef>
#include <initializer_list>
#include <type_traits>

#include "core/cpu/cpu.h"
#include "core/profiler.h"
#include "cuda/cuda.h"

namespace ag::kernel {

namespace {

// A kernel's tensor arguments, in order: each `Tensor&` and `const Tensor&`, and
// each `Tensor*` (an optional one, possibly null). These are what KernelCall
// checks for one device and what the profiler records the shapes of.
template <typename T>
constexpr bool is_tensor_argument = std::is_same_v<T, Tensor> || std::is_same_v<T, Tensor*> ||
                                    std::is_same_v<T, const Tensor*>;

template <typename... Args>
constexpr std::size_t tensor_count = (std::size_t{is_tensor_argument<Args>} + ...);

template <typename... Args>
std::array<const Tensor*, tensor_count<Args...>> tensors_of(const Args&... args) {
  std::array<const Tensor*, tensor_count<Args...>> tensors{};
  static_assert(tensors.size() > 0, "a kernel's first tensor argument chooses its device");
  std::size_t i = 0;
  const auto take = [&](const auto& arg) {
    using T = std::decay_t<decltype(arg)>;
    if constexpr (std::is_same_v<T, Tensor>) tensors[i++] = &arg;
    else if constexpr (is_tensor_argument<T>) tensors[i++] = arg;
  };
  (take(args), ...);
  return tensors;
}

// The GemmShape among a kernel's arguments (gemm's), which the profiler keeps; null for the others.
template <typename... Args>
const GemmShape* gemm_shape_of(const Args&... args) {
  const GemmShape* shape = nullptr;
  const auto take = [&](const auto& arg) {
    if constexpr (std::is_same_v<std::decay_t<decltype(arg)>, GemmShape>) shape = &arg;
  };
  (take(args), ...);
  return shape;
}

// The check of an AG_KERNEL entry: none beyond KernelCall's device check.
template <typename... Args>
void no_check(const Args&...) {}

// The checks of the AG_CHECKED_KERNEL entries, check_<name>, called with the
// kernel's arguments before the device check, once for both devices.

// The optimizer updates' sizes.
void check_update_sizes(const char* kernel, const Tensor& param, std::initializer_list<const Tensor*> others) {
  for (const Tensor* t : others)
    AG_CHECK(t->numel() == param.numel(),
             kernel << ": param " << describe(param) << " and " << describe(*t) << " differ in size");
}

void check_adam_step(const Tensor& param, const Tensor& grad, const Tensor& m, const Tensor& v,
                     const AdamHyper& hyper) {
  check_update_sizes("adam_step", param, {&grad, &m, &v});
  AG_CHECK(hyper.applied_steps, "adam_step: no step count (applied_steps is null)");
}

void check_sgd_step(const Tensor& param, const Tensor& grad, const Tensor& momentum_buffer, const SgdHyper& hyper) {
  // Without momentum there is no buffer (the argument is never read).
  if (hyper.momentum != 0.0) check_update_sizes("sgd_step", param, {&grad, &momentum_buffer});
  else check_update_sizes("sgd_step", param, {&grad});
  AG_CHECK(hyper.applied_steps, "sgd_step: no step count (applied_steps is null)");
}

void check_count_applied_step(const Tensor& applied_steps, const double*) {
  AG_CHECK(applied_steps.numel() == 1 && applied_steps.dtype() == DType::Int64,
           "count_applied_step: applied_steps " << describe(applied_steps) << " is not one int64");
}

void check_sum_of_squares(const Tensor&, const Tensor& total) {
  AG_CHECK(total.numel() == 1 && total.dtype() == DType::Float64,
           "sum_of_squares: total " << describe(total) << " is not one float64");
}

void check_clip_by_norm(const Tensor&, const Tensor& sum_of_squares, double) {
  AG_CHECK(sum_of_squares.numel() == 1 && sum_of_squares.dtype() == DType::Float64,
           "clip_by_norm: sum_of_squares " << describe(sum_of_squares) << " is not one float64");
}

void check_cross_entropy_backward(const Tensor& logits, const Tensor&, const Tensor&, int64_t, const Tensor& scale,
                                  const Tensor&) {
  AG_CHECK(scale.numel() == 1 && scale.dtype() == logits.dtype(),
           "cross_entropy_backward: scale " << describe(scale) << " is not one element of the logits' dtype");
}

}  // namespace

// One entry point per kernel: e.g. for AG_KERNEL(elementwise, unary, (UnaryOp op,
// const Tensor& x, Tensor& y), (op, x, y)),
//
//   void unary(UnaryOp op, const Tensor& x, Tensor& y) {
//     no_check(op, x, y);  // check_unary(op, x, y) for an AG_CHECKED_KERNEL
//     const profiler::KernelCall call("elementwise", "unary", tensors_of(op, x, y), gemm_shape_of(op, x, y));
//     if (call.on_cpu()) cpu::unary(op, x, y);
//     else cuda::unary(op, x, y);
//   }
#define AG_DISPATCH(family, name, label, check, params, args)                                      \
  void name params {                                                                               \
    check args;                                                                                    \
    const profiler::KernelCall call(#family, label, tensors_of args, gemm_shape_of args);          \
    if (call.on_cpu()) cpu::name args;                                                             \
    else cuda::name args;                                                                          \
  }
#define AG_KERNEL(family, name, params, args) AG_DISPATCH(family, name, #name, no_check, params, args)
#define AG_CHECKED_KERNEL(family, name, params, args) AG_DISPATCH(family, name, #name, check_##name, params, args)
#define AG_KERNEL_PROFILED_AS(family, name, label, params, args) \
  AG_DISPATCH(family, name, label, no_check, params, args)
#include "core/kernels.inc"
#undef AG_DISPATCH

}  // namespace ag::kernel
