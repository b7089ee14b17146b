// matmul: C = A B with A [..., M, K], B [..., K, N], C [..., M, N].
//
// Backward, from dC_mn = Σ_k ... :  C_mn = Σ_k A_mk B_kn, so
//   ∂L/∂A_mk = Σ_n dC_mn B_kn   →  dA = dC Bᵀ
//   ∂L/∂B_kn = Σ_m A_mk dC_mn   →  dB = Aᵀ dC
// and where a batch dim was broadcast, the per-batch gradients are summed
// (reduce_to_shape). Transposes are BLAS flags, never copies.
#include "core/ops/common.h"

namespace ag {

namespace detail {
// out [batch, M, N] (shaped `out_shape`) = op(x) op(y) per batch entry.
Tensor product(const GemmOperand& x, const GemmOperand& y, const ProductSize& size, const Shape& out_shape) {
  const int64_t batch = size.batch, M = size.M, N = size.N, K = size.K;
  Tensor out = detail::empty_as(out_shape, x.data);
  kernel::GemmShape shape{batch, M, N, K};
  shape.trans_a = x.transposed;
  shape.trans_b = y.transposed;
  shape.a_batch_stride = x.batched ? M * K : 0;
  shape.b_batch_stride = y.batched ? K * N : 0;
  shape.c_batch_stride = M * N;
  kernel::gemm(shape, x.data, y.data, out);
  return out;
}

// op(x) op(y) [M, N] (size.batch = 1), the gradient of `input` (shaped like it): added straight
// into the memory that input's gradient accumulates in when there is some
// (accumulation_target: a GEMM with beta = 1, no gradient tensor, no zeroing
// pass, no separate add), and then undefined is returned. That is W's flat
// gradient buffer for dW = Xᵀ dY, and for dX = dY Wᵀ the gradient already
// pending for x when x is read by several products (the attention's input, by
// W_Q, W_K and W_V).
Tensor gradient_product(const Tensor& input, const GemmOperand& x, const GemmOperand& y, const ProductSize& size) {
  if (Tensor target = accumulation_target(input); target.defined()) {
    kernel::GemmShape accumulate{1, size.M, size.N, size.K};  // target += op(x) op(y)
    accumulate.trans_a = x.transposed;
    accumulate.trans_b = y.transposed;
    accumulate.beta = 1.0;
    kernel::gemm(accumulate, x.data, y.data, target);
    return Tensor();
  }
  return product(x, y, size, input.shape());
}
}  // namespace detail

namespace {
using detail::GemmOperand;
using detail::ProductSize;
using detail::product;
using detail::gradient_product;

Shape batch_dims(const Tensor& t) { return Shape(t.shape().begin(), t.shape().end() - 2); }

Shape concat_shape(Shape head, std::initializer_list<int64_t> tail) {
  head.insert(head.end(), tail);
  return head;
}
}  // namespace

Tensor matmul(const Tensor& a, const Tensor& b) {
  detail::check_compatible("matmul", {&a, &b});
  AG_CHECK(a.dim() >= 2 && b.dim() >= 2, "matmul: " << to_string(a.shape()) << " x " << to_string(b.shape())
                                                    << ": both operands need at least 2 dims");
  const int64_t M = a.size(-2), K = a.size(-1), N = b.size(-1);
  AG_CHECK(b.size(-2) == K, "matmul: " << to_string(a.shape()) << " x " << to_string(b.shape())
                                       << ": inner dims differ (" << K << " vs " << b.size(-2) << ")");
  const bool need_a = a.requires_grad(), need_b = b.requires_grad();

  if (b.dim() == 2) {
    // B is shared by every batch entry of A: fold A's batch dims into its rows
    // and do one large product, [rows, K] x [K, N]. Then dB = A_foldedᵀ dC_folded
    // is one product too.
    const int64_t rows = numel(Shape(a.shape().begin(), a.shape().end() - 1));
    Shape out_shape = a.shape();
    out_shape.back() = N;
    Tensor out = product({.data = a, .batched = false}, {.data = b, .batched = false},
                         {.batch = 1, .M = rows, .N = N, .K = K}, out_shape);
    return record("matmul", {a, b}, out,
                  [A = a.detach(), B = b.detach(), a, b, rows, K, N, need_a, need_b](const Tensor& dC) -> Gradients {
                    Gradients grads(2);
                    if (need_a) grads[0] = gradient_product(a, {.data = dC}, {.data = B, .transposed = true}, {.batch = 1, .M = rows, .N = K, .K = N});
                    if (need_b) grads[1] = gradient_product(b, {.data = A, .transposed = true}, {.data = dC}, {.batch = 1, .M = K, .N = N, .K = rows});
                    return grads;
                  });
  }

  const Shape batch_shape = broadcast_shapes("matmul", batch_dims(a), batch_dims(b));
  const int64_t batch = numel(batch_shape);
  // An operand whose batch dims are broadcast gets a full copy (rare: attention's
  // products already match); a 2-D one is read with batch stride 0.
  const auto expand_untracked = [](const Tensor& t, const Shape& shape) {
    NoGradGuard no_grad;  // the op records itself below, with a and b as inputs
    return expand(t, shape);
  };
  const Tensor A = a.dim() == 2 ? a : expand_untracked(a, concat_shape(batch_shape, {M, K}));
  const Tensor B = expand_untracked(b, concat_shape(batch_shape, {K, N}));
  const bool a_batched = a.dim() > 2;
  Tensor out = product({.data = A, .batched = a_batched}, {.data = B}, {.batch = batch, .M = M, .N = N, .K = K},
                       concat_shape(batch_shape, {M, N}));
  return record("matmul", {a, b}, out,
                [A = A.detach(), B = B.detach(), sa = a.shape(), sb = b.shape(), batch_shape, batch, M, N, K,
                 a_batched, need_a, need_b](const Tensor& dC) -> Gradients {
                  Gradients grads(2);
                  if (need_a)
                    grads[0] = reduce_to_shape(product({.data = dC}, {.data = B, .transposed = true},
                                                       {.batch = batch, .M = M, .N = K, .K = N},
                                                       concat_shape(batch_shape, {M, K})),
                                               sa);
                  if (need_b)
                    grads[1] = reduce_to_shape(product({.data = A, .transposed = true, .batched = a_batched},
                                                       {.data = dC}, {.batch = batch, .M = K, .N = N, .K = M},
                                                       concat_shape(batch_shape, {K, N})),
                                               sb);
                  return grads;
                });
}

// linear: Y = X W + b with X [..., in] folded to rows [N, in], W [in, out], b [out].
// The bias is folded into the GEMM: Y's rows start as copies of b and the
// product is added to them (beta = 1), so the GEMM skips its zeroing pass and
// no separate add runs. Likewise in backward, dW is added straight into W's
// flat gradient buffer when it has one, and dX onto x's pending gradient
// (accumulation_target).
// Backward (docs/backprop.md, "Linear layer"):
//   Y = X W:   dX = dY Wᵀ,   dW = Xᵀ dY     (one GEMM each over all N rows)
//   Y += b:    db = Σ_rows dY               (b was broadcast over the rows)
Tensor linear(const Tensor& x, const Tensor& weight, const Tensor& bias) {
  const bool has_bias = bias.defined();
  if (has_bias) detail::check_compatible("linear", {&x, &weight, &bias});
  else detail::check_compatible("linear", {&x, &weight});
  AG_CHECK(weight.dim() == 2 && x.dim() >= 1 && x.size(-1) == weight.size(0) &&
               (!has_bias || bias.shape() == Shape{weight.size(1)}),
           "linear: x " << to_string(x.shape()) << ", weight " << to_string(weight.shape()) << ", bias "
                        << (has_bias ? to_string(bias.shape()) : "none")
                        << ": weight must be [in, out] with in = x's last dim, bias [out]");
  const int64_t in = weight.size(0), out = weight.size(1);
  const int64_t rows = numel(Shape(x.shape().begin(), x.shape().end() - 1));  // N = B·T
  Shape y_shape = x.shape();
  y_shape.back() = out;
  Tensor y = detail::empty_as(y_shape, x);
  kernel::GemmShape shape{1, rows, out, in};
  if (has_bias) {
    kernel::copy_strided(bias, {0, {0, 1}}, y, {0, {out, 1}}, {rows, out});  // every row of Y = b
    shape.beta = 1.0;
  }
  kernel::gemm(shape, x, weight, y);
  std::vector<Tensor> inputs = {x, weight};
  if (has_bias) inputs.push_back(bias);
  return record("linear", std::move(inputs), y,
                [x, X = x.detach(), W = weight.detach(), weight, has_bias, rows, in, out, need_x = x.requires_grad(),
                 need_w = weight.requires_grad(),
                 need_b = has_bias && bias.requires_grad()](const Tensor& dY) -> Gradients {
                  Gradients grads(has_bias ? 3 : 2);
                  if (need_x) grads[0] = gradient_product(x, {.data = dY}, {.data = W, .transposed = true}, {.batch = 1, .M = rows, .N = in, .K = out});
                  if (need_w) grads[1] = gradient_product(weight, {.data = X, .transposed = true}, {.data = dY}, {.batch = 1, .M = in, .N = out, .K = rows});
                  if (need_b) {
                    grads[2] = detail::empty_as({out}, dY);
                    kernel::sum_to_shape(dY, grads[2]);
                  }
                  return grads;
                });
}

}  // namespace ag
