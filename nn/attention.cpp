#include "nn/attention.h"

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

Tensor MultiHeadSelfAttention::forward(const Tensor& x) {
  AG_CHECK(x.dim() == 3 && x.size(2) == w_q_->weight().size(0),
           "MultiHeadSelfAttention: input " << describe(x) << " is not [B, T, "
                                            << w_q_->weight().size(0) << "]");
  const int64_t B = x.size(0), T = x.size(1), C = x.size(2), d_h = C / H_;
  // [B, T, C] viewed as [B, T, H, d_h]: head h reads columns h·d_h … (h+1)·d_h − 1 in place.
  const auto heads = [&](const Tensor& t) { return t.reshape({B, T, H_, d_h}); };
  AttentionSpec spec{.causal = causal_, .layout = AttentionLayout::BTHD, .impl = impl_, .pattern = pattern_};
  if (keep_attention_ && impl_ == AttentionImpl::Flash) spec.impl = AttentionImpl::Dense;  // flash has no A
  AttentionInternals internals;
  const Tensor Z = ag::attention(heads(w_q_->forward(x)), heads(w_k_->forward(x)), heads(w_v_->forward(x)), spec,
                                 keep_attention_ ? &internals : nullptr);  // [B, T, H, d_h]
  attention_ = internals.probabilities;  // undefined unless kept: never a stale A from an earlier forward
  // Concat(head_1..head_H) is Z viewed as [B, T, C].
  return dropout_->forward(w_o_->forward(Z.reshape({B, T, C})));  // O [B, T, C]
}

}  // namespace ag::nn
