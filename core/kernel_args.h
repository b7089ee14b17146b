// The kernels' argument types: the vocabulary shared by the dispatch point
// (core/dispatch.h), the CPU kernels (core/cpu/cpu.h) and the CUDA kernels
// (cuda/cuda.h), which all declare core/kernels.inc's list with them. It sits
// below all three, so the kernels need not include the entry points that call
// them. The shapes of the fused kernels (AttentionShape, SparsePattern, ...)
// live in the shared math headers included here, beside the formulas that use
// them on both devices.
#pragma once
#include <algorithm>
#include <cstdint>
#include <utility>
#include <vector>

#include "core/attention_math.h"
#include "core/conv_math.h"
#include "core/edge_attention_math.h"
#include "core/linear_attention_math.h"
#include "core/s4_math.h"
#include "core/ssd_math.h"
#include "core/tensor.h"

namespace ag::kernel {

// A strided view of a contiguous buffer: element (i_0, ..., i_{r-1}) of the view
// sits at offset + sum_k i_k * strides[k]. Stride 0 repeats (broadcasts) a dim.
struct StridedView {
  int64_t offset = 0;
  std::vector<int64_t> strides;
};

enum class UnaryOp { Neg, Exp, Log, Tanh, Relu, GeluErf, GeluTanh, Silu, Softplus, Elu };
enum class BinaryOp { Add, Sub, Mul, Div };

// A reduction over one dim, with x viewed as [outer, n, inner] (n the reduced dim).
struct ReduceDims {
  int64_t outer, n, inner;
};

// For b in [0, batch): C_b = alpha * op(A_b) op(B_b) + beta * C_b, row-major, where
// op(A_b) is [M, K] (A_b stored [K, M] when trans_a), op(B_b) is [K, N] (B_b
// stored [N, K] when trans_b), C_b is [M, N]. A_b starts at a_offset + b *
// a_batch_stride elements (stride 0 reuses one matrix for the whole batch).
// Rows of a stored matrix are lda (ldb, ldc) elements apart; 0 means packed
// (the stored row length), and a larger value reads a column block of a wider
// matrix in place, e.g. one head's d_h columns of Q [B·T, C]. The batch may
// repeat `groups` times, the g-th further on by g·a_group_stride (b_, c_): the
// heads of each of several batch entries, when heads and entries are strided
// differently (Q [B, T, H, d]).
struct GemmShape {
  int64_t batch, M, N, K;
  bool trans_a = false, trans_b = false;
  int64_t a_offset = 0, b_offset = 0, c_offset = 0;
  int64_t a_batch_stride = 0, b_batch_stride = 0, c_batch_stride = 0;
  double alpha = 1.0, beta = 0.0;
  int64_t lda = 0, ldb = 0, ldc = 0;
  int64_t groups = 1;
  int64_t a_group_stride = 0, b_group_stride = 0, c_group_stride = 0;

  // The leading dimensions in effect (never below 1: BLAS rejects 0 even for empty matrices).
  int64_t row_stride_a() const { return std::max<int64_t>(1, lda ? lda : (trans_a ? M : K)); }
  int64_t row_stride_b() const { return std::max<int64_t>(1, ldb ? ldb : (trans_b ? K : N)); }
  int64_t row_stride_c() const { return std::max<int64_t>(1, ldc ? ldc : N); }

  // The same products with the two levels' roles exchanged: the batch repeats
  // `batch` times, over what were the groups. A library with one level of
  // strides (cuBLAS's strided batch) then makes fewer calls, one per group,
  // when the heads are few and the batch entries many.
  GemmShape levels_swapped() const {
    GemmShape s = *this;
    std::swap(s.batch, s.groups);
    std::swap(s.a_batch_stride, s.a_group_stride);
    std::swap(s.b_batch_stride, s.b_group_stride);
    std::swap(s.c_batch_stride, s.c_group_stride);
    return s;
  }
};

// What the MLP's forward keeps for the backward of its GELU (core/ops/mlp.cpp):
// kernel::mlp_fc writes it, kernel::mlp_dgelu reads it. `values` [N, 4C] hold
// either f'(U), U = X W_fc + b_fc the pre-activation (what bias_activation
// computes beside f(U), from the terms it had at hand: the CPU's form, and
// CUDA's when it runs the unfused kernels), or, with pre_activation set, U itself:
// what cuBLASLt's GELU epilogue stores as its aux output and its DGELU epilogue
// reads back (cuda/mlp.cu). One [N, 4C] tensor either way.
struct GeluSaved {
  Tensor values;
  bool pre_activation = false;
};

// Adam, in torch.optim's form, at step t >= 1:
//   g ← g + weight_decay·p            (Adam's L2 penalty; AdamW: p ← p − lr·weight_decay·p)
//   m ← β1·m + (1 − β1)·g,   v ← β2·v + (1 − β2)·g²
//   p ← p − lr · (m / (1 − β1^t)) / (√(v / (1 − β2^t)) + ε)
// skip_unless_finite (for both updates): null, or a float64 scalar where the
// tensors live (a training step's gradient norm): when it is not finite the
// update is skipped, decided on that device, so a diverged step changes nothing
// and the host need not wait to find out.
// applied_steps (both): the updates applied before this one, one int64 where the
// tensors live (the optimizer's count, which count_applied_step advances after
// the updates unless skipped): Adam's t is *applied_steps + 1, SGD's first step
// the one at *applied_steps = 0. Read on that device, so a skipped step leaves t
// on a GPU too without the host waiting for the guard.
// lr_on_device (both): null, or a float64 scalar where the tensors live that
// holds this step's learning rate, read there in place of lr (a training step's
// step constant: a CUDA graph replayed at every step reads that step's rate, not
// the one it was captured with). The same double either way, so the same bits.
struct AdamHyper {
  double lr, beta1, beta2, eps, weight_decay;
  const int64_t* applied_steps;
  bool decoupled;  // true: AdamW's decay; false: Adam's L2 term
  const double* skip_unless_finite = nullptr;
  const double* lr_on_device = nullptr;
  AG_HOST_DEVICE double rate() const { return lr_on_device ? *lr_on_device : lr; }
};

// SGD in torch.optim's form: g ← g + wd·p; with momentum μ: b ← μ·b + (1 − dampening)·g
// (b ← g on the first step), g ← g + μ·b if nesterov else b; p ← p − lr·g.
struct SgdHyper {
  double lr, momentum, dampening, weight_decay;
  bool nesterov;
  const int64_t* applied_steps;  // as AdamHyper's
  const double* skip_unless_finite = nullptr;
  const double* lr_on_device = nullptr;  // as AdamHyper's
  AG_HOST_DEVICE double rate() const { return lr_on_device ? *lr_on_device : lr; }
};

}  // namespace ag::kernel
