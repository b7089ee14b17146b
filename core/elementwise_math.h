// The scalar math of the elementwise ops and their derivatives, written once
// for the CPU loops and the CUDA kernels (AG_HOST_DEVICE).
//
//   GELU, exact:  y = x·Φ(x) = ½x(1 + erf(x/√2))
//                 y' = Φ(x) + x·φ(x),  φ(x) = exp(−x²/2)/√(2π)
//   GELU, tanh:   u = √(2/π)(x + 0.044715x³),  y = ½x(1 + tanh u)
//                 y' = ½(1 + tanh u) + ½x(1 − tanh²u)·√(2/π)(1 + 3·0.044715x²)
//   ReLU:         y = max(x, 0),  y' = [x > 0]
//   sigmoid:      σ(x) = 1/(1 + e^−x), formed from e^−|x| ≤ 1 so that it never overflows
//   SiLU:         y = x·σ(x),  y' = σ(x)(1 + x(1 − σ(x)))
//   softplus:     y = log(1 + eˣ) = max(x, 0) + log1p(e^−|x|),  y' = σ(x)
//   LeakyReLU:    y = x if x > 0 else a·x (slope a),  y' = [x > 0] + a·[x ≤ 0]
//   ELU (α = 1):  y = x if x > 0 else eˣ − 1 (expm1: exact near 0),  y' = [x > 0] + eˣ·[x ≤ 0]
#pragma once
#include <cmath>

#include "core/random.h"  // AG_HOST_DEVICE

namespace ag::math {

constexpr double kSqrt1_2 = 0.70710678118654752440;     // 1/√2
constexpr double kInvSqrt2Pi = 0.39894228040143267794;  // 1/√(2π)
constexpr double kSqrt2_Pi = 0.79788456080286535588;    // √(2/π)
constexpr double kGeluTanhCoeff = 0.044715;

template <class T> AG_HOST_DEVICE inline T gelu_erf(T x) {
  return T(0.5) * x * (T(1) + std::erf(x * T(kSqrt1_2)));
}
template <class T> AG_HOST_DEVICE inline T gelu_erf_grad(T x) {
  const T cdf = T(0.5) * (T(1) + std::erf(x * T(kSqrt1_2)));
  return cdf + x * T(kInvSqrt2Pi) * std::exp(T(-0.5) * x * x);
}
// Float32 on the CPU computes Φ and φ without erf: normal_cdf_pdf_float in
// core/cpu/vector_math.h.

template <class T> AG_HOST_DEVICE inline T gelu_tanh(T x) {
  const T u = T(kSqrt2_Pi) * (x + T(kGeluTanhCoeff) * x * x * x);
  return T(0.5) * x * (T(1) + std::tanh(u));
}
template <class T> AG_HOST_DEVICE inline T gelu_tanh_grad(T x) {
  const T u = T(kSqrt2_Pi) * (x + T(kGeluTanhCoeff) * x * x * x);
  const T t = std::tanh(u);
  const T du = T(kSqrt2_Pi) * (T(1) + T(3 * kGeluTanhCoeff) * x * x);
  return T(0.5) * (T(1) + t) + T(0.5) * x * (T(1) - t * t) * du;
}
template <class T> AG_HOST_DEVICE inline T relu(T x) { return x > T(0) ? x : T(0); }
template <class T> AG_HOST_DEVICE inline T sigmoid(T x) {
  const T e = std::exp(-std::fabs(x));  // in (0, 1]: no overflow for any x
  return x >= T(0) ? T(1) / (T(1) + e) : e / (T(1) + e);
}
template <class T> AG_HOST_DEVICE inline T silu(T x) { return x * sigmoid(x); }
template <class T> AG_HOST_DEVICE inline T silu_grad(T x) {
  const T s = sigmoid(x);
  return s * (T(1) + x * (T(1) - s));
}
template <class T> AG_HOST_DEVICE inline T softplus(T x) {
  return (x > T(0) ? x : T(0)) + std::log1p(std::exp(-std::fabs(x)));
}
template <class T> AG_HOST_DEVICE inline T softplus_grad(T x) { return sigmoid(x); }
template <class T> AG_HOST_DEVICE inline T relu_grad(T x) { return x > T(0) ? T(1) : T(0); }
template <class T> AG_HOST_DEVICE inline T leaky_relu(T x, T slope) { return x > T(0) ? x : slope * x; }
template <class T> AG_HOST_DEVICE inline T leaky_relu_grad(T x, T slope) { return x > T(0) ? T(1) : slope; }
template <class T> AG_HOST_DEVICE inline T elu(T x) { return x > T(0) ? x : std::expm1(x); }
template <class T> AG_HOST_DEVICE inline T elu_grad(T x) { return x > T(0) ? T(1) : std::exp(x); }

}  // namespace ag::math
