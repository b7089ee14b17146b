// The MLP's products (core/kernels.inc, "the MLP's products"; the op is
// core/ops/mlp.cpp) on the CPU: each is the BLAS GEMM followed by the kernel the
// unfused ops ran after it, with the same arguments, so the bits are those of
// linear(bias_gelu(matmul(X, W_fc), b_fc), W_proj, b_proj). The CPU has no
// epilogue to fuse into: OpenBLAS writes its product, then one more pass reads it.
#include "core/cpu/cpu.h"

namespace ag::cpu {

// X W into a scratch (matmul's product), then G = f(U) and f'(U) with U = X W + bias
// (bias_gelu's kernel). The CPU keeps f'(U): its backward then only multiplies.
void mlp_fc(const GemmShape& shape, UnaryOp op, const Tensor& X, const Tensor& W, const Tensor& bias, Tensor& G,
            GeluSaved* saved) {
  Tensor XW = Tensor::empty(G.shape(), G.dtype(), Device::CPU);  // [N, F]
  cpu::gemm(shape, X, W, XW);
  cpu::bias_activation(op, XW, bias, G, saved ? &saved->values : nullptr);
  if (saved) saved->pre_activation = false;
}

// dG = dY W_projᵀ written into dU, then dU = dG ∘ f'(U) in place with its column
// sums (bias_activation_backward, which reads each element before it writes it).
void mlp_dgelu(const GemmShape& shape, const Tensor& dY, const Tensor& W_proj, const GeluSaved& saved, Tensor& dU,
               Tensor& dBias) {
  AG_CHECK(!saved.pre_activation, "mlp_dgelu: the CPU keeps f'(U), not U (GeluSaved)");
  cpu::gemm(shape, dY, W_proj, dU);
  bias_activation_backward(saved.values, dU, dU, dBias);
}

void gemm_bias_grad(const GemmShape& shape, const Tensor& A, const Tensor& B, Tensor& C, Tensor& dBias) {
  cpu::gemm(shape, A, B, C);
  sum_to_shape(B, dBias);
}

}  // namespace ag::cpu
