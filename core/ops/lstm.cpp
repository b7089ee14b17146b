// lstm: the classic LSTM over a sequence, hidden size = input size C, gates in
// PyTorch's order (i, f, g, o). Weights as attograd stores a Linear's, [in, out]:
// W_ih, W_hh [C, 4C] (PyTorch's weight_ih_l0, weight_hh_l0 transposed), biases
// b_ih, b_hh [4C]. For each batch entry, from (h_{−1}, c_{−1}) (zeros, or a
// given state):
//   G_t = x_t W_ih + b_ih + h_{t−1} W_hh + b_hh          [4C]
//   i, f, g, o = σ(G_i), σ(G_f), tanh(G_g), σ(G_o)
//   c_t = f∘c_{t−1} + i∘g,   h_t = o∘tanh(c_t),   H = [h_0 … h_{T−1}]  [B, T, C]
// The input's part of every step is one GEMM, X W_ih [B·T, C]·[C, 4C], before
// the recurrence; the recurrence is one small GEMM per step, h_{t−1} W_hh
// [B, C]·[C, 4C], then the cell (core/lstm_math.h, one kernel per step).
//
// Backward through time (docs/backprop.md, "The LSTM"): walking t = T−1 … 0
// with dh_t = dH_t + dG_{t+1} W_hhᵀ (h_t feeds the output and the next step's
// gates) and dc_t from c_{t+1} = f∘c_t + …, the cell's backward gives dG_t
// and dc_{t−1}. Then, with dG [B·T, 4C] all steps' gate gradients:
//   dX = dG W_ihᵀ,  dW_ih = Xᵀ dG,  dW_hh = H_prevᵀ dG  (H_prev = [h_{−1} … h_{T−2}]),
//   db_ih = db_hh = Σ_rows dG.
// Saved: each step's activations Act_t [B, 4C] and c_t [B, C], and H (what
// dW_hh reads); tanh(c_t) is recomputed.
#include <vector>

#include "core/ops/common.h"

namespace ag {

namespace {
void check_lstm_args(const Tensor& x, const Tensor& w_ih, const Tensor& w_hh, const Tensor& b_ih, const Tensor& b_hh,
                     const LstmState* state) {
  detail::check_compatible("lstm", {&x, &w_ih, &w_hh, &b_ih, &b_hh});
  AG_CHECK(x.dim() == 3 && x.size(1) > 0 && x.size(2) > 0,
           "lstm: x " << to_string(x.shape()) << " must be [B, T, C] with T, C >= 1");
  const int64_t B = x.size(0), C = x.size(2);
  const Shape W{C, 4 * C}, b{4 * C};
  AG_CHECK(w_ih.shape() == W && w_hh.shape() == W && b_ih.shape() == b && b_hh.shape() == b,
           "lstm: x " << to_string(x.shape()) << ", w_ih " << to_string(w_ih.shape()) << ", w_hh "
                      << to_string(w_hh.shape()) << ", b_ih " << to_string(b_ih.shape()) << ", b_hh "
                      << to_string(b_hh.shape()) << ": the weights must be [C, 4C] and the biases [4C]");
  if (state && state->h.defined()) {
    detail::check_compatible("lstm", {&x, &state->h, &state->c});
    AG_CHECK(state->h.shape() == (Shape{B, C}) && state->c.shape() == (Shape{B, C}),
             "lstm: state h " << to_string(state->h.shape()) << ", c " << to_string(state->c.shape())
                              << " must be [B, C] = [" << B << ", " << C << "]");
  }
}
}  // namespace

Tensor lstm(const Tensor& x, const Tensor& w_ih, const Tensor& w_hh, const Tensor& b_ih, const Tensor& b_hh,
            LstmState* state) {
  check_lstm_args(x, w_ih, w_hh, b_ih, b_hh, state);
  const int64_t B = x.size(0), T = x.size(1), C = x.size(2);
  Tensor Hs, h0, c0;
  std::vector<Tensor> acts(T), cs(T);
  {
    NoGradGuard guard;  // computed from detached values; the one node is recorded below
    const Tensor X = x.detach(), Wih = w_ih.detach(), Whh = w_hh.detach();
    // G_x = X W_ih + b_ih + b_hh for every step at once, laid out [T, B, 4C] so that step t is rows t·B …
    const Tensor Gx =
        permute((matmul(X.reshape({B * T, C}), Wih) + (b_ih.detach() + b_hh.detach())).reshape({B, T, 4 * C}), {1, 0, 2});
    const bool given = state && state->h.defined();
    h0 = given ? state->h.detach() : Tensor::zeros({B, C}, x.dtype(), x.device());
    c0 = given ? state->c.detach() : Tensor::zeros({B, C}, x.dtype(), x.device());
    std::vector<Tensor> hs(T);
    Tensor h = h0, c = c0;
    for (int64_t t = 0; t < T; ++t) {
      const Tensor G = slice(Gx, 0, t, t + 1).reshape({B, 4 * C}) + matmul(h, Whh);  // G_t = x_t W_ih + b + h_{t−1} W_hh
      acts[t] = detail::empty_as({B, 4 * C}, x), cs[t] = detail::empty_as({B, C}, x), hs[t] = detail::empty_as({B, C}, x);
      kernel::lstm_cell(G, c, acts[t], cs[t], hs[t]);  // i, f, g, o; c_t = f∘c_{t−1} + i∘g; h_t = o∘tanh(c_t)
      h = hs[t], c = cs[t];
    }
    Hs = concat(hs, 0).reshape({T, B, C});
    if (state) *state = {.h = h, .c = c};
  }
  const Tensor out = permute(Hs, {1, 0, 2}).detach();  // H [B, T, C]
  return record("lstm", {x, w_ih, w_hh, b_ih, b_hh}, out,
                [X = x.detach(), Wih = w_ih.detach(), Whh = w_hh.detach(), Hs, h0, c0, acts = std::move(acts),
                 cs = std::move(cs)](const Tensor& dH) -> Gradients {
                  const int64_t B = X.size(0), T = X.size(1), C = X.size(2);
                  const Tensor dHs = permute(dH, {1, 0, 2});  // [T, B, C]
                  const Tensor Whh_T = transpose(Whh, 0, 1);
                  std::vector<Tensor> dGs(T);
                  Tensor dh_next = Tensor::zeros({B, C}, X.dtype(), X.device()), dc = dh_next;
                  for (int64_t t = T - 1; t >= 0; --t) {
                    // h_t feeds H_t and G_{t+1} = … + h_t W_hh:  dh_t = dH_t + dG_{t+1} W_hhᵀ
                    const Tensor dh = slice(dHs, 0, t, t + 1).reshape({B, C}) + dh_next;
                    Tensor dc_prev = detail::empty_as({B, C}, X);
                    dGs[t] = detail::empty_as({B, 4 * C}, X);
                    // the cell: dG_t and dc_{t−1} = dc_t∘f (core/lstm_math.h, each line beside its forward)
                    kernel::lstm_cell_backward(acts[t], t > 0 ? cs[t - 1] : c0, cs[t], dh, dc, dGs[t], dc_prev);
                    dh_next = matmul(dGs[t], Whh_T);
                    dc = dc_prev;
                  }
                  // dG [B·T, 4C] in X's row order (b, t)
                  const Tensor dG = permute(concat(dGs, 0).reshape({T, B, 4 * C}), {1, 0, 2}).reshape({B * T, 4 * C});
                  // H_prev [B·T, C]: h_{t−1} at row (b, t), h_{−1} the initial state
                  const Tensor H_prev = permute(concat({h0.reshape({1, B, C}), slice(Hs, 0, 0, T - 1)}, 0), {1, 0, 2})
                                            .reshape({B * T, C});
                  const Tensor dX = matmul(dG, transpose(Wih, 0, 1)).reshape({B, T, C});  // G = X W_ih + …
                  const Tensor dWih = matmul(transpose(X.reshape({B * T, C}), 0, 1), dG);
                  const Tensor dWhh = matmul(transpose(H_prev, 0, 1), dG);                 // G_t = … + h_{t−1} W_hh
                  const Tensor db = sum(dG, 0);                                             // both biases add to G
                  return {dX, dWih, dWhh, db, db};
                });
}

}  // namespace ag
