// CPU kernels: plain loops (OpenMP across rows where the work is large enough)
// and OpenBLAS for products. The contracts are those of core/dispatch.h; only
// the dispatcher calls these.
#pragma once
#include "core/dispatch.h"

namespace ag::cpu {

using kernel::BinaryOp;
using kernel::GemmShape;
using kernel::ReduceDims;
using kernel::StridedView;
using kernel::UnaryOp;

// core/cpu/memory.cpp
void copy_strided(const Tensor& src, const StridedView& src_view, Tensor& dst,
                  const StridedView& dst_view, const Shape& shape);
void fill(Tensor& out, double value);
void cast(const Tensor& src, Tensor& dst);

// core/cpu/elementwise.cpp
void unary(UnaryOp op, const Tensor& x, Tensor& y);
void unary_backward(UnaryOp op, const Tensor& x, const Tensor& dY, Tensor& dX);
void affine(const Tensor& x, double scale, double shift, Tensor& y);
void pow_scalar(const Tensor& x, double exponent, Tensor& y);
void binary(BinaryOp op, const Tensor& a, const Tensor& b, Tensor& out);

// core/cpu/reduce.cpp
void sum_to_shape(const Tensor& x, Tensor& out);
void max_dim(const Tensor& x, const ReduceDims& dims, Tensor& values, Tensor& argmax);
void max_dim_backward(const Tensor& dValues, const Tensor& argmax, const ReduceDims& dims,
                      Tensor& dX);

// core/cpu/matmul.cpp
void gemm(const GemmShape& shape, const Tensor& A, const Tensor& B, Tensor& C);

// core/cpu/softmax.cpp
void softmax(const Tensor& x, Tensor& y);
void softmax_backward(const Tensor& y, const Tensor& dY, Tensor& dX);
void causal_softmax(const Tensor& x, Tensor& y);
void log_softmax(const Tensor& x, Tensor& y);
void log_softmax_backward(const Tensor& y, const Tensor& dY, Tensor& dX);
void cross_entropy(const Tensor& logits, const Tensor& targets, int64_t ignore_index,
                   Tensor& loss, Tensor& lse);
void cross_entropy_backward(const Tensor& logits, const Tensor& targets, const Tensor& lse,
                            int64_t ignore_index, double scale, Tensor& dLogits);

// core/cpu/layer_norm.cpp
void layer_norm(const Tensor& x, const Tensor& weight, const Tensor& bias, double eps, Tensor& y,
                Tensor& mean, Tensor& rstd);
void layer_norm_backward(const Tensor& x, const Tensor& weight, const Tensor& mean,
                         const Tensor& rstd, const Tensor& dY, Tensor& dX, Tensor& dWeight,
                         Tensor& dBias);

// core/cpu/embedding.cpp
void embedding(const Tensor& weight, const Tensor& indices, Tensor& out);
void embedding_backward(const Tensor& dOut, const Tensor& indices, Tensor& dWeight);

// core/cpu/dropout.cpp
void dropout(const Tensor& x, double p, uint64_t seed, uint64_t offset, Tensor& y);

// core/cpu/optimizer.cpp
void adam_step(Tensor& param, const Tensor& grad, Tensor& m, Tensor& v, const kernel::AdamHyper& hyper);
void sgd_step(Tensor& param, const Tensor& grad, Tensor& momentum_buffer, const kernel::SgdHyper& hyper);
double sum_of_squares(const Tensor& x);
void scale_inplace(Tensor& x, double factor);

}  // namespace ag::cpu
