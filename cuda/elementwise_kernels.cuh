// Elementwise kernels: one thread per element (grid-stride), the op chosen by a switch that
// every thread of a launch takes the same way; with their launches, written once for any device
// (cuda/elementwise.cu runs them on the GPU, tests/test_cuda_on_host.cpp on the host). The scalar
// math is core/elementwise_math.h, shared with the CPU. Reference: core/cpu/elementwise.cpp.
#pragma once
#include <cmath>
#include <cstdint>

#include "core/elementwise_math.h"
#include "core/kernel_args.h"  // UnaryOp, BinaryOp
#include "core/shape.h"
#include "cuda/reduce_kernels.cuh"
#include "cuda/strided_index.cuh"

namespace ag::cuda {
namespace {

using kernel::BinaryOp;
using kernel::UnaryOp;

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

// The launches on a device `dev` (cuda/launch.cuh's Gpu; the host tests' Device), n elements.
// Contracts: core/kernels.inc. unary_backward and bias_activation take the activations with a
// derivative kernel only (cuda/elementwise.cu checks).
template <class T, class Device> void unary_launch(const Device& dev, UnaryOp op, const T* x, int64_t n, T* y) {
  dev(n, Unary<T>{op, x, y});
}

template <class T, class Device>
void unary_backward_launch(const Device& dev, UnaryOp op, const T* x, const T* dY, int64_t n, T* dX) {
  dev(n, UnaryBackward<T>{op, x, dY, dX});
}

// x [n / C, C], bias [C]; derivative null: not wanted.
template <class T, class Device>
void bias_activation_launch(const Device& dev, UnaryOp op, const T* x, const T* bias, int64_t n, int64_t C, T* y,
                            T* derivative) {
  dev(n, BiasActivation<T>{op, x, bias, y, derivative, C});
}

// Two kernels (the CPU does one sweep): dX = dY ∘ derivative, then dBias as sum_to_shape's
// deterministic column sums of dX.
template <class T, class Device>
void bias_activation_backward_launch(Device& dev, const T* derivative, const T* dY, const Shape& shape,
                                     const Shape& bias_shape, T* dX, T* dBias) {
  dev(numel(shape), BinarySameShape<T>{BinaryOp::Mul, dY, derivative, dX});
  sum_to_shape_launch(dev, static_cast<const T*>(dX), shape, bias_shape, dBias);
}

template <class T, class Device>
void affine_launch(const Device& dev, const T* x, int64_t n, T scale, T shift, T* y) {
  dev(n, Affine<T>{x, y, scale, shift});
}

template <class T, class Device> void leaky_relu_launch(const Device& dev, const T* x, int64_t n, T slope, T* y) {
  dev(n, LeakyRelu<T>{x, y, slope});
}

template <class T, class Device>
void leaky_relu_backward_launch(const Device& dev, const T* x, const T* dY, int64_t n, T slope, T* dX) {
  dev(n, LeakyReluBackward<T>{x, dY, dX, slope});
}

template <class T, class Device> void pow_scalar_launch(const Device& dev, const T* x, int64_t n, T exponent, T* y) {
  dev(n, Pow<T>{x, y, exponent});
}

// out [out_shape] = a op b, a and b broadcast to it.
template <class T, class Device>
void binary_launch(const Device& dev, BinaryOp op, const T* a, const Shape& a_shape, const T* b, const Shape& b_shape,
                   const Shape& out_shape, T* out) {
  const int64_t n = numel(out_shape);
  if (n == 0) return;
  if (a_shape == b_shape) return dev(n, BinarySameShape<T>{op, a, b, out});
  const StridedIndex<2> index = make_strided_index<2>(
      "binary", out_shape, {broadcast_strides(a_shape, out_shape), broadcast_strides(b_shape, out_shape)});
  dev(n, BinaryBroadcast<T>{op, a, b, out, index});
}

}  // namespace
}  // namespace ag::cuda
