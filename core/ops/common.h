// Checks and helpers shared by the op files (not part of the public API).
#pragma once
#include <initializer_list>

#include "core/autograd.h"
#include "core/dispatch.h"
#include "core/ops.h"

namespace ag::detail {

// Throws unless every tensor is defined, floating, and shares the first one's
// dtype and device; the message names the op and every shape.
void check_compatible(const char* op, std::initializer_list<const Tensor*> tensors);
void check_floating(const char* op, const Tensor& t);
void check_indices(const char* op, const Tensor& indices, const Tensor& like);

// One operand of the GEMMs an op runs (matmul, linear, dense attention): the
// tensor, whether BLAS reads it transposed, and where its matrices lie.
struct GemmOperand {
  const Tensor& data;
  bool transposed = false;
  bool batched = true;     // one matrix per batch entry; false: one for all (batch stride 0)
  // Per-head operands (attention): matrix (b, h) at heads.at(b − first_batch, h, 0), rows heads.row apart,
  // indexed by the query head h or, with by_kv_head, by its kv head h / group.
  HeadStrides heads = {};
  bool by_kv_head = false;
  int64_t first_batch = 0;  // a tensor that holds one chunk of the batch (a scratch) starts at the chunk's first entry
};

// The sizes of a batched product: out [batch, M, N] = op(x) [M, K] · op(y) [K, N] per entry.
struct ProductSize {
  int64_t batch, M, N, K;
};
// out [batch, M, N] (shaped `out_shape`) = op(x) op(y) per batch entry (core/ops/matmul.cpp).
Tensor product(const GemmOperand& x, const GemmOperand& y, const ProductSize& size, const Shape& out_shape);
// op(x) op(y) [M, N] (size.batch = 1), the gradient of `input`: added straight
// into input's accumulation_target when it has one (a GEMM with beta = 1), and
// then undefined is returned; else a new tensor shaped like input (core/ops/matmul.cpp).
Tensor gradient_product(const Tensor& input, const GemmOperand& x, const GemmOperand& y, const ProductSize& size);

inline Tensor empty_like(const Tensor& t) { return Tensor::empty(t.shape(), t.dtype(), t.device()); }
inline Tensor empty_as(const Shape& shape, const Tensor& like) {
  return Tensor::empty(shape, like.dtype(), like.device());
}

}  // namespace ag::detail
