// The device switch. Each entry point checks that its tensors share one device
// and forwards to that device's kernel, cpu:: (core/cpu/) or cuda:: (cuda/): at
// most two hops from an op to a loop.
#include "core/dispatch.h"

#include <initializer_list>

#include "core/cpu/cpu.h"
#include "cuda/cuda.h"

namespace ag::kernel {

namespace {
// The device every tensor is on; mixing devices is an error named after the kernel.
Device device_of(const char* kernel, std::initializer_list<const Tensor*> tensors) {
  const Device device = (*tensors.begin())->device();
  for (const Tensor* t : tensors)
    AG_CHECK(t->device() == device, kernel << ": tensors on different devices ("
                                           << device_name(device) << " and "
                                           << device_name(t->device()) << ")");
  return device;
}

// True for CPU tensors, false for CUDA ones (after the same-device check).
bool on_cpu(const char* kernel, std::initializer_list<const Tensor*> tensors) {
  return device_of(kernel, tensors) == Device::CPU;
}

// The optimizer updates' sizes are checked here, once for both devices.
void check_update_sizes(const char* kernel, const Tensor& param, std::initializer_list<const Tensor*> others) {
  for (const Tensor* t : others)
    AG_CHECK(t->numel() == param.numel(),
             kernel << ": param " << describe(param) << " and " << describe(*t) << " differ in size");
}
}  // namespace

void copy_strided(const Tensor& src, const StridedView& src_view, Tensor& dst,
                  const StridedView& dst_view, const Shape& shape) {
  if (on_cpu("copy_strided", {&src, &dst})) cpu::copy_strided(src, src_view, dst, dst_view, shape);
  else cuda::copy_strided(src, src_view, dst, dst_view, shape);
}
void fill(Tensor& out, double value) {
  if (on_cpu("fill", {&out})) cpu::fill(out, value);
  else cuda::fill(out, value);
}
void cast(const Tensor& src, Tensor& dst) {
  if (on_cpu("cast", {&src, &dst})) cpu::cast(src, dst);
  else cuda::cast(src, dst);
}

void unary(UnaryOp op, const Tensor& x, Tensor& y) {
  if (on_cpu("unary", {&x, &y})) cpu::unary(op, x, y);
  else cuda::unary(op, x, y);
}
void unary_backward(UnaryOp op, const Tensor& x, const Tensor& dY, Tensor& dX) {
  if (on_cpu("unary_backward", {&x, &dY, &dX})) cpu::unary_backward(op, x, dY, dX);
  else cuda::unary_backward(op, x, dY, dX);
}
void affine(const Tensor& x, double scale, double shift, Tensor& y) {
  if (on_cpu("affine", {&x, &y})) cpu::affine(x, scale, shift, y);
  else cuda::affine(x, scale, shift, y);
}
void pow_scalar(const Tensor& x, double exponent, Tensor& y) {
  if (on_cpu("pow", {&x, &y})) cpu::pow_scalar(x, exponent, y);
  else cuda::pow_scalar(x, exponent, y);
}
void binary(BinaryOp op, const Tensor& a, const Tensor& b, Tensor& out) {
  if (on_cpu("binary", {&a, &b, &out})) cpu::binary(op, a, b, out);
  else cuda::binary(op, a, b, out);
}

void sum_to_shape(const Tensor& x, Tensor& out) {
  if (on_cpu("sum_to_shape", {&x, &out})) cpu::sum_to_shape(x, out);
  else cuda::sum_to_shape(x, out);
}
void max_dim(const Tensor& x, const ReduceDims& dims, Tensor& values, Tensor& argmax) {
  if (on_cpu("max_dim", {&x, &values, &argmax})) cpu::max_dim(x, dims, values, argmax);
  else cuda::max_dim(x, dims, values, argmax);
}
void max_dim_backward(const Tensor& dValues, const Tensor& argmax, const ReduceDims& dims,
                      Tensor& dX) {
  if (on_cpu("max_dim_backward", {&dValues, &argmax, &dX}))
    cpu::max_dim_backward(dValues, argmax, dims, dX);
  else
    cuda::max_dim_backward(dValues, argmax, dims, dX);
}

void gemm(const GemmShape& shape, const Tensor& A, const Tensor& B, Tensor& C) {
  if (on_cpu("gemm", {&A, &B, &C})) cpu::gemm(shape, A, B, C);
  else cuda::gemm(shape, A, B, C);
}

void softmax(const Tensor& x, Tensor& y) {
  if (on_cpu("softmax", {&x, &y})) cpu::softmax(x, y);
  else cuda::softmax(x, y);
}
void softmax_backward(const Tensor& y, const Tensor& dY, Tensor& dX) {
  if (on_cpu("softmax_backward", {&y, &dY, &dX})) cpu::softmax_backward(y, dY, dX);
  else cuda::softmax_backward(y, dY, dX);
}
void causal_softmax(const Tensor& x, Tensor& y) {
  if (on_cpu("causal_softmax", {&x, &y})) cpu::causal_softmax(x, y);
  else cuda::causal_softmax(x, y);
}
void log_softmax(const Tensor& x, Tensor& y) {
  if (on_cpu("log_softmax", {&x, &y})) cpu::log_softmax(x, y);
  else cuda::log_softmax(x, y);
}
void log_softmax_backward(const Tensor& y, const Tensor& dY, Tensor& dX) {
  if (on_cpu("log_softmax_backward", {&y, &dY, &dX})) cpu::log_softmax_backward(y, dY, dX);
  else cuda::log_softmax_backward(y, dY, dX);
}
void cross_entropy(const Tensor& logits, const Tensor& targets, int64_t ignore_index,
                   Tensor& loss, Tensor& lse, Tensor& scored) {
  if (on_cpu("cross_entropy", {&logits, &targets, &loss, &lse, &scored}))
    cpu::cross_entropy(logits, targets, ignore_index, loss, lse, scored);
  else
    cuda::cross_entropy(logits, targets, ignore_index, loss, lse, scored);
}
void cross_entropy_backward(const Tensor& logits, const Tensor& targets, const Tensor& lse,
                            int64_t ignore_index, const Tensor& scale, Tensor& dLogits) {
  AG_CHECK(scale.numel() == 1 && scale.dtype() == logits.dtype(),
           "cross_entropy_backward: scale " << describe(scale) << " is not one element of the logits' dtype");
  if (on_cpu("cross_entropy_backward", {&logits, &targets, &lse, &scale, &dLogits}))
    cpu::cross_entropy_backward(logits, targets, lse, ignore_index, scale, dLogits);
  else
    cuda::cross_entropy_backward(logits, targets, lse, ignore_index, scale, dLogits);
}

void layer_norm(const Tensor& x, const Tensor& weight, const Tensor& bias, double eps, Tensor& y,
                Tensor& mean, Tensor& rstd) {
  if (on_cpu("layer_norm", {&x, &weight, &bias, &y, &mean, &rstd}))
    cpu::layer_norm(x, weight, bias, eps, y, mean, rstd);
  else
    cuda::layer_norm(x, weight, bias, eps, y, mean, rstd);
}
void layer_norm_backward(const Tensor& x, const Tensor& weight, const Tensor& mean,
                         const Tensor& rstd, const Tensor& dY, Tensor& dX, Tensor& dWeight,
                         Tensor& dBias) {
  if (on_cpu("layer_norm_backward", {&x, &weight, &mean, &rstd, &dY, &dX, &dWeight, &dBias}))
    cpu::layer_norm_backward(x, weight, mean, rstd, dY, dX, dWeight, dBias);
  else
    cuda::layer_norm_backward(x, weight, mean, rstd, dY, dX, dWeight, dBias);
}

void embedding(const Tensor& weight, const Tensor& indices, Tensor& out) {
  if (on_cpu("embedding", {&weight, &indices, &out})) cpu::embedding(weight, indices, out);
  else cuda::embedding(weight, indices, out);
}
void embedding_backward(const Tensor& dOut, const Tensor& indices, Tensor& dWeight) {
  if (on_cpu("embedding_backward", {&dOut, &indices, &dWeight}))
    cpu::embedding_backward(dOut, indices, dWeight);
  else
    cuda::embedding_backward(dOut, indices, dWeight);
}

void dropout(const Tensor& x, double p, uint64_t seed, uint64_t offset, Tensor& y) {
  if (on_cpu("dropout", {&x, &y})) cpu::dropout(x, p, seed, offset, y);
  else cuda::dropout(x, p, seed, offset, y);
}

void adam_step(Tensor& param, const Tensor& grad, Tensor& m, Tensor& v, const AdamHyper& hyper) {
  check_update_sizes("adam_step", param, {&grad, &m, &v});
  AG_CHECK(hyper.step >= 1, "adam_step: step must be >= 1, got " << hyper.step);
  if (on_cpu("adam_step", {&param, &grad, &m, &v})) cpu::adam_step(param, grad, m, v, hyper);
  else cuda::adam_step(param, grad, m, v, hyper);
}
void sgd_step(Tensor& param, const Tensor& grad, Tensor& momentum_buffer, const SgdHyper& hyper) {
  // Without momentum there is no buffer (the argument is never read).
  if (hyper.momentum != 0.0) check_update_sizes("sgd_step", param, {&grad, &momentum_buffer});
  else check_update_sizes("sgd_step", param, {&grad});
  if (on_cpu("sgd_step", {&param, &grad, &momentum_buffer})) cpu::sgd_step(param, grad, momentum_buffer, hyper);
  else cuda::sgd_step(param, grad, momentum_buffer, hyper);
}
void sum_of_squares(const Tensor& x, Tensor& total) {
  AG_CHECK(total.numel() == 1 && total.dtype() == DType::Float64,
           "sum_of_squares: total " << describe(total) << " is not one float64");
  if (on_cpu("sum_of_squares", {&x, &total})) cpu::sum_of_squares(x, total);
  else cuda::sum_of_squares(x, total);
}
void clip_by_norm(Tensor& x, const Tensor& sum_of_squares, double max_norm) {
  AG_CHECK(sum_of_squares.numel() == 1 && sum_of_squares.dtype() == DType::Float64,
           "clip_by_norm: sum_of_squares " << describe(sum_of_squares) << " is not one float64");
  if (on_cpu("clip_by_norm", {&x, &sum_of_squares})) cpu::clip_by_norm(x, sum_of_squares, max_norm);
  else cuda::clip_by_norm(x, sum_of_squares, max_norm);
}

}  // namespace ag::kernel
