// The device switch. Each entry point checks that its tensors share one device
// and forwards to that device's kernel, cpu:: (core/cpu/) or cuda:: (cuda/): at
// most two hops from an op to a loop. The check is profiler::KernelCall's, which
// also times the call while the profiler records (core/profiler.h); its first
// argument is the kernel's family, the basename of the file that implements it.
#include "core/dispatch.h"

#include <initializer_list>

#include "core/cpu/cpu.h"
#include "core/profiler.h"
#include "cuda/cuda.h"

namespace ag::kernel {

namespace {
// The optimizer updates' sizes are checked here, once for both devices.
void check_update_sizes(const char* kernel, const Tensor& param, std::initializer_list<const Tensor*> others) {
  for (const Tensor* t : others)
    AG_CHECK(t->numel() == param.numel(),
             kernel << ": param " << describe(param) << " and " << describe(*t) << " differ in size");
}
}  // namespace

void copy_strided(const Tensor& src, const StridedView& src_view, Tensor& dst,
                  const StridedView& dst_view, const Shape& shape) {
  const profiler::KernelCall call("memory", "copy_strided", {&src, &dst});
  if (call.on_cpu()) cpu::copy_strided(src, src_view, dst, dst_view, shape);
  else cuda::copy_strided(src, src_view, dst, dst_view, shape);
}
void fill(Tensor& out, double value) {
  const profiler::KernelCall call("memory", "fill", {&out});
  if (call.on_cpu()) cpu::fill(out, value);
  else cuda::fill(out, value);
}
void cast(const Tensor& src, Tensor& dst) {
  const profiler::KernelCall call("memory", "cast", {&src, &dst});
  if (call.on_cpu()) cpu::cast(src, dst);
  else cuda::cast(src, dst);
}

void unary(UnaryOp op, const Tensor& x, Tensor& y) {
  const profiler::KernelCall call("elementwise", "unary", {&x, &y});
  if (call.on_cpu()) cpu::unary(op, x, y);
  else cuda::unary(op, x, y);
}
void unary_backward(UnaryOp op, const Tensor& x, const Tensor& dY, Tensor& dX) {
  const profiler::KernelCall call("elementwise", "unary_backward", {&x, &dY, &dX});
  if (call.on_cpu()) cpu::unary_backward(op, x, dY, dX);
  else cuda::unary_backward(op, x, dY, dX);
}
void affine(const Tensor& x, double scale, double shift, Tensor& y) {
  const profiler::KernelCall call("elementwise", "affine", {&x, &y});
  if (call.on_cpu()) cpu::affine(x, scale, shift, y);
  else cuda::affine(x, scale, shift, y);
}
void pow_scalar(const Tensor& x, double exponent, Tensor& y) {
  const profiler::KernelCall call("elementwise", "pow", {&x, &y});
  if (call.on_cpu()) cpu::pow_scalar(x, exponent, y);
  else cuda::pow_scalar(x, exponent, y);
}
void binary(BinaryOp op, const Tensor& a, const Tensor& b, Tensor& out) {
  const profiler::KernelCall call("elementwise", "binary", {&a, &b, &out});
  if (call.on_cpu()) cpu::binary(op, a, b, out);
  else cuda::binary(op, a, b, out);
}

void bias_activation(UnaryOp op, const Tensor& x, const Tensor& bias, Tensor& y, Tensor* derivative) {
  const profiler::KernelCall call("elementwise", "bias_activation", {&x, &bias, &y, derivative});
  if (call.on_cpu()) cpu::bias_activation(op, x, bias, y, derivative);
  else cuda::bias_activation(op, x, bias, y, derivative);
}
void bias_activation_backward(const Tensor& derivative, const Tensor& dY, Tensor& dX, Tensor& dBias) {
  const profiler::KernelCall call("elementwise", "bias_activation_backward", {&derivative, &dY, &dX, &dBias});
  if (call.on_cpu()) cpu::bias_activation_backward(derivative, dY, dX, dBias);
  else cuda::bias_activation_backward(derivative, dY, dX, dBias);
}

void sum_to_shape(const Tensor& x, Tensor& out) {
  const profiler::KernelCall call("reduce", "sum_to_shape", {&x, &out});
  if (call.on_cpu()) cpu::sum_to_shape(x, out);
  else cuda::sum_to_shape(x, out);
}
void max_dim(const Tensor& x, const ReduceDims& dims, Tensor& values, Tensor& argmax) {
  const profiler::KernelCall call("reduce", "max_dim", {&x, &values, &argmax});
  if (call.on_cpu()) cpu::max_dim(x, dims, values, argmax);
  else cuda::max_dim(x, dims, values, argmax);
}
void max_dim_backward(const Tensor& dValues, const Tensor& argmax, const ReduceDims& dims,
                      Tensor& dX) {
  const profiler::KernelCall call("reduce", "max_dim_backward", {&dValues, &argmax, &dX});
  if (call.on_cpu())
    cpu::max_dim_backward(dValues, argmax, dims, dX);
  else
    cuda::max_dim_backward(dValues, argmax, dims, dX);
}

void gemm(const GemmShape& shape, const Tensor& A, const Tensor& B, Tensor& C) {
  const profiler::KernelCall call("matmul", "gemm", {&A, &B, &C}, &shape);
  if (call.on_cpu()) cpu::gemm(shape, A, B, C);
  else cuda::gemm(shape, A, B, C);
}

void softmax(const Tensor& x, Tensor& y) {
  const profiler::KernelCall call("softmax", "softmax", {&x, &y});
  if (call.on_cpu()) cpu::softmax(x, y);
  else cuda::softmax(x, y);
}
void softmax_backward(const Tensor& y, const Tensor& dY, Tensor& dX) {
  const profiler::KernelCall call("softmax", "softmax_backward", {&y, &dY, &dX});
  if (call.on_cpu()) cpu::softmax_backward(y, dY, dX);
  else cuda::softmax_backward(y, dY, dX);
}
void log_softmax(const Tensor& x, Tensor& y) {
  const profiler::KernelCall call("softmax", "log_softmax", {&x, &y});
  if (call.on_cpu()) cpu::log_softmax(x, y);
  else cuda::log_softmax(x, y);
}
void log_softmax_backward(const Tensor& y, const Tensor& dY, Tensor& dX) {
  const profiler::KernelCall call("softmax", "log_softmax_backward", {&y, &dY, &dX});
  if (call.on_cpu()) cpu::log_softmax_backward(y, dY, dX);
  else cuda::log_softmax_backward(y, dY, dX);
}
void cross_entropy(const Tensor& logits, const Tensor& targets, int64_t ignore_index,
                   Tensor& loss, Tensor& lse, Tensor& scored) {
  const profiler::KernelCall call("softmax", "cross_entropy", {&logits, &targets, &loss, &lse, &scored});
  if (call.on_cpu())
    cpu::cross_entropy(logits, targets, ignore_index, loss, lse, scored);
  else
    cuda::cross_entropy(logits, targets, ignore_index, loss, lse, scored);
}
void cross_entropy_backward(const Tensor& logits, const Tensor& targets, const Tensor& lse,
                            int64_t ignore_index, const Tensor& scale, Tensor& dLogits) {
  AG_CHECK(scale.numel() == 1 && scale.dtype() == logits.dtype(),
           "cross_entropy_backward: scale " << describe(scale) << " is not one element of the logits' dtype");
  const profiler::KernelCall call("softmax", "cross_entropy_backward", {&logits, &targets, &lse, &scale, &dLogits});
  if (call.on_cpu())
    cpu::cross_entropy_backward(logits, targets, lse, ignore_index, scale, dLogits);
  else
    cuda::cross_entropy_backward(logits, targets, lse, ignore_index, scale, dLogits);
}

void attention_softmax(const Tensor& S, const AttentionMask& mask, Tensor& A, Tensor& L) {
  const profiler::KernelCall call("attention", "attention_softmax", {&S, &A, &L});
  if (call.on_cpu()) cpu::attention_softmax(S, mask, A, L);
  else cuda::attention_softmax(S, mask, A, L);
}
void attention_softmax_backward(const Tensor& A, const Tensor& dA, Tensor& dS) {
  const profiler::KernelCall call("attention", "attention_softmax_backward", {&A, &dA, &dS});
  if (call.on_cpu()) cpu::attention_softmax_backward(A, dA, dS);
  else cuda::attention_softmax_backward(A, dA, dS);
}
void flash_attention(const Tensor& Q, const Tensor& K, const Tensor& V, const AttentionShape& shape,
                     Tensor& Z, Tensor& L) {
  const profiler::KernelCall call("attention", "flash_attention", {&Q, &K, &V, &Z, &L});
  if (call.on_cpu()) cpu::flash_attention(Q, K, V, shape, Z, L);
  else cuda::flash_attention(Q, K, V, shape, Z, L);
}
void flash_attention_backward(const Tensor& Q, const Tensor& K, const Tensor& V, const Tensor& L,
                              const Tensor& dZ, const AttentionShape& shape, Tensor& dQ, Tensor& dK, Tensor& dV) {
  const profiler::KernelCall call("attention", "flash_attention_backward", {&Q, &K, &V, &L, &dZ, &dQ, &dK, &dV});
  if (call.on_cpu()) cpu::flash_attention_backward(Q, K, V, L, dZ, shape, dQ, dK, dV);
  else cuda::flash_attention_backward(Q, K, V, L, dZ, shape, dQ, dK, dV);
}

void attention_features(const Tensor& X, const Tensor& omega, FeatureMap map, Tensor& Phi) {
  const profiler::KernelCall call("linear_attention", "attention_features", {&X, &omega, &Phi});
  if (call.on_cpu()) cpu::attention_features(X, omega, map, Phi);
  else cuda::attention_features(X, omega, map, Phi);
}
void attention_features_backward(const Tensor& X, const Tensor& omega, FeatureMap map, const Tensor& Phi,
                                 const Tensor& dPhi, Tensor& dX) {
  const profiler::KernelCall call("linear_attention", "attention_features_backward", {&X, &omega, &Phi, &dPhi, &dX});
  if (call.on_cpu()) cpu::attention_features_backward(X, omega, map, Phi, dPhi, dX);
  else cuda::attention_features_backward(X, omega, map, Phi, dPhi, dX);
}
void linear_attention_product(const Tensor& A, const Tensor& B, const Tensor& C, const PrefixProduct& how,
                              Tensor& Out) {
  const profiler::KernelCall call("linear_attention", "linear_attention_product", {&A, &B, &C, &Out});
  if (call.on_cpu()) cpu::linear_attention_product(A, B, C, how, Out);
  else cuda::linear_attention_product(A, B, C, how, Out);
}

void layer_norm(const Tensor& x, const Tensor& weight, const Tensor& bias, double eps, Tensor& y,
                Tensor& mean, Tensor& rstd) {
  const profiler::KernelCall call("layer_norm", "layer_norm", {&x, &weight, &bias, &y, &mean, &rstd});
  if (call.on_cpu())
    cpu::layer_norm(x, weight, bias, eps, y, mean, rstd);
  else
    cuda::layer_norm(x, weight, bias, eps, y, mean, rstd);
}
void add_layer_norm(const Tensor& x, const Tensor& residual, const Tensor& weight, const Tensor& bias, double eps,
                    Tensor& sum, Tensor& y, Tensor& mean, Tensor& rstd) {
  const profiler::KernelCall call("layer_norm", "add_layer_norm",
                                  {&x, &residual, &weight, &bias, &sum, &y, &mean, &rstd});
  if (call.on_cpu()) cpu::add_layer_norm(x, residual, weight, bias, eps, sum, y, mean, rstd);
  else cuda::add_layer_norm(x, residual, weight, bias, eps, sum, y, mean, rstd);
}
void layer_norm_backward(const Tensor& x, const Tensor& weight, const Tensor& mean,
                         const Tensor& rstd, const Tensor& dY, Tensor& dX, Tensor& dWeight,
                         Tensor& dBias) {
  const profiler::KernelCall call("layer_norm", "layer_norm_backward",
                                  {&x, &weight, &mean, &rstd, &dY, &dX, &dWeight, &dBias});
  if (call.on_cpu())
    cpu::layer_norm_backward(x, weight, mean, rstd, dY, dX, dWeight, dBias);
  else
    cuda::layer_norm_backward(x, weight, mean, rstd, dY, dX, dWeight, dBias);
}

void embedding(const Tensor& weight, const Tensor& indices, Tensor& out) {
  const profiler::KernelCall call("embedding", "embedding", {&weight, &indices, &out});
  if (call.on_cpu()) cpu::embedding(weight, indices, out);
  else cuda::embedding(weight, indices, out);
}
void embedding_backward(const Tensor& dOut, const Tensor& indices, Tensor& dWeight) {
  const profiler::KernelCall call("embedding", "embedding_backward", {&dOut, &indices, &dWeight});
  if (call.on_cpu())
    cpu::embedding_backward(dOut, indices, dWeight);
  else
    cuda::embedding_backward(dOut, indices, dWeight);
}

void dropout(const Tensor& x, double p, uint64_t seed, uint64_t offset, Tensor& y) {
  const profiler::KernelCall call("dropout", "dropout", {&x, &y});
  if (call.on_cpu()) cpu::dropout(x, p, seed, offset, y);
  else cuda::dropout(x, p, seed, offset, y);
}

void adam_step(Tensor& param, const Tensor& grad, Tensor& m, Tensor& v, const AdamHyper& hyper) {
  check_update_sizes("adam_step", param, {&grad, &m, &v});
  AG_CHECK(hyper.step >= 1, "adam_step: step must be >= 1, got " << hyper.step);
  const profiler::KernelCall call("optimizer", "adam_step", {&param, &grad, &m, &v});
  if (call.on_cpu()) cpu::adam_step(param, grad, m, v, hyper);
  else cuda::adam_step(param, grad, m, v, hyper);
}
void sgd_step(Tensor& param, const Tensor& grad, Tensor& momentum_buffer, const SgdHyper& hyper) {
  // Without momentum there is no buffer (the argument is never read).
  if (hyper.momentum != 0.0) check_update_sizes("sgd_step", param, {&grad, &momentum_buffer});
  else check_update_sizes("sgd_step", param, {&grad});
  const profiler::KernelCall call("optimizer", "sgd_step", {&param, &grad, &momentum_buffer});
  if (call.on_cpu()) cpu::sgd_step(param, grad, momentum_buffer, hyper);
  else cuda::sgd_step(param, grad, momentum_buffer, hyper);
}
void sum_of_squares(const Tensor& x, Tensor& total) {
  AG_CHECK(total.numel() == 1 && total.dtype() == DType::Float64,
           "sum_of_squares: total " << describe(total) << " is not one float64");
  const profiler::KernelCall call("optimizer", "sum_of_squares", {&x, &total});
  if (call.on_cpu()) cpu::sum_of_squares(x, total);
  else cuda::sum_of_squares(x, total);
}
void clip_by_norm(Tensor& x, const Tensor& sum_of_squares, double max_norm) {
  AG_CHECK(sum_of_squares.numel() == 1 && sum_of_squares.dtype() == DType::Float64,
           "clip_by_norm: sum_of_squares " << describe(sum_of_squares) << " is not one float64");
  const profiler::KernelCall call("optimizer", "clip_by_norm", {&x, &sum_of_squares});
  if (call.on_cpu()) cpu::clip_by_norm(x, sum_of_squares, max_norm);
  else cuda::clip_by_norm(x, sum_of_squares, max_norm);
}

}  // namespace ag::kernel
