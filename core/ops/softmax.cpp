// softmax, log_softmax and the fused cross-entropy, over the last dim.
// Full derivations: docs/backprop.md, sections 7 "Softmax" and 16 "Fused softmax + cross-entropy".
#include <cmath>
#include <limits>

#include "core/ops/common.h"

namespace ag {

// A = softmax(S) row-wise: A_j = exp(S_j − max S) / Σ_k exp(S_k − max S).
// Jacobian ∂A_j/∂S_k = A_j(δ_jk − A_k), so the vector–Jacobian product is
//   dS_k = Σ_j dA_j A_j (δ_jk − A_k) = A_k (dA_k − Σ_j dA_j A_j),
// O(C) per row instead of a C×C Jacobian. Saves A (the output).
Tensor softmax(const Tensor& x) {
  detail::check_floating("softmax", x);
  Tensor y = detail::empty_like(x);
  kernel::softmax(x, y);
  return record("softmax", {x}, y, [Y = y.detach()](const Tensor& dY) -> Gradients {
    Tensor dX = detail::empty_like(Y);
    kernel::softmax_backward(Y, dY, dX);
    return {dX};
  });
}

// Y = log softmax(X) = X − logsumexp(X).  ∂Y_j/∂X_k = δ_jk − softmax(X)_k, so
//   dX_k = dY_k − softmax(X)_k Σ_j dY_j,  with softmax(X) = exp(Y). Saves Y.
Tensor log_softmax(const Tensor& x) {
  detail::check_floating("log_softmax", x);
  Tensor y = detail::empty_like(x);
  kernel::log_softmax(x, y);
  return record("log_softmax", {x}, y, [Y = y.detach()](const Tensor& dY) -> Gradients {
    Tensor dX = detail::empty_like(Y);
    kernel::log_softmax_backward(Y, dY, dX);
    return {dX};
  });
}

// L = (1/n) Σ_{rows r not ignored} (logsumexp(z_r) − z_r[t_r]),  n = #rows not ignored
// (Mean; Sum drops the 1/n). ∂L/∂z_r = (softmax(z_r) − onehot(t_r)) / n; the softmax and the log cancel
// into this difference, which is why they are fused. Saves the row
// log-sum-exp (one number per row) and recomputes softmax in backward.
Tensor cross_entropy(const Tensor& logits, const Tensor& targets, int64_t ignore_index, Reduction reduction) {
  detail::check_floating("cross_entropy", logits);
  detail::check_indices("cross_entropy", targets, logits);
  AG_CHECK(logits.dim() >= 1, "cross_entropy: logits " << describe(logits) << ": need a class dim");
  const Shape batch(logits.shape().begin(), logits.shape().end() - 1);
  AG_CHECK(targets.shape() == batch, "cross_entropy: logits " << to_string(logits.shape()) << ", targets "
                                                              << to_string(targets.shape())
                                                              << ": targets must have the logits' shape without the last dim");
  const int64_t V = logits.size(-1), N = targets.numel();
  const Tensor rows = logits.detach().reshape({N, V});
  const Tensor flat_targets = targets.reshape({N});
  Tensor loss = detail::empty_as({N}, logits), lse = detail::empty_as({N}, logits);
  Tensor scored = detail::empty_as({N}, logits);  // 1 per counted row, so the count stays on the device
  kernel::cross_entropy(rows, flat_targets, ignore_index, loss, lse, scored);

  Tensor out, count;
  {
    NoGradGuard no_grad;  // the op records itself below, with logits as its input
    out = sum(loss);
    if (reduction == Reduction::Mean) {
      count = sum(scored);
      out = div(out, count);  // 0/0 = NaN when nothing is scored
    }
  }
  // dLogits[n] = dL/dloss_n · (softmax(logits[n]) − onehot(t_n)), where dL/dloss_n
  // is dL for Sum and dL / count for Mean: one scalar, computed on the device.
  return record("cross_entropy", {logits}, out,
                [rows, flat_targets, lse, ignore_index, count, shape = logits.shape()](const Tensor& dL) -> Gradients {
                  Tensor dLogits = detail::empty_as(rows.shape(), rows);
                  const Tensor scale = count.defined() ? div(dL, count) : dL;
                  kernel::cross_entropy_backward(rows, flat_targets, lse, ignore_index, scale, dLogits);
                  return {dLogits.reshape(shape)};
                });
}

}  // namespace ag
