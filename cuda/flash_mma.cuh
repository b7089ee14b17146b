// FlashAttention on tensor cores (cuda/flash_mma.cu): the bf16 and tf32 kernels that
// cuda::flash_attention and cuda::flash_attention_backward (cuda/attention.cu)
// hand a problem to when flash_mma_takes says so. Their contracts are those of
// core/kernels.inc's flash_attention and flash_attention_backward; only the
// arithmetic differs (Q, K, V, dZ, P and dS rounded to bf16 or tf32, every sum in fp32).
#pragma once
#include "core/attention_math.h"
#include "core/tensor.h"

namespace ag::cuda {

// Whether the tensor-core kernels take this problem: --precision bf16 or tf32 (the
// GEMM switch, cuda/context.h), float32 tensors, d_h = 64 or 128, a device of sm_80
// or later whose blocks may hold the format's shared tiles (tf32's dQ kernel at
// d_h = 128 asks 132 KB), and no option beyond causality, a query offset, GQA, a sparse pattern
// (window, dilation, global keys, random blocks) and ALiBi (no mask function,
// score modifier or sink): everything else stays on the float32 kernel. The one
// place the choice is made, for both directions.
bool flash_mma_takes(const Tensor& Q, const AttentionShape& shape);

// flash_attention's contract, on tensor cores.
void flash_attention_mma(const Tensor& Q, const Tensor& K, const Tensor& V, const AttentionShape& shape, Tensor& Z,
                         Tensor& lse);
// flash_attention_backward's contract, on tensor cores (dBias: none, the kernels take no bias tables).
void flash_attention_backward_mma(const Tensor& Q, const Tensor& K, const Tensor& V, const Tensor& lse,
                                  const Tensor& dZ, const Tensor& given_D, const AttentionShape& shape,
                                  bool accumulate, Tensor& dQ, Tensor& dK, Tensor& dV);

}  // namespace ag::cuda
