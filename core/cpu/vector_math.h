// Float math that the compiler keeps in vector registers, and the attribute
// that compiles a hot loop for AVX-512 as well as for any x86-64 CPU.
//
// A call to libm's expf inside a loop stops vectorisation (or, under
// -ffast-math, becomes a libmvec call that spills every vector register), and a
// build for any x86-64 CPU vectorises 4 floats wide where this machine's cores
// take 16. The functions below are inline polynomials with no call in them;
// AG_VECTOR_CLONES compiles the loop that uses them for both.
#pragma once
#include <algorithm>
#include <bit>
#include <cmath>
#include <cstdint>
#include <limits>

#include "core/elementwise_math.h"

// On a function: GCC (and Clang) compile it twice, for x86-64-v4 (AVX-512 F,
// BW, CD, DQ, VL) and for the build's baseline, and the dynamic loader picks
// one when the program starts (an ifunc): the binary still runs on any x86-64
// CPU. Only the function's own body, and what it inlines, gets the second
// ISA: a lambda called through a template or an OpenMP region inside it stays
// baseline (OpenMP outlines the region before cloning). So it goes on plain
// float loops over raw pointers, called from inside the OpenMP loops; a clone
// that wraps a template's float instance needs that template always_inline
// (GCC's inliner kept the dense softmax's body out of line, in the baseline
// ISA, which made the clone pointless). A build whose baseline already has AVX
// (-march=native, ATTOGRAD_NATIVE) compiles them once: GCC then will not inline
// the baseline's helpers into a clone for another architecture, and the clone
// would call normal_cdf_pdf_float per element (docs/performance.md: far slower).
#if defined(__x86_64__) && defined(__GNUC__) && !defined(__AVX__)
#define AG_VECTOR_CLONES __attribute__((target_clones("arch=x86-64-v4", "default")))
#else
#define AG_VECTOR_CLONES
#endif

namespace ag::math {

// e^x for x ≤ 0 (−inf included; the softmax's arguments and φ's), in a form
// the compiler vectorises: x = n·ln2 + r with n the integer nearest x·log₂e
// and |r| ≤ ln2/2, e^r by its Taylor series to r⁷ (truncation ≤ 0.35⁸/8! ≈
// 5e-9, under float's 6e-8 rounding; 9e-8 relative measured against float64
// over [−87, 0]), times 2ⁿ built in the exponent bits. Below −87 the result
// (< 2⁻¹²⁵, at most denormal) is returned as 0. float64 uses std::exp.
inline float exp_nonpositive(float x) {
  constexpr float kLog2e = 1.44269504088896341f;
  constexpr float kLn2Hi = 0.693145751953125f;  // ln 2 = hi + lo, hi with 15 significant bits, so n·hi is exact
  constexpr float kLn2Lo = 1.42860682030941723212e-6f;
  constexpr float kRound = 12582912.0f;  // 1.5·2²³: adding it rounds to an integer, kept in the low mantissa bits
  const float clamped = std::clamp(x, -87.0f, 0.0f);
  const float shifted = clamped * kLog2e + kRound;
  const float n = shifted - kRound;
  const float r = clamped - n * kLn2Hi - n * kLn2Lo;
  float p = 1.0f / 5040;
  p = p * r + 1.0f / 720;
  p = p * r + 1.0f / 120;
  p = p * r + 1.0f / 24;
  p = p * r + 1.0f / 6;
  p = p * r + 0.5f;
  p = p * r + 1.0f;
  p = p * r + 1.0f;
  const int32_t exponent = std::bit_cast<int32_t>(shifted) - std::bit_cast<int32_t>(kRound) + 127;
  const float two_to_n = std::bit_cast<float>(exponent << 23);
  return x < -87.0f ? 0.0f : p * two_to_n;
}
inline double exp_nonpositive(double x) { return std::exp(x); }

// tanh x, in a form the compiler vectorises (soft-capping's S' = cap·tanh(u/cap) in the
// flash tiles). Both branches are formed and one kept, so the loop has no branch:
//   |x| < 0.4:  the odd Taylor series to x¹³ (the next term, 929569/638512875·|x|¹⁵, is
//               below 1.6e-9 there: under float's rounding);
//   |x| ≥ 0.4:  (1 − e)/(1 + e) with e = e^{−2|x|} (exp_nonpositive), where 1 − e ≥ 0.55 keeps
//               the subtraction free of cancellation;
// the sign restored. At most 2.1 ulp from float64's measured over [−20, 20]
// (tests/test_score_mods.cpp). float64 uses std::tanh.
inline float tanh_vectorisable(float x) {
  const float a = std::fabs(x), z = a * a;
  float p = 21844.0f / 6081075;
  p = p * z - 1382.0f / 155925;
  p = p * z + 62.0f / 2835;
  p = p * z - 17.0f / 315;
  p = p * z + 2.0f / 15;
  p = p * z - 1.0f / 3;
  const float small = a + a * z * p;
  const float e = exp_nonpositive(-2.0f * a);
  const float large = (1.0f - e) / (1.0f + e);  // formed unconditionally: a division under the select would be a branch
  return std::copysign(a < 0.4f ? small : large, x);
}
inline double tanh_vectorisable(double x) { return std::tanh(x); }

// max_j x[j] (−inf when n = 0). One running max is a chain of dependent
// compares that the compiler may not reorder (max is not associative under
// IEEE rules for NaN and signed zeros); kLanes independent running maxima,
// combined at the end, run at the compare unit's throughput instead of its
// latency.
template <class T> inline T max_of(const T* x, int64_t n) {
  constexpr int64_t kLanes = 16;
  T lanes[kLanes];
  std::fill_n(lanes, kLanes, -std::numeric_limits<T>::infinity());
  int64_t j = 0;
  for (; j + kLanes <= n; j += kLanes)
    for (int64_t l = 0; l < kLanes; ++l) lanes[l] = std::max(lanes[l], x[j + l]);
  for (; j < n; ++j) lanes[0] = std::max(lanes[0], x[j]);
  T max = lanes[0];
  for (int64_t l = 1; l < kLanes; ++l) max = std::max(max, lanes[l]);
  return max;
}

// Φ(x) and φ(x) for float32 on the CPU, with no erf: Abramowitz & Stegun 7.1.26,
//   1 − erf(z) ≈ t(a1 + t(a2 + t(a3 + t(a4 + t a5)))) e^{−z²},  t = 1/(1 + p z),  z = |x|/√2 ≥ 0,
// |error| ≤ 1.5e-7 (2.4e-7 measured in float32 over [−12, 12], against 6e-8 for a
// float32 erf: about 2 ulp of Φ near 1). It is the approximation PyTorch's
// CPU GELU uses for float32. Its e^{−z²} = e^{−x²/2} is also φ's, so GELU's
// derivative costs one exp and no erf, and with exp_nonpositive there is no
// call in the loop at all. Φ(x < 0) = tail/2 directly, so the far negative
// tail keeps its relative accuracy. Float64 and CUDA use erf (gelu_erf in
// core/elementwise_math.h).
struct NormalCdfPdf {
  float cdf, pdf;
};
inline NormalCdfPdf normal_cdf_pdf_float(float x) {
  const float z = std::fabs(x) * static_cast<float>(kSqrt1_2);
  const float t = 1.f / (1.f + 0.3275911f * z);
  const float e = exp_nonpositive(-z * z);
  const float poly = 0.254829592f + t * (-0.284496736f + t * (1.421413741f + t * (-1.453152027f + t * 1.061405429f)));
  const float tail = t * poly * e;  // 1 − erf(z)
  return {x >= 0.f ? 1.f - 0.5f * tail : 0.5f * tail, e * static_cast<float>(kInvSqrt2Pi)};
}

}  // namespace ag::math
