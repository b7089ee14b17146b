// CUDA kernels: one .cu file per family, with the basenames of core/cpu/ (the
// CPU kernel beside each is its reference, and tests/test_cuda.cpp compares
// them). Same signatures and contracts as ag::cpu:: (core/dispatch.h); only the
// dispatcher calls these. Every tensor argument lives on the device; work is
// queued on cuda::stream() and the functions return without waiting, except
// where a result or an error must reach the host (noted below).
// Builds without nvcc get cuda/disabled.cpp, where each throws "built without CUDA".
#pragma once
#include "core/dispatch.h"

namespace ag::cuda {

using kernel::BinaryOp;
using kernel::GemmShape;
using kernel::ReduceDims;
using kernel::StridedView;
using kernel::UnaryOp;

// cuda/memory.cu
void copy_strided(const Tensor& src, const StridedView& src_view, Tensor& dst,
                  const StridedView& dst_view, const Shape& shape);
void fill(Tensor& out, double value);
void cast(const Tensor& src, Tensor& dst);

// cuda/elementwise.cu
void unary(UnaryOp op, const Tensor& x, Tensor& y);
void unary_backward(UnaryOp op, const Tensor& x, const Tensor& dY, Tensor& dX);
void affine(const Tensor& x, double scale, double shift, Tensor& y);
void pow_scalar(const Tensor& x, double exponent, Tensor& y);
void binary(BinaryOp op, const Tensor& a, const Tensor& b, Tensor& out);

// cuda/reduce.cu
void sum_to_shape(const Tensor& x, Tensor& out);
void max_dim(const Tensor& x, const ReduceDims& dims, Tensor& values, Tensor& argmax);
void max_dim_backward(const Tensor& dValues, const Tensor& argmax, const ReduceDims& dims,
                      Tensor& dX);

// cuda/matmul.cu (cuBLAS)
void gemm(const GemmShape& shape, const Tensor& A, const Tensor& B, Tensor& C);

// cuda/softmax.cu; cross_entropy waits for the device to check the targets.
void softmax(const Tensor& x, Tensor& y);
void softmax_backward(const Tensor& y, const Tensor& dY, Tensor& dX);
void causal_softmax(const Tensor& x, Tensor& y);
void log_softmax(const Tensor& x, Tensor& y);
void log_softmax_backward(const Tensor& y, const Tensor& dY, Tensor& dX);
void cross_entropy(const Tensor& logits, const Tensor& targets, int64_t ignore_index,
                   Tensor& loss, Tensor& lse);
void cross_entropy_backward(const Tensor& logits, const Tensor& targets, const Tensor& lse,
                            int64_t ignore_index, double scale, Tensor& dLogits);

// cuda/layer_norm.cu
void layer_norm(const Tensor& x, const Tensor& weight, const Tensor& bias, double eps, Tensor& y,
                Tensor& mean, Tensor& rstd);
void layer_norm_backward(const Tensor& x, const Tensor& weight, const Tensor& mean,
                         const Tensor& rstd, const Tensor& dY, Tensor& dX, Tensor& dWeight,
                         Tensor& dBias);

// cuda/embedding.cu; embedding waits for the device to check the indices.
void embedding(const Tensor& weight, const Tensor& indices, Tensor& out);
void embedding_backward(const Tensor& dOut, const Tensor& indices, Tensor& dWeight);

// cuda/dropout.cu
void dropout(const Tensor& x, double p, uint64_t seed, uint64_t offset, Tensor& y);

// cuda/optimizer.cu; sum_of_squares waits for its result.
void adam_step(Tensor& param, const Tensor& grad, Tensor& m, Tensor& v, const kernel::AdamHyper& hyper);
void sgd_step(Tensor& param, const Tensor& grad, Tensor& momentum_buffer, const kernel::SgdHyper& hyper);
double sum_of_squares(const Tensor& x);
void scale_inplace(Tensor& x, double factor);

}  // namespace ag::cuda
