// mlp: a transformer block's MLP as one op, over the rows of X [..., C] (N = B·T of them):
//   U = X W_fc + b_fc          [N, F]    W_fc [C, F], b_fc [F]   (F = 4C in a GPT)
//   G = f(U)                   [N, F]    f = GELU, exact or tanh
//   Y = G W_proj + b_proj      [N, C']   W_proj [F, C'], b_proj [C']
// It equals linear(bias_gelu(matmul(X, W_fc), b_fc), W_proj, b_proj), and on the
// CPU bit for bit: core/cpu/mlp.cpp runs the kernels those three ops run.
//
// Why one op: the two GEMMs around f can carry it. On CUDA (cuda/mlp.cu) fc's GEMM
// adds b_fc, applies f and stores U beside G (cuBLASLt's GELU_AUX_BIAS epilogue),
// and in backward the GEMM that forms dG = dY W_projᵀ multiplies by f'(U) and sums
// db_fc as it stores (DGELU_BGRAD), so neither direction writes an [N, F] product
// only to read it back in an elementwise pass. The second GEMM belongs to proj's
// backward, which is why the op spans both layers: an op ending at G would receive
// dG already stored.
//
// Backward (docs/backprop.md §3, "The whole MLP as one op"), the forward read bottom-up:
//   Y = G W_proj + b_proj:  dG = dY W_projᵀ,  dW_proj = Gᵀ dY,  db_proj = Σ_rows dY
//   G = f(U):               dU = dG ∘ f'(U)
//   U = X W_fc + b_fc:      dX = dU W_fcᵀ,    dW_fc = Xᵀ dU,    db_fc = Σ_rows dU
// kernel::mlp_dgelu gives dU and db_fc together (the first two lines' dG never
// stored on CUDA), kernel::gemm_bias_grad dW_proj and db_proj together; dX and
// dW_fc are gradient_product's GEMMs, added into accumulation targets as matmul's are.
// Saves X, W_fc, G, W_proj, and for f' one [N, F] tensor (GeluSaved): f'(U) where
// the kernels run unfused (the CPU: the backward then only multiplies), U where
// the epilogue ran (it stores U for free, and its DGELU reads U). The memory of
// the three ops it replaces; nothing is recomputed.
#include <tuple>

#include "core/ops/common.h"

namespace ag {

namespace {
using detail::ProductSize;

// dW = Gᵀ dY [F, C'] and db = Σ_rows dY [C'] for the proj layer, in one kernel
// (gemm_bias_grad). dW is made as gradient_product makes it: added into W's
// gradient buffer when it has one (then undefined comes back), else a new tensor.
std::pair<Tensor, Tensor> weight_and_bias_gradients(const Tensor& weight, const Tensor& G, const Tensor& dY,
                                                    const ProductSize& size) {
  Tensor db = detail::empty_as({size.N}, dY);
  if (Tensor target = accumulation_target(weight); target.defined()) {
    kernel::GemmShape accumulate{1, size.M, size.N, size.K};  // target += Gᵀ dY
    accumulate.trans_a = true;
    accumulate.beta = 1.0;
    kernel::gemm_bias_grad(accumulate, G, dY, target, db);
    return {Tensor(), db};
  }
  Tensor dW = detail::empty_as(weight.shape(), dY);
  kernel::GemmShape shape{1, size.M, size.N, size.K};
  shape.trans_a = true;
  shape.a_batch_stride = size.M * size.K;
  shape.b_batch_stride = size.K * size.N;
  shape.c_batch_stride = size.M * size.N;
  kernel::gemm_bias_grad(shape, G, dY, dW, db);
  return {dW, db};
}
}  // namespace

Tensor mlp(const Tensor& x, const Tensor& w_fc, const Tensor& b_fc, const Tensor& w_proj, const Tensor& b_proj,
           GeluApprox approx) {
  detail::check_compatible("mlp", {&x, &w_fc, &b_fc, &w_proj, &b_proj});
  AG_CHECK(x.dim() >= 1 && w_fc.dim() == 2 && w_proj.dim() == 2 && x.size(-1) == w_fc.size(0) &&
               b_fc.shape() == Shape{w_fc.size(1)} && w_proj.size(0) == w_fc.size(1) &&
               b_proj.shape() == Shape{w_proj.size(1)},
           "mlp: x " << to_string(x.shape()) << ", w_fc " << to_string(w_fc.shape()) << ", b_fc "
                     << to_string(b_fc.shape()) << ", w_proj " << to_string(w_proj.shape()) << ", b_proj "
                     << to_string(b_proj.shape()) << ": want x [..., C], w_fc [C, F], b_fc [F], w_proj [F, C'], b_proj [C']");
  const int64_t C = w_fc.size(0), F = w_fc.size(1), out = w_proj.size(1);
  const int64_t rows = numel(Shape(x.shape().begin(), x.shape().end() - 1));  // N = B·T
  const kernel::UnaryOp kind = approx == GeluApprox::Erf ? kernel::UnaryOp::GeluErf : kernel::UnaryOp::GeluTanh;
  Shape g_shape = x.shape(), y_shape = x.shape();
  g_shape.back() = F;
  y_shape.back() = out;

  // G = f(X W_fc + b_fc), and what f' needs when a gradient will be asked for.
  const bool differentiable = any_requires_grad({x, w_fc, b_fc, w_proj, b_proj});
  Tensor G = detail::empty_as(g_shape, x);
  kernel::GeluSaved saved;
  if (differentiable) saved.values = detail::empty_as(g_shape, x);
  kernel::GemmShape fc{1, rows, F, C};  // X W, as matmul shapes it
  fc.c_batch_stride = rows * F;
  kernel::mlp_fc(fc, kind, x, w_fc, b_fc, G, differentiable ? &saved : nullptr);
  // Y = G W_proj + b_proj as linear computes it: Y's rows start as b_proj, the GEMM adds to them (beta = 1).
  Tensor y = detail::empty_as(y_shape, x);
  kernel::copy_strided(b_proj, {0, {0, 1}}, y, {0, {out, 1}}, {rows, out});
  kernel::GemmShape proj{1, rows, out, F};
  proj.beta = 1.0;
  kernel::gemm(proj, G, w_proj, y);
  if (!differentiable) return y;

  return record(
      "mlp", {x, w_fc, b_fc, w_proj, b_proj}, y,
      [x, X = x.detach(), w_fc, W_fc = w_fc.detach(), G = G.detach(), w_proj, W_proj = w_proj.detach(), saved, rows, C,
       F, out, need_x = x.requires_grad(), need_w_fc = w_fc.requires_grad(), need_b_fc = b_fc.requires_grad(),
       need_w_proj = w_proj.requires_grad(), need_b_proj = b_proj.requires_grad()](const Tensor& dY) -> Gradients {
        Gradients grads(5);
        // Y = G W_proj + b_proj:  dW_proj = Gᵀ dY,  db_proj = Σ_rows dY
        if (need_w_proj && need_b_proj) {
          std::tie(grads[3], grads[4]) = weight_and_bias_gradients(w_proj, G, dY, {.batch = 1, .M = F, .N = out, .K = rows});
        } else if (need_w_proj) {
          grads[3] = detail::gradient_product(w_proj, {.data = G, .transposed = true}, {.data = dY},
                                              {.batch = 1, .M = F, .N = out, .K = rows});
        } else if (need_b_proj) {
          grads[4] = detail::empty_as({out}, dY);
          kernel::sum_to_shape(dY, grads[4]);
        }
        if (!need_x && !need_w_fc && !need_b_fc) return grads;
        // dG = dY W_projᵀ and dU = dG ∘ f'(U), with db_fc = Σ_rows dU: one kernel.
        Tensor dU = detail::empty_like(G), db_fc = detail::empty_as({F}, dY);
        kernel::GemmShape dG{1, rows, F, out};  // dY W_projᵀ, as gradient_product shapes it
        dG.trans_b = true;
        dG.a_batch_stride = rows * out;
        dG.b_batch_stride = out * F;
        dG.c_batch_stride = rows * F;
        kernel::mlp_dgelu(dG, dY, W_proj, saved, dU, db_fc);
        if (need_b_fc) grads[2] = db_fc;
        // U = X W_fc + b_fc:  dX = dU W_fcᵀ,  dW_fc = Xᵀ dU
        if (need_x) grads[0] = detail::gradient_product(x, {.data = dU}, {.data = W_fc, .transposed = true}, {.batch = 1, .M = rows, .N = C, .K = F});
        if (need_w_fc) grads[1] = detail::gradient_product(w_fc, {.data = X, .transposed = true}, {.data = dU}, {.batch = 1, .M = C, .N = F, .K = rows});
        return grads;
      });
}

}  // namespace ag
