// Elementwise kernels: one thread per element (grid-stride), the op chosen by a
// switch that every thread of a launch takes the same way. The scalar math is
// core/elementwise_math.h, shared with the CPU. Reference: core/cpu/elementwise.cpp.
#include "core/elementwise_math.h"
#include "cuda/cuda.h"
#include "cuda/launch.cuh"

namespace ag::cuda {

namespace {
// The activations with a derivative kernel (Relu, GeluErf, GeluTanh, Silu, Softplus, Elu; checked
// on the host by check_activation) and their derivatives.
template <class T> __device__ T activation(UnaryOp op, T v) {
  switch (op) {
    case UnaryOp::Relu: return math::relu(v);
    case UnaryOp::GeluErf: return math::gelu_erf(v);
    case UnaryOp::GeluTanh: return math::gelu_tanh(v);
    case UnaryOp::Silu: return math::silu(v);
    case UnaryOp::Softplus: return math::softplus(v);
    case UnaryOp::Elu: return math::elu(v);
    default: return T(0);
  }
}
template <class T> __device__ T activation_grad(UnaryOp op, T v) {
  switch (op) {
    case UnaryOp::Relu: return math::relu_grad(v);
    case UnaryOp::GeluErf: return math::gelu_erf_grad(v);
    case UnaryOp::GeluTanh: return math::gelu_tanh_grad(v);
    case UnaryOp::Silu: return math::silu_grad(v);
    case UnaryOp::Softplus: return math::softplus_grad(v);
    case UnaryOp::Elu: return math::elu_grad(v);
    default: return T(0);
  }
}

void check_activation(const char* kernel, UnaryOp op) {
  if (op != UnaryOp::Relu && op != UnaryOp::GeluErf && op != UnaryOp::GeluTanh && op != UnaryOp::Silu &&
      op != UnaryOp::Softplus && op != UnaryOp::Elu)
    throw Error(std::string(kernel) + ": no kernel for this op (its derivative is an expression of y)");
}

template <class T> struct Unary {
  UnaryOp op;
  const T* x;
  T* y;
  __device__ void operator()(int64_t i) const {
    const T v = x[i];
    switch (op) {
      case UnaryOp::Neg: y[i] = -v; break;
      case UnaryOp::Exp: y[i] = std::exp(v); break;
      case UnaryOp::Log: y[i] = std::log(v); break;
      case UnaryOp::Tanh: y[i] = std::tanh(v); break;
      default: y[i] = activation(op, v); break;
    }
  }
};

template <class T> struct UnaryBackward {
  UnaryOp op;
  const T* x;
  const T* dY;
  T* dX;
  __device__ void operator()(int64_t i) const { dX[i] = dY[i] * activation_grad(op, x[i]); }
};

// Rows of C: element i adds bias[i % C].
template <class T> struct BiasActivation {
  UnaryOp op;
  const T *x, *bias;
  T *y, *derivative;  // derivative: nullptr when not wanted
  int64_t C;
  __device__ void operator()(int64_t i) const {
    const T u = x[i] + bias[i % C];
    y[i] = activation(op, u);
    if (derivative) derivative[i] = activation_grad(op, u);
  }
};

template <class T> struct Affine {
  const T* x;
  T* y;
  T scale, shift;
  __device__ void operator()(int64_t i) const { y[i] = scale * x[i] + shift; }
};

template <class T> struct LeakyRelu {
  const T* x;
  T* y;
  T slope;
  __device__ void operator()(int64_t i) const { y[i] = math::leaky_relu(x[i], slope); }
};
template <class T> struct LeakyReluBackward {
  const T *x, *dY;
  T* dX;
  T slope;
  __device__ void operator()(int64_t i) const { dX[i] = dY[i] * math::leaky_relu_grad(x[i], slope); }
};

template <class T> struct Pow {
  const T* x;
  T* y;
  T exponent;
  __device__ void operator()(int64_t i) const { y[i] = std::pow(x[i], exponent); }
};

template <class T> __device__ T apply(BinaryOp op, T u, T v) {
  switch (op) {
    case BinaryOp::Add: return u + v;
    case BinaryOp::Sub: return u - v;
    case BinaryOp::Mul: return u * v;
    case BinaryOp::Div: return u / v;
  }
  return T(0);
}

// a and b of the output's shape.
template <class T> struct BinarySameShape {
  BinaryOp op;
  const T *a, *b;
  T* out;
  __device__ void operator()(int64_t i) const { out[i] = apply(op, a[i], b[i]); }
};

// a and b read through broadcast strides (0 along the dims they are broadcast
// on); the output is contiguous, so element i is written at i.
template <class T> struct BinaryBroadcast {
  BinaryOp op;
  const T *a, *b;
  T* out;
  StridedIndex<2> index;  // operand 0: a, 1: b
  __device__ void operator()(int64_t i) const {
    int64_t offset[2];
    index.offsets(i, offset);
    out[i] = apply(op, a[offset[0]], b[offset[1]]);
  }
};
}  // namespace

void unary(UnaryOp op, const Tensor& x, Tensor& y) {
  visit_floating(x.dtype(), "unary", [&](auto zero) {
    using T = decltype(zero);
    for_each_index(x.numel(), Unary<T>{op, ptr<const T>(x), ptr<T>(y)});
  });
}

void unary_backward(UnaryOp op, const Tensor& x, const Tensor& dY, Tensor& dX) {
  visit_floating(x.dtype(), "unary_backward", [&](auto zero) {
    using T = decltype(zero);
    check_activation("unary_backward", op);
    for_each_index(x.numel(), UnaryBackward<T>{op, ptr<const T>(x), ptr<const T>(dY), ptr<T>(dX)});
  });
}

void bias_activation(UnaryOp op, const Tensor& x, const Tensor& bias, Tensor& y, Tensor* derivative) {
  visit_floating(x.dtype(), "bias_activation", [&](auto zero) {
    using T = decltype(zero);
    check_activation("bias_activation", op);
    for_each_index(x.numel(), BiasActivation<T>{op, ptr<const T>(x), ptr<const T>(bias), ptr<T>(y),
                                                derivative ? ptr<T>(*derivative) : nullptr, bias.numel()});
  });
}

// Two kernels here (the CPU does one sweep): dX = dY ∘ derivative, then dBias
// as sum_to_shape's deterministic column sums of dX.
void bias_activation_backward(const Tensor& derivative, const Tensor& dY, Tensor& dX, Tensor& dBias) {
  visit_floating(dX.dtype(), "bias_activation_backward", [&](auto zero) {
    using T = decltype(zero);
    for_each_index(dX.numel(), BinarySameShape<T>{BinaryOp::Mul, ptr<const T>(dY), ptr<const T>(derivative), ptr<T>(dX)});
  });
  sum_to_shape(dX, dBias);
}

void affine(const Tensor& x, double scale, double shift, Tensor& y) {
  visit_floating(x.dtype(), "affine", [&](auto zero) {
    using T = decltype(zero);
    for_each_index(x.numel(), Affine<T>{ptr<const T>(x), ptr<T>(y), static_cast<T>(scale), static_cast<T>(shift)});
  });
}

void leaky_relu(const Tensor& x, double slope, Tensor& y) {
  visit_floating(x.dtype(), "leaky_relu", [&](auto zero) {
    using T = decltype(zero);
    for_each_index(x.numel(), LeakyRelu<T>{ptr<const T>(x), ptr<T>(y), static_cast<T>(slope)});
  });
}

void leaky_relu_backward(const Tensor& x, const Tensor& dY, double slope, Tensor& dX) {
  visit_floating(x.dtype(), "leaky_relu_backward", [&](auto zero) {
    using T = decltype(zero);
    for_each_index(x.numel(), LeakyReluBackward<T>{ptr<const T>(x), ptr<const T>(dY), ptr<T>(dX), static_cast<T>(slope)});
  });
}

void pow_scalar(const Tensor& x, double exponent, Tensor& y) {
  visit_floating(x.dtype(), "pow", [&](auto zero) {
    using T = decltype(zero);
    for_each_index(x.numel(), Pow<T>{ptr<const T>(x), ptr<T>(y), static_cast<T>(exponent)});
  });
}

void binary(BinaryOp op, const Tensor& a, const Tensor& b, Tensor& out) {
  visit_floating(a.dtype(), "binary", [&](auto zero) {
    using T = decltype(zero);
    const int64_t n = out.numel();
    if (n == 0) return;
    if (a.shape() == b.shape())
      return for_each_index(n, BinarySameShape<T>{op, ptr<const T>(a), ptr<const T>(b), ptr<T>(out)});
    const Shape& shape = out.shape();
    const StridedIndex<2> index = make_strided_index<2>(
        "binary", shape, {broadcast_strides(a.shape(), shape), broadcast_strides(b.shape(), shape)});
    for_each_index(n, BinaryBroadcast<T>{op, ptr<const T>(a), ptr<const T>(b), ptr<T>(out), index});
  });
}

}  // namespace ag::cuda
