// The scalar math of the elementwise ops and their derivatives, written once
// for the CPU loops and the CUDA kernels (AG_HOST_DEVICE).
//
//   GELU, exact:  y = x·Φ(x) = ½x(1 + erf(x/√2))
//                 y' = Φ(x) + x·φ(x),  φ(x) = exp(−x²/2)/√(2π)
//   GELU, tanh:   u = √(2/π)(x + 0.044715x³),  y = ½x(1 + tanh u)
//                 y' = ½(1 + tanh u) + ½x(1 − tanh²u)·√(2/π)(1 + 3·0.044715x²)
//   ReLU:         y = max(x, 0),  y' = [x > 0]
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
// Φ(x) and φ(x) for float32 on the CPU, with no erf: Abramowitz & Stegun 7.1.26,
//   1 − erf(z) ≈ t(a1 + t(a2 + t(a3 + t(a4 + t a5)))) e^{−z²},  t = 1/(1 + p z),  z = |x|/√2 ≥ 0,
// |error| ≤ 1.5e-7 (2.4e-7 measured in float32 over [−12, 12], against 6e-8 for a
// float32 erf: about 2 ulp of Φ near 1). It is the approximation PyTorch's
// CPU GELU uses for float32. Its e^{−z²} = e^{−x²/2} is also φ's, so GELU's
// derivative costs one exp and no erf; with no erf call in the loop the
// compiler keeps the whole computation in vector registers (GELU forward and
// backward ~1.4x faster). Φ(x < 0) = tail/2 directly, so the far negative tail
// keeps its relative accuracy. Float64 and CUDA use erf (gelu_erf above).
struct NormalCdfPdf {
  float cdf, pdf;
};
inline NormalCdfPdf normal_cdf_pdf_float(float x) {
  const float z = std::fabs(x) * static_cast<float>(kSqrt1_2);
  const float t = 1.f / (1.f + 0.3275911f * z);
  const float e = std::exp(-z * z);
  const float poly = 0.254829592f + t * (-0.284496736f + t * (1.421413741f + t * (-1.453152027f + t * 1.061405429f)));
  const float tail = t * poly * e;  // 1 − erf(z)
  return {x >= 0.f ? 1.f - 0.5f * tail : 0.5f * tail, e * static_cast<float>(kInvSqrt2Pi)};
}

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
template <class T> AG_HOST_DEVICE inline T relu_grad(T x) { return x > T(0) ? T(1) : T(0); }

}  // namespace ag::math
