// Fused scaled dot-product attention on Q, K, V [B, H, T, d_h] (any leading
// dims; each T×d_h matrix is one (batch, head)):
//   S = Q Kᵀ/√d_h,   A = softmax(S + M),   Z = A V.
// The composed version (matmul, scale, mask, softmax, matmul) is the reference
// it is tested against; this one saves A only and skips the masked entries in
// the softmax (written as exact zeros).
//
// Backward (docs/backprop.md, "Attention"):
//   Z = AV            →  dV = Aᵀ dZ,   dA = dZ Vᵀ
//   A = softmax(S+M)  →  dS = A ∘ (dA − rowsum(dA ∘ A))   (0 where masked, as A is)
//   S = QKᵀ/√d_h      →  dQ = dS K/√d_h,   dK = dSᵀ Q/√d_h
// The mask is a constant, so it has no gradient of its own; the scale keeps the
// logits' variance near 1 whatever d_h is (the softmax would saturate otherwise).
#include <cmath>
#include <limits>

#include "core/ops/common.h"

namespace ag {

namespace {
// C_b = alpha · op(X_b) op(Y_b) for each of `batch` matrices.
void batched_product(const Tensor& X, bool trans_x, const Tensor& Y, bool trans_y, Tensor& C, int64_t batch,
                     int64_t M, int64_t N, int64_t K, double alpha) {
  kernel::GemmShape shape{batch, M, N, K};
  shape.trans_a = trans_x;
  shape.trans_b = trans_y;
  shape.a_batch_stride = M * K;
  shape.b_batch_stride = K * N;
  shape.c_batch_stride = M * N;
  shape.alpha = alpha;
  kernel::gemm(shape, X, Y, C);
}
}  // namespace

Tensor causal_mask(int64_t T, DType dtype, Device device) {
  std::vector<double> m(T * T, 0.0);
  for (int64_t i = 0; i < T; ++i)
    for (int64_t j = i + 1; j < T; ++j) m[i * T + j] = -std::numeric_limits<double>::infinity();
  return Tensor::from_vector(m, {T, T}, dtype).to(device);
}

Tensor scaled_dot_product_attention(const Tensor& q, const Tensor& k, const Tensor& v, bool causal,
                                    Tensor* attention) {
  detail::check_compatible("scaled_dot_product_attention", {&q, &k, &v});
  AG_CHECK(q.dim() >= 2 && q.shape() == k.shape() && q.shape() == v.shape(),
           "scaled_dot_product_attention: q " << to_string(q.shape()) << ", k " << to_string(k.shape()) << ", v "
                                              << to_string(v.shape()) << ": expected three equal shapes [..., T, d_h]");
  const int64_t T = q.size(-2), d = q.size(-1), batch = q.numel() / std::max<int64_t>(T * d, 1);
  const double scale = 1.0 / std::sqrt(static_cast<double>(d));
  Shape scores_shape(q.shape().begin(), q.shape().end() - 1);
  scores_shape.push_back(T);  // [B, H, T, T]

  Tensor S = detail::empty_as(scores_shape, q);
  batched_product(q, false, k, true, S, batch, T, T, d, scale);  // S = QKᵀ/√d_h
  Tensor A = detail::empty_as(scores_shape, q);
  causal ? kernel::causal_softmax(S, A) : kernel::softmax(S, A);  // A = softmax(S + M)
  Tensor Z = detail::empty_like(q);
  batched_product(A, false, v, false, Z, batch, T, d, T, 1.0);    // Z = AV
  if (attention) *attention = A;

  return record("scaled_dot_product_attention", {q, k, v}, Z,
                [Q = q.detach(), K = k.detach(), V = v.detach(), A, batch, T, d, scale](const Tensor& dZ) -> Gradients {
                  // Z = AV
                  Tensor dV = detail::empty_like(V);
                  batched_product(A, true, dZ, false, dV, batch, T, d, T, 1.0);  // dV = Aᵀ dZ
                  Tensor dA = detail::empty_like(A);
                  batched_product(dZ, false, V, true, dA, batch, T, T, d, 1.0);  // dA = dZ Vᵀ
                  // A = softmax(S + M)
                  Tensor dS = detail::empty_like(A);
                  kernel::softmax_backward(A, dA, dS);  // dS = A ∘ (dA − rowsum(dA ∘ A))
                  // S = QKᵀ/√d_h
                  Tensor dQ = detail::empty_like(Q), dK = detail::empty_like(K);
                  batched_product(dS, false, K, false, dQ, batch, T, d, T, scale);  // dQ = dS K/√d_h
                  batched_product(dS, true, Q, false, dK, batch, T, d, T, scale);   // dK = dSᵀ Q/√d_h
                  return {dQ, dK, dV};
                });
}

}  // namespace ag
