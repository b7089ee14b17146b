// The reference side of the tensor-core flash tests (tests/test_flash_mma.cpp on a device,
// tests/test_cuda_on_host.cpp on host threads): the cases, the error bound derived from
// each operand format's unit roundoff, the naive attention in that format, and the roundings.
#pragma once
#include <cmath>
#include <cstring>
#include <string>
#include <vector>

#include "core/attention_math.h"
#include "core/precision.h"
#include "tests/helpers.h"

namespace ag::test::flash_mma_reference {
namespace {


// The error bound. u is the format's unit roundoff: 2^-8 for bf16 (8-bit significand,
// nearest even), 2^-11 for tf32 (11-bit, nearest with ties away from zero: the same
// half unit); products of two such numbers (16 or 22 bits) are exact in fp32; a sum
// of n fp32 terms is off by at most γ_n = n·2^-24 / (1 − n·2^-24) times the sum of
// their magnitudes.
//
// A product Y = Σ_j X_ij W_jc whose operand X carries an error ≤ ξ_ij before it
// is rounded to bf16, W rounded to bf16, summed in fp32 over n terms:
//   each term is (X + ε)(1 + ρ) · W(1 + ν) with |ε| ≤ ξ, |ρ|, |ν| ≤ u, so
//   |Ŷ − Y| ≤ Σ_j [(|X_ij| + ξ_ij)(1 + u)²(1 + γ_n) − |X_ij|] · |W_jc|      (product_bound)
// (ξ = 0: 2u + u² + γ_n to first order, test_precision.cpp's GEMM bound.)
//
// Forward. S = scale·Q Kᵀ from bf16 Q, K: |Ŝ_ij − S_ij| ≤ ε_ij = scale·product_bound(ξ = 0)
// over d_h terms; let E_i = max_j ε_ij over the keys row i sees. softmax moves by
// at most e^(±2E_i) under such a shift of its inputs (the numerator by e^(±E_i), the
// sum by the same), so the kernel's P (exp(Ŝ − m), normalised by its own fp32 sum)
// and the backward's P = exp(Ŝ − lse) are within π_ij = (e^(2E_i) − 1)·P_ij of P,
// and lse within E_i. Z = P V: product_bound with ξ = π over Tk terms (+2 for the
// division by l).
//
// Backward. dP = dZ Vᵀ from bf16 dZ, V: |δdP_ij| ≤ φ_ij = product_bound(ξ = 0) over d_h
// terms. D_i = Σ_j P_ij dP_ij in fp32: |δD_i| ≤ Δ_i = Σ_j [(P + π)(|dP| + φ)(1 + γ_Tk) − P|dP|].
// dS = P ∘ (dP − D): |δdS_ij| ≤ σ_ij = (P + π)(|dP − D| + φ + Δ) − P|dP − D|.
// Then dV = Pᵀ dZ (ξ = π), dQ = scale·dS K and dK = scale·dSᵀ Q (ξ = σ), each by
// product_bound over its sum's length (dK and dV also over the heads of a kv group).
// The fp32 exp, the scale's product and lse's split add a few 2^-24 relative to
// terms the bound already carries at ≥ u; γ_n with n + 16 terms covers them.
double gamma_of(int64_t n) {
  const double e = std::ldexp(1.0, -24) * static_cast<double>(n + 16);
  return e / (1 - e);
}

struct Case {
  int64_t B, Hq, Hkv, Tq, Tk, d;
  bool causal;
  AttentionLayout layout;
  SparsePattern pattern = {};  // a window (dilated), global keys, random blocks: the spec's, as the op reads it
  bool alibi = false;
};
std::string describe(const Case& c) {
  return "B " + std::to_string(c.B) + " Hq " + std::to_string(c.Hq) + " Hkv " + std::to_string(c.Hkv) + " Tq " +
         std::to_string(c.Tq) + " Tk " + std::to_string(c.Tk) + " d " + std::to_string(c.d) +
         (c.causal ? " causal" : "") + (c.layout == AttentionLayout::BTHD ? " BTHD" : " BHTD") +
         (c.pattern.limited() ? " window " + std::to_string(c.pattern.window) + " dilation " +
                                    std::to_string(c.pattern.dilation) + " global " + std::to_string(c.pattern.global) +
                                    " random blocks " + std::to_string(c.pattern.random_blocks)
                              : "") +
         (c.alibi ? " alibi" : "");
}
AttentionSpec spec_of(const Case& c) {
  AttentionSpec spec{.causal = c.causal, .layout = c.layout};
  if (c.alibi) spec.position = PositionEncoding::Alibi;
  softmax_of(spec).pattern = c.pattern;
  softmax_of(spec).impl = AttentionImpl::Flash;
  return spec;
}
// The mask the op builds from that spec (core/ops/attention.cpp): which keys query i of head
// h sees, and ALiBi's bias on its scores, for the references below.
AttentionMask mask_of(const Case& c) {
  return {.causal = c.causal, .q_offset = c.Tk - c.Tq, .pattern = c.pattern, .alibi_heads = c.alibi ? c.Hq : 0};
}
// A case's inputs in its layout: Q, K, V (requiring grad) from seed, seed + 1, seed + 2 and
// the upstream gradient dZ from seed + 3.
struct CaseInputs {
  std::vector<Tensor> qkv;
  Tensor upstream;
};
CaseInputs inputs_of(const Case& c, uint64_t seed) {
  const auto shape = [&](int64_t H, int64_t T) {
    return c.layout == AttentionLayout::BTHD ? Shape{c.B, T, H, c.d} : Shape{c.B, H, T, c.d};
  };
  return {{random(shape(c.Hq, c.Tq), seed), random(shape(c.Hkv, c.Tk), seed + 1), random(shape(c.Hkv, c.Tk), seed + 2)},
          random(shape(c.Hq, c.Tq), seed + 3, DType::Float64, false)};
}
// Where row (b, h, t) of a [B, H, T, d] tensor in `layout` starts: the kernels' HeadStrides.
HeadStrides strides_of(AttentionLayout layout, int64_t H, int64_t T, int64_t d) {
  return layout == AttentionLayout::BTHD ? HeadStrides{T * H * d, d, H * d} : HeadStrides{H * T * d, T * d, d};
}
// The problem the op hands the flash kernels for a case (its scale, mask and strides).
inline AttentionShape shape_of(const Case& c) {  // inline: not every includer calls it
  return {c.B, c.Hq, c.Hkv, c.Tq, c.Tk, c.d, 1.0 / std::sqrt(static_cast<double>(c.d)), mask_of(c),
          strides_of(c.layout, c.Hq, c.Tq, c.d), strides_of(c.layout, c.Hkv, c.Tk, c.d)};
}

// keys = the keys of [0, Tk) that query i of head h sees, in order.
void visible_keys(const AttentionMask& mask, int64_t h, int64_t i, int64_t Tk, std::vector<int64_t>& keys) {
  keys.clear();
  for (int64_t j = 0; j < Tk; ++j)
    if (mask.visible(h, i, j)) keys.push_back(j);
}

// Element (b, h, t, e) of a [B, H, T, d] tensor in either layout.
size_t offset_of(AttentionLayout layout, int64_t H, int64_t T, int64_t d, int64_t b, int64_t h, int64_t t, int64_t e) {
  return static_cast<size_t>(layout == AttentionLayout::BTHD ? ((b * T + t) * H + h) * d + e : ((b * H + h) * T + t) * d + e);
}

// A [B, H, T, d] tensor (either layout) read as x(b, h, t, e), in float64.
struct Rows {
  std::vector<double> v;
  int64_t H, T, d;
  AttentionLayout layout;
  double operator()(int64_t b, int64_t h, int64_t t, int64_t e) const { return v[offset_of(layout, H, T, d, b, h, t, e)]; }
};

// A case's Q, K, V and dZ read as Rows.
struct CaseRows {
  Rows q, k, v, dz;
};
CaseRows rows_of(const Case& c, const CaseInputs& in) {
  const auto rows = [&](const Tensor& t, int64_t H, int64_t T) { return Rows{t.to_vector(), H, T, c.d, c.layout}; };
  return {rows(in.qkv[0], c.Hq, c.Tq), rows(in.qkv[1], c.Hkv, c.Tk), rows(in.qkv[2], c.Hkv, c.Tk),
          rows(in.upstream, c.Hq, c.Tq)};
}

// The bounds of Z, lse, dQ, dK, dV (laid out as the results), from the float64 inputs.
// body(b, h, kvh, i, keys) for every query row (b, h, i) that sees a key, keys = the keys it
// sees in order (mask_of(c)'s), kvh the kv head that query head h reads.
template <class Body> void for_each_seeing_row(const Case& c, const AttentionMask& mask, Body&& body) {
  std::vector<int64_t> keys;
  for (int64_t b = 0; b < c.B; ++b)
    for (int64_t h = 0; h < c.Hq; ++h)
      for (int64_t i = 0; i < c.Tq; ++i) {
        visible_keys(mask, h, i, c.Tk, keys);
        if (!keys.empty()) body(b, h, h / (c.Hq / c.Hkv), i, keys);
      }
}

struct Bounds {
  std::vector<double> Z, lse, dQ, dK, dV;
};
Bounds derive_bounds(double u, const Case& c, const Rows& q, const Rows& k, const Rows& v, const Rows& dz) {
  const int64_t g = c.Hq / c.Hkv;
  const double scale = 1.0 / std::sqrt(static_cast<double>(c.d));
  const auto at = [&](int64_t b, int64_t h, int64_t t, int64_t H, int64_t T, int64_t e) {
    return offset_of(c.layout, H, T, c.d, b, h, t, e);
  };
  const auto product = [u](double x, double xi, int64_t n) {  // product_bound's factor of |W_jc| for one term
    return (std::abs(x) + xi) * (1 + u) * (1 + u) * (1 + gamma_of(n)) - std::abs(x);
  };
  const double exact_operands = product(1, 0, c.d);  // ξ = 0 over d_h terms: (1 + u)²(1 + γ) − 1 per |x||w|
  Bounds out{std::vector<double>(q.v.size(), 0.0), std::vector<double>(static_cast<size_t>(c.B * c.Hq * c.Tq), 0.0),
             std::vector<double>(q.v.size(), 0.0), std::vector<double>(k.v.size(), 0.0),
             std::vector<double>(v.v.size(), 0.0)};
  const size_t Tk = static_cast<size_t>(c.Tk);
  std::vector<double> P(Tk), pi(Tk), dP(Tk), phi(Tk), dS(Tk), sigma(Tk);
  const AttentionMask mask = mask_of(c);
  for_each_seeing_row(c, mask, [&](int64_t b, int64_t h, int64_t kvh, int64_t i, const std::vector<int64_t>& keys) {
    const double slope = mask.alibi_slope(h);
    double E = 0, max_s = -INFINITY;
    for (const int64_t j : keys) {
      double s = 0, s_abs = 0, p = 0, p_abs = 0;
      for (int64_t e = 0; e < c.d; ++e) {
        s += q(b, h, i, e) * k(b, kvh, j, e);
        s_abs += std::abs(q(b, h, i, e) * k(b, kvh, j, e));
        p += dz(b, h, i, e) * v(b, kvh, j, e);
        p_abs += std::abs(dz(b, h, i, e) * v(b, kvh, j, e));
      }
      // ALiBi's bias, formed in fp32 and added in fp32: two roundings of 2^-24 of at most |bias| + |S|
      const double bias = mask.bias(slope, i, j);
      P[j] = scale * s + bias;
      max_s = std::max(max_s, P[j]);
      E = std::max(E, scale * exact_operands * s_abs + std::ldexp(std::abs(bias) + std::abs(P[j]), -23));
      dP[j] = p;
      phi[j] = exact_operands * p_abs;
    }
    double l = 0;
    for (const int64_t j : keys) l += std::exp(P[j] - max_s);
    out.lse[static_cast<size_t>((b * c.Hq + h) * c.Tq + i)] = E + gamma_of(c.Tk) * (1 + std::abs(max_s + std::log(l)));
    double D = 0, Delta = 0;
    for (const int64_t j : keys) {
      P[j] = std::exp(P[j] - max_s) / l;
      pi[j] = std::expm1(2 * E) * P[j];
      D += P[j] * dP[j];
      Delta += (P[j] + pi[j]) * (std::abs(dP[j]) + phi[j]) * (1 + gamma_of(c.Tk)) - P[j] * std::abs(dP[j]);
    }
    for (const int64_t j : keys) {
      dS[j] = P[j] * (dP[j] - D);
      sigma[j] = (P[j] + pi[j]) * (std::abs(dP[j] - D) + phi[j] + Delta) - P[j] * std::abs(dP[j] - D);
    }
    for (int64_t e = 0; e < c.d; ++e) {
      double z = 0, dq = 0;
      for (const int64_t j : keys) {
        z += product(P[j], pi[j], c.Tk + 2) * std::abs(v(b, kvh, j, e));
        dq += scale * product(dS[j], sigma[j], c.Tk) * std::abs(k(b, kvh, j, e));
        // dV_je += P_ij dZ_ie, dK_je += scale·dS_ij Q_ie: over Tq·g terms
        out.dV[at(b, kvh, j, c.Hkv, c.Tk, e)] += product(P[j], pi[j], c.Tq * g) * std::abs(dz(b, h, i, e));
        out.dK[at(b, kvh, j, c.Hkv, c.Tk, e)] += scale * product(dS[j], sigma[j], c.Tq * g) * std::abs(q(b, h, i, e));
      }
      out.Z[at(b, h, i, c.Hq, c.Tq, e)] = z;
      out.dQ[at(b, h, i, c.Hq, c.Tq, e)] = dq;
    }
  });
  return out;
}

// FlashAttention's test recipe beside the bound: the kernel's largest error against float64
// stays within twice that of the naive attention in its format. bf16: PyTorch's composed
// ops on bf16 tensors — Q, K, V, dZ rounded to bf16, each op's output rounded to bf16 (S,
// A, Z; dA, dS, dQ, dK, dV). tf32: the composed ops on float32 tensors with TF32 matmuls —
// each matmul's operands rounded to tf32 (Q, K for S; A, V for Z; dZ, V for dA; dS, K for
// dQ; dS, Q for dK; A, dZ for dV), each op's output rounded to float32. Softmax and its
// backward's row sums in float64 between the roundings.
double bf16(double x) {  // to float32, then to bfloat16, nearest even
  const float f = static_cast<float>(x);
  if (!std::isfinite(f)) return f;
  uint32_t u;
  std::memcpy(&u, &f, sizeof u);
  u = (u + 0x7FFFu + ((u >> 16) & 1u)) & 0xFFFF0000u;
  float r;
  std::memcpy(&r, &u, sizeof r);
  return r;
}
double tf32(double x) {  // to float32, then to tf32: nearest, ties away from zero (cvt.rna.tf32.f32)
  const float f = static_cast<float>(x);
  if (!std::isfinite(f)) return f;
  uint32_t u;
  std::memcpy(&u, &f, sizeof u);
  u = (u + 0x1000u) & 0xFFFFE000u;
  float r;
  std::memcpy(&r, &u, sizeof r);
  return r;
}
double float32(double x) { return static_cast<float>(x); }

// A tensor-core operand format, as the tests see it: its --precision, unit roundoff, the
// naive attention's roundings (of a matmul's operand, of an op's output), and the least
// normwise error of Z that shows the kernel rounded at all (float32 alone stays near
// 2^-24·√T; the format's rounding of the inputs gives about u per element).
struct Format {
  const char* name;
  Precision precision;
  double u;
  double (*operand)(double);
  double (*output)(double);
};
const Format kBf16{"bf16", Precision::BF16, std::ldexp(1.0, -8), bf16, bf16};
const Format kTf32{"tf32", Precision::TF32, std::ldexp(1.0, -11), tf32, float32};

struct Naive {
  std::vector<double> Z, dQ, dK, dV;
};
Naive naive(const Format& f, const Case& c, const Rows& q, const Rows& k, const Rows& v, const Rows& dz) {
  const auto in = f.operand;  // a matmul's operand
  const auto out = f.output;  // an op's result
  const double scale = 1.0 / std::sqrt(static_cast<double>(c.d));
  const auto at = [&](int64_t b, int64_t h, int64_t t, int64_t H, int64_t T, int64_t e) {
    return offset_of(c.layout, H, T, c.d, b, h, t, e);
  };
  Naive result{std::vector<double>(q.v.size(), 0.0), std::vector<double>(q.v.size(), 0.0),
               std::vector<double>(k.v.size(), 0.0), std::vector<double>(v.v.size(), 0.0)};
  std::vector<double> dK_sum(k.v.size(), 0.0), dV_sum(v.v.size(), 0.0);  // summed over the group's heads and queries
  const size_t Tk = static_cast<size_t>(c.Tk);
  std::vector<double> A(Tk), dS(Tk);
  const AttentionMask mask = mask_of(c);
  for_each_seeing_row(c, mask, [&](int64_t b, int64_t h, int64_t kvh, int64_t i, const std::vector<int64_t>& keys) {
    double max_s = -INFINITY, l = 0, D = 0;
    for (const int64_t j : keys) {  // S = out(out(scale·Q̂ K̂ᵀ) + ALiBi's bias)
      double s = 0;
      for (int64_t e = 0; e < c.d; ++e) s += in(q(b, h, i, e)) * in(k(b, kvh, j, e));
      A[j] = c.alibi ? out(out(scale * s) + mask.bias(mask.alibi_slope(h), i, j)) : out(scale * s);
      max_s = std::max(max_s, A[j]);
    }
    for (const int64_t j : keys) l += std::exp(A[j] - max_s);
    for (const int64_t j : keys) {  // A = out(softmax(S)), dA = out(dẐ V̂ᵀ), D = rowsum(dA ∘ A)
      A[j] = out(std::exp(A[j] - max_s) / l);
      double da = 0;
      for (int64_t e = 0; e < c.d; ++e) da += in(dz(b, h, i, e)) * in(v(b, kvh, j, e));
      dS[j] = out(da);
      D += dS[j] * A[j];
    }
    for (const int64_t j : keys) dS[j] = out(A[j] * (dS[j] - D));  // dS = out(A ∘ (dA − D))
    for (int64_t e = 0; e < c.d; ++e) {
      double z = 0, dq = 0;
      for (const int64_t j : keys) {
        z += in(A[j]) * in(v(b, kvh, j, e));
        dq += in(dS[j]) * in(k(b, kvh, j, e));
        dV_sum[at(b, kvh, j, c.Hkv, c.Tk, e)] += in(A[j]) * in(dz(b, h, i, e));
        dK_sum[at(b, kvh, j, c.Hkv, c.Tk, e)] += in(dS[j]) * in(q(b, h, i, e));
      }
      result.Z[at(b, h, i, c.Hq, c.Tq, e)] = out(z);
      result.dQ[at(b, h, i, c.Hq, c.Tq, e)] = out(scale * dq);
    }
  });
  for (size_t n = 0; n < dK_sum.size(); ++n) {
    result.dK[n] = out(scale * dK_sum[n]);
    result.dV[n] = out(dV_sum[n]);
  }
  return result;
}

// The worst |fast − exact| / bound over the elements (≤ 1 passes), and the largest
// |fast − exact| relative to the largest |exact| (to see bf16's rounding at all).
struct Worst {
  double of_bound = 0, relative = 0;
};
Worst worst_of(const Tensor& fast, const Tensor& exact, const std::vector<double>& bound) {
  const std::vector<double> f = fast.to_vector(), x = exact.to_vector();
  REQUIRE(f.size() == x.size());
  REQUIRE(f.size() == bound.size());
  Worst w;
  double largest = 0;
  for (size_t n = 0; n < f.size(); ++n) {
    if (std::isinf(x[n]) && f[n] == x[n]) continue;  // lse = +inf of a row that sees nothing
    const double err = std::abs(f[n] - x[n]);
    if (std::isnan(err)) w.of_bound = INFINITY;
    else w.of_bound = std::max(w.of_bound, bound[n] > 0 ? err / bound[n] : (err > 0 ? INFINITY : 0.0));
    w.relative = std::max(w.relative, err);
    largest = std::max(largest, std::abs(x[n]));
  }
  if (largest > 0) w.relative /= largest;
  return w;
}

}  // namespace
}  // namespace ag::test::flash_mma_reference
