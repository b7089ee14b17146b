// The kernel entry points: the one place that chooses the CPU or the CUDA
// implementation of each kernel (core/dispatch.cpp). Ops and their backward
// closures call these, never cpu:: or cuda:: directly, so a derivative written
// once serves every device.
//
// Kernels compute; they know nothing of autograd. Every tensor argument is
// contiguous; outputs are allocated by the caller with the documented shape and
// the inputs' dtype and device. Shapes use the users' alphabet: N rows, C
// features, V vocabulary, M/K/N for products.
#pragma once
#include <cstdint>

#include "core/tensor.h"

namespace ag::kernel {

// --- movement -------------------------------------------------------------------
// A strided view of a contiguous buffer: element (i_0, ..., i_{r-1}) of the view
// sits at offset + sum_k i_k * strides[k]. Stride 0 repeats (broadcasts) a dim.
struct StridedView {
  int64_t offset = 0;
  std::vector<int64_t> strides;
};
// For every index i of `shape`: dst[dst_view(i)] = src[src_view(i)]. One kernel
// serves permute, slice, concat, split and broadcast-expand.
void copy_strided(const Tensor& src, const StridedView& src_view, Tensor& dst,
                  const StridedView& dst_view, const Shape& shape);
void fill(Tensor& out, double value);
void cast(const Tensor& src, Tensor& dst);  // same shape, any dtypes

// --- elementwise ------------------------------------------------------------------
enum class UnaryOp { Neg, Exp, Log, Tanh, Relu, GeluErf, GeluTanh };
void unary(UnaryOp op, const Tensor& x, Tensor& y);
// dX = dY * f'(x) for the ops whose derivative is not a cheap expression of y:
// Relu, GeluErf, GeluTanh.
void unary_backward(UnaryOp op, const Tensor& x, const Tensor& dY, Tensor& dX);
// y = scale * x + shift (the scalar ops).
void affine(const Tensor& x, double scale, double shift, Tensor& y);
// y = x^exponent.
void pow_scalar(const Tensor& x, double exponent, Tensor& y);

enum class BinaryOp { Add, Sub, Mul, Div };
// out = a op b with numpy broadcasting; out has shape broadcast_shapes(a, b).
void binary(BinaryOp op, const Tensor& a, const Tensor& b, Tensor& out);

// --- reductions ---------------------------------------------------------------------
// Sums x into out, whose shape is x's with some dims set to 1 and/or leading
// dims removed (the adjoint of broadcasting out to x).
void sum_to_shape(const Tensor& x, Tensor& out);
// Max over dim of x [outer, n, inner] (as `ReduceDims`): values and argmax
// [outer, inner] (argmax int64; the first index on ties).
struct ReduceDims {
  int64_t outer, n, inner;
};
void max_dim(const Tensor& x, const ReduceDims& dims, Tensor& values, Tensor& argmax);
// dX [outer, n, inner] = 0 except dX[o, argmax[o,i], i] = dValues[o, i].
void max_dim_backward(const Tensor& dValues, const Tensor& argmax, const ReduceDims& dims,
                      Tensor& dX);

// --- products -------------------------------------------------------------------------
// For b in [0, batch): C_b = alpha * op(A_b) op(B_b) + beta * C_b, row-major, where
// op(A_b) is [M, K] (A_b stored [K, M] when trans_a), op(B_b) is [K, N] (B_b
// stored [N, K] when trans_b), C_b is [M, N]. A_b starts at a_offset + b *
// a_batch_stride elements (stride 0 reuses one matrix for the whole batch).
struct GemmShape {
  int64_t batch, M, N, K;
  bool trans_a = false, trans_b = false;
  int64_t a_offset = 0, b_offset = 0, c_offset = 0;
  int64_t a_batch_stride = 0, b_batch_stride = 0, c_batch_stride = 0;
  double alpha = 1.0, beta = 0.0;
};
void gemm(const GemmShape& shape, const Tensor& A, const Tensor& B, Tensor& C);

// --- softmax family (over the last dim, rows [N, C]) ------------------------------------
// Each subtracts the row max first. In softmax and causal_softmax a row that is
// entirely -inf (fully masked) gives zeros, not NaN; log_softmax and
// cross_entropy give NaN there, as PyTorch does (no log-probability exists).
void softmax(const Tensor& x, Tensor& y);
void softmax_backward(const Tensor& y, const Tensor& dY, Tensor& dX);      // dX = y*(dY - rowsum(dY*y))
// The attention softmax: x is [..., T, T] and row i of each T×T matrix keeps
// only columns j <= i (the causal mask); masked entries are skipped and written
// as exactly 0. Used with softmax_backward, which gives them zero gradient.
void causal_softmax(const Tensor& x, Tensor& y);
void log_softmax(const Tensor& x, Tensor& y);
void log_softmax_backward(const Tensor& y, const Tensor& dY, Tensor& dX);  // dX = dY - exp(y)*rowsum(dY)

// logits [N, V], targets int64 [N]. loss[n] = logsumexp(logits[n]) - logits[n, t_n]
// and lse[n] = logsumexp(logits[n]), both [N]; rows with t_n == ignore_index get
// loss 0. Throws if a target is outside [0, V) and not ignore_index.
void cross_entropy(const Tensor& logits, const Tensor& targets, int64_t ignore_index,
                   Tensor& loss, Tensor& lse);
// dLogits[n] = scale * (softmax(logits[n]) - onehot(t_n)), zero for ignored rows.
void cross_entropy_backward(const Tensor& logits, const Tensor& targets, const Tensor& lse,
                            int64_t ignore_index, double scale, Tensor& dLogits);

// --- layer norm (rows [N, C]) -------------------------------------------------------------
// y = (x - mean) * rstd * weight + bias; saves mean [N] and rstd [N] = 1/sqrt(var + eps).
void layer_norm(const Tensor& x, const Tensor& weight, const Tensor& bias, double eps, Tensor& y,
                Tensor& mean, Tensor& rstd);
// dX [N, C]; dWeight and dBias [C] are overwritten (not accumulated).
void layer_norm_backward(const Tensor& x, const Tensor& weight, const Tensor& mean,
                         const Tensor& rstd, const Tensor& dY, Tensor& dX, Tensor& dWeight,
                         Tensor& dBias);

// --- embedding --------------------------------------------------------------------------
// weight [V, C], indices int64 [N] -> out [N, C]. Throws on an index outside [0, V).
void embedding(const Tensor& weight, const Tensor& indices, Tensor& out);
// dWeight [V, C] (overwritten) = scatter-add of dOut [N, C] rows at indices;
// deterministic: the same bits every run.
void embedding_backward(const Tensor& dOut, const Tensor& indices, Tensor& dWeight);

// --- dropout ------------------------------------------------------------------------------
// y[i] = x[i] / (1 - p) if random_uniform(seed, offset + i) >= p, else 0. The
// mask is a pure function of (seed, offset + i), so backward recomputes it.
void dropout(const Tensor& x, double p, uint64_t seed, uint64_t offset, Tensor& y);

// --- optimizer updates (in place; param, grad and state tensors share one shape) ---
// Adam, in torch.optim's form, at step t >= 1:
//   g ← g + weight_decay·p            (Adam's L2 penalty; AdamW: p ← p − lr·weight_decay·p)
//   m ← β1·m + (1 − β1)·g,   v ← β2·v + (1 − β2)·g²
//   p ← p − lr · (m / (1 − β1^t)) / (√(v / (1 − β2^t)) + ε)
struct AdamHyper {
  double lr, beta1, beta2, eps, weight_decay;
  int64_t step;
  bool decoupled;  // true: AdamW's decay; false: Adam's L2 term
};
void adam_step(Tensor& param, const Tensor& grad, Tensor& m, Tensor& v, const AdamHyper& hyper);
// SGD in torch.optim's form: g ← g + wd·p; with momentum μ: b ← μ·b + (1 − dampening)·g
// (b ← g on the first step), g ← g + μ·b if nesterov else b; p ← p − lr·g.
struct SgdHyper {
  double lr, momentum, dampening, weight_decay;
  bool nesterov;
  bool first_step;
};
void sgd_step(Tensor& param, const Tensor& grad, Tensor& momentum_buffer, const SgdHyper& hyper);
double sum_of_squares(const Tensor& x);  // Σ x², accumulated in double
void scale_inplace(Tensor& x, double factor);

}  // namespace ag::kernel
