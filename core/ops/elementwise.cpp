// Elementwise ops. Binary ops broadcast numpy-style: if A was broadcast to the
// output's shape, each element of A fed several outputs, so its gradient is the
// sum of theirs: dA = reduce_to_shape(dY·∂Y/∂A, shape(A)).
#include "core/ops/common.h"

namespace ag {

using kernel::BinaryOp;
using kernel::UnaryOp;

namespace {
Tensor binary_forward(const char* op, BinaryOp kind, const Tensor& a, const Tensor& b) {
  detail::check_compatible(op, {&a, &b});
  Tensor out = detail::empty_as(broadcast_shapes(op, a.shape(), b.shape()), a);
  kernel::binary(kind, a, b, out);
  return out;
}

Tensor unary_forward(const char* op, UnaryOp kind, const Tensor& x) {
  detail::check_floating(op, x);
  Tensor y = detail::empty_like(x);
  kernel::unary(kind, x, y);
  return y;
}

// Gradient for an input only when it wants one (saves the reductions for
// constants such as the attention mask).
Tensor if_needed(bool needed, auto&& compute) { return needed ? compute() : Tensor(); }
}  // namespace

// Y = A + B:  dA = reduce(dY),  dB = reduce(dY)
Tensor add(const Tensor& a, const Tensor& b) {
  Tensor out = binary_forward("add", BinaryOp::Add, a, b);
  return record("add", {a, b}, out,
                [sa = a.shape(), sb = b.shape(), na = a.requires_grad(), nb = b.requires_grad()](
                    const Tensor& dY) -> Gradients {
                  return {if_needed(na, [&] { return reduce_to_shape(dY, sa); }),
                          if_needed(nb, [&] { return reduce_to_shape(dY, sb); })};
                });
}

// Y = A − B:  dA = reduce(dY),  dB = −reduce(dY)
Tensor sub(const Tensor& a, const Tensor& b) {
  Tensor out = binary_forward("sub", BinaryOp::Sub, a, b);
  return record("sub", {a, b}, out,
                [sa = a.shape(), sb = b.shape(), na = a.requires_grad(), nb = b.requires_grad()](
                    const Tensor& dY) -> Gradients {
                  return {if_needed(na, [&] { return reduce_to_shape(dY, sa); }),
                          if_needed(nb, [&] { return neg(reduce_to_shape(dY, sb)); })};
                });
}

// Y = A ∘ B:  dA = reduce(dY ∘ B),  dB = reduce(dY ∘ A).  Saves A and B.
Tensor mul(const Tensor& a, const Tensor& b) {
  Tensor out = binary_forward("mul", BinaryOp::Mul, a, b);
  return record("mul", {a, b}, out,
                [A = a.detach(), B = b.detach(), na = a.requires_grad(), nb = b.requires_grad()](
                    const Tensor& dY) -> Gradients {
                  return {if_needed(na, [&] { return reduce_to_shape(mul(dY, B), A.shape()); }),
                          if_needed(nb, [&] { return reduce_to_shape(mul(dY, A), B.shape()); })};
                });
}

// Y = A / B:  dA = reduce(dY / B),  dB = reduce(−dY ∘ A / B²) = reduce(−dY ∘ Y / B).
// Saves B and Y.
Tensor div(const Tensor& a, const Tensor& b) {
  Tensor out = binary_forward("div", BinaryOp::Div, a, b);
  return record("div", {a, b}, out,
                [sa = a.shape(), B = b.detach(), Y = out.detach(), na = a.requires_grad(),
                 nb = b.requires_grad()](const Tensor& dY) -> Gradients {
                  const Tensor dY_over_B = div(dY, B);
                  return {if_needed(na, [&] { return reduce_to_shape(dY_over_B, sa); }),
                          if_needed(nb, [&] { return reduce_to_shape(neg(mul(dY_over_B, Y)), B.shape()); })};
                });
}

// Y = −X:  dX = −dY
Tensor neg(const Tensor& x) {
  Tensor y = unary_forward("neg", UnaryOp::Neg, x);
  return record("neg", {x}, y, [](const Tensor& dY) -> Gradients { return {neg(dY)}; });
}

// Y = X + s:  dX = dY
Tensor add(const Tensor& x, double s) {
  detail::check_floating("add_scalar", x);
  Tensor y = detail::empty_like(x);
  kernel::affine(x, 1.0, s, y);
  return record("add_scalar", {x}, y, [](const Tensor& dY) -> Gradients { return {dY}; });
}

// Y = s·X:  dX = s·dY
Tensor mul(const Tensor& x, double s) {
  detail::check_floating("mul_scalar", x);
  Tensor y = detail::empty_like(x);
  kernel::affine(x, s, 0.0, y);
  return record("mul_scalar", {x}, y, [s](const Tensor& dY) -> Gradients { return {mul(dY, s)}; });
}

// Y = X^p:  dX = dY ∘ p·X^(p−1).  Saves X.
Tensor pow(const Tensor& x, double exponent) {
  detail::check_floating("pow", x);
  Tensor y = detail::empty_like(x);
  kernel::pow_scalar(x, exponent, y);
  return record("pow", {x}, y, [X = x.detach(), exponent](const Tensor& dY) -> Gradients {
    return {mul(dY, mul(pow(X, exponent - 1.0), exponent))};
  });
}

// Y = exp(X):  dX = dY ∘ Y.  Saves Y.
Tensor exp(const Tensor& x) {
  Tensor y = unary_forward("exp", UnaryOp::Exp, x);
  return record("exp", {x}, y, [Y = y.detach()](const Tensor& dY) -> Gradients { return {mul(dY, Y)}; });
}

// Y = log(X):  dX = dY / X.  Saves X.
Tensor log(const Tensor& x) {
  Tensor y = unary_forward("log", UnaryOp::Log, x);
  return record("log", {x}, y, [X = x.detach()](const Tensor& dY) -> Gradients { return {div(dY, X)}; });
}

// Y = tanh(X):  dX = dY ∘ (1 − Y²).  Saves Y.
Tensor tanh(const Tensor& x) {
  Tensor y = unary_forward("tanh", UnaryOp::Tanh, x);
  return record("tanh", {x}, y, [Y = y.detach()](const Tensor& dY) -> Gradients {
    return {mul(dY, add(neg(mul(Y, Y)), 1.0))};
  });
}

// The activations whose derivative needs X: dX = dY ∘ f'(X), one fused kernel
// (core/elementwise_math.h has f and f'). Saves X.
namespace {
Tensor activation(const char* op, UnaryOp kind, const Tensor& x) {
  Tensor y = unary_forward(op, kind, x);
  return record(op, {x}, y, [X = x.detach(), kind](const Tensor& dY) -> Gradients {
    Tensor dX = detail::empty_like(X);
    kernel::unary_backward(kind, X, dY, dX);
    return {dX};
  });
}
}  // namespace

Tensor relu(const Tensor& x) { return activation("relu", UnaryOp::Relu, x); }
Tensor silu(const Tensor& x) { return activation("silu", UnaryOp::Silu, x); }
Tensor softplus(const Tensor& x) { return activation("softplus", UnaryOp::Softplus, x); }
// Y = ELU(X) = X for X > 0, eˣ − 1 else:  dX = dY ∘ ([X > 0] + eˣ·[X ≤ 0]).  Saves X.
Tensor elu(const Tensor& x) { return activation("elu", UnaryOp::Elu, x); }

// Y = LeakyReLU_a(X) = X for X > 0, a·X else:  dX = dY ∘ ([X > 0] + a·[X ≤ 0]), the
// subgradient a at 0 (as PyTorch's). Saves X. (docs/backprop.md, "Graph attention")
Tensor leaky_relu(const Tensor& x, double slope) {
  detail::check_floating("leaky_relu", x);
  AG_CHECK(std::isfinite(slope), "leaky_relu: slope " << slope << " is not a finite number");
  Tensor y = detail::empty_like(x);
  kernel::leaky_relu(x, slope, y);
  return record("leaky_relu", {x}, y, [X = x.detach(), slope](const Tensor& dY) -> Gradients {
    Tensor dX = detail::empty_like(X);
    kernel::leaky_relu_backward(X, dY, slope, dX);
    return {dX};
  });
}

Tensor gelu(const Tensor& x, GeluApprox approx) {
  return approx == GeluApprox::Erf ? activation("gelu", UnaryOp::GeluErf, x)
                                   : activation("gelu_tanh", UnaryOp::GeluTanh, x);
}

// Y = f(U) with U = X + b, b [C] broadcast over the rows of X [..., C]: the
// MLP's fc bias and GELU in one kernel (gelu(add(X, b)) is the reference).
// Backward, from the two ops it fuses:
//   Y = f(U):      dU = dY ∘ f'(U)
//   U = X + b:     dX = dU,   db = Σ_rows dU   (b was broadcast over the rows)
// one kernel again, which writes dX and sums its columns in the same sweep.
// Saves f'(U), which the forward computes from the terms of f(U) it has at hand
// (GELU: Φ(U) and φ(U)), instead of X and b: the same memory, one [..., C]
// tensor, and the backward only multiplies (recomputing f' there made it the
// step's slowest kernel after the GEMMs).
Tensor bias_gelu(const Tensor& x, const Tensor& bias, GeluApprox approx) {
  detail::check_compatible("bias_gelu", {&x, &bias});
  AG_CHECK(x.dim() >= 1 && bias.shape() == Shape{x.size(-1)},
           "bias_gelu: x " << to_string(x.shape()) << ", bias " << to_string(bias.shape())
                           << ": bias must be [C] with C = x's last dim");
  const UnaryOp kind = approx == GeluApprox::Erf ? UnaryOp::GeluErf : UnaryOp::GeluTanh;
  Tensor y = detail::empty_like(x);
  if (!any_requires_grad({x, bias})) {
    kernel::bias_activation(kind, x, bias, y, nullptr);
    return y;
  }
  Tensor derivative = detail::empty_like(x);
  kernel::bias_activation(kind, x, bias, y, &derivative);
  return record("bias_gelu", {x, bias}, y, [derivative, bias_shape = bias.shape()](const Tensor& dY) -> Gradients {
    // dX in f'(U)'s own memory when this closure runs only once (each element read, then written).
    Tensor dX = graph_retained() ? detail::empty_like(derivative) : derivative;
    Tensor db = detail::empty_as(bias_shape, derivative);
    kernel::bias_activation_backward(derivative, dY, dX, db);
    return {dX, db};
  });
}

}  // namespace ag
