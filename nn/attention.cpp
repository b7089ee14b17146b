#include "nn/attention.h"

#include <cmath>

namespace ag::nn {

MultiHeadSelfAttention::MultiHeadSelfAttention(int64_t C, int64_t H, bool causal, double dropout,
                                               AttentionImpl impl, Generator* gen)
    : H_(H), causal_(causal), impl_(impl) {
  AG_CHECK(H > 0 && C % H == 0, "MultiHeadSelfAttention: C = " << C << " is not a multiple of H = " << H);
  w_q_ = register_module("w_q", std::make_shared<Linear>(C, C, true, gen));
  w_k_ = register_module("w_k", std::make_shared<Linear>(C, C, true, gen));
  w_v_ = register_module("w_v", std::make_shared<Linear>(C, C, true, gen));
  w_o_ = register_module("w_o", std::make_shared<Linear>(C, C, true, gen));
  dropout_ = register_module("dropout", std::make_shared<Dropout>(dropout));
}

Tensor MultiHeadSelfAttention::composed(const Tensor& q, const Tensor& k, const Tensor& v,
                                        Tensor* attention) const {
  const int64_t T = q.size(2), d_h = q.size(3);
  Tensor S = matmul(q, transpose(k, 2, 3)) * (1.0 / std::sqrt(static_cast<double>(d_h)));  // [B, H, T, T]
  if (causal_) S = S + causal_mask(T, S.dtype(), S.device());  // M [T, T] broadcasts over B, H
  const Tensor A = softmax(S);                                  // [B, H, T, T]
  if (attention) *attention = A.detach();
  return matmul(A, v);  // Z [B, H, T, d_h]
}

Tensor MultiHeadSelfAttention::forward(const Tensor& x) {
  AG_CHECK(x.dim() == 3 && x.size(2) == w_q_->weight().size(0),
           "MultiHeadSelfAttention: input " << describe(x) << " is not [B, T, "
                                            << w_q_->weight().size(0) << "]");
  const int64_t B = x.size(0), T = x.size(1), C = x.size(2), d_h = C / H_;
  // [B, T, C] -> [B, T, H, d_h] -> [B, H, T, d_h]: head h sees columns h·d_h .. (h+1)·d_h − 1.
  auto split_heads = [&](const Tensor& t) { return permute(t.reshape({B, T, H_, d_h}), {0, 2, 1, 3}); };
  const Tensor q = split_heads(w_q_->forward(x));
  const Tensor k = split_heads(w_k_->forward(x));
  const Tensor v = split_heads(w_v_->forward(x));

  attention_ = Tensor();  // never a stale A from an earlier forward
  Tensor* attention = keep_attention_ ? &attention_ : nullptr;
  const Tensor Z = impl_ == AttentionImpl::Fused ? scaled_dot_product_attention(q, k, v, causal_, attention)
                                                 : composed(q, k, v, attention);
  // Concat(head_1..head_H): [B, H, T, d_h] -> [B, T, H, d_h] -> [B, T, C]
  const Tensor merged = permute(Z, {0, 2, 1, 3}).reshape({B, T, C});
  return dropout_->forward(w_o_->forward(merged));  // O [B, T, C]
}

}  // namespace ag::nn
