// Positions inside attention (issue 24; docs/backprop.md, "RoPE" and "ALiBi"):
// ag::rope against the rotate_half definition written out again here, its
// relative property, norms and gradcheck; every implementation with rope and
// with alibi, every sparse pattern and grouped kv heads, both layouts, against
// a reference made of plain ops (the rotation by cos/sin tables, the bias
// matrix −m_h·(p − j) with get_slopes' m_h, and the visibility mask built here);
// ALiBi's slopes for H = 6 and 12 against the values written out; linear attention on
// rotated q, k; decoding through a LayerKVCache against the full causal
// computation; a window cache that rolls far past its capacity; and the
// errors. Every implementation (EnumNames<AttentionImpl>) on every device
// (TEST_CASE_EVERY_DEVICE): a device's results are compared with the CPU's.
#include <algorithm>
#include <cmath>
#include <limits>

#include "tests/helpers.h"

// The file's names and using-directives stay its own in a unity build, where the test
// files compile as one translation unit (CMakeLists.txt).
namespace positions_test {

using namespace ag;
using ag::test::random;

namespace {
using Inputs = std::vector<Tensor>;
constexpr double kInfinity = std::numeric_limits<double>::infinity();
constexpr AttentionLayout kLayouts[] = {AttentionLayout::BHTD, AttentionLayout::BTHD};

const char* layout_name(AttentionLayout layout) { return layout == AttentionLayout::BHTD ? "BHTD" : "BTHD"; }

// [B, T, H, d] <-> [B, H, T, d]; BHTD stays as it is.
Tensor heads_first(const Tensor& t, AttentionLayout layout) {
  return layout == AttentionLayout::BTHD ? permute(t, {0, 2, 1, 3}) : t;
}
Shape shape_of(AttentionLayout layout, int64_t B, int64_t H, int64_t T, int64_t d) {
  return layout == AttentionLayout::BTHD ? Shape{B, T, H, d} : Shape{B, H, T, d};
}

// --- RoPE written out: θ = p·base^(−2i/d), x' = [x₁c − x₂s, x₂c + x₁s] ---------------------------

double rotation_angle(int64_t position, int64_t i, int64_t d, double base) {
  return static_cast<double>(position) * std::pow(base, -2.0 * static_cast<double>(i) / static_cast<double>(d));
}

// Element by element, from the definition, in float64 (no autograd).
Tensor rope_definition(const Tensor& x, AttentionLayout layout, int64_t first, double base) {
  const bool bthd = layout == AttentionLayout::BTHD;
  const int64_t B = x.size(0), H = bthd ? x.size(2) : x.size(1), T = bthd ? x.size(1) : x.size(2), d = x.size(3);
  const int64_t half = d / 2;
  const std::vector<double> in = x.to_vector();
  std::vector<double> out(in.size());
  for (int64_t b = 0; b < B; ++b)
    for (int64_t h = 0; h < H; ++h)
      for (int64_t t = 0; t < T; ++t) {
        const int64_t row = bthd ? ((b * T + t) * H + h) * d : ((b * H + h) * T + t) * d;
        for (int64_t i = 0; i < half; ++i) {
          const double theta = rotation_angle(first + t, i, d, base), c = std::cos(theta), s = std::sin(theta);
          const double x1 = in[row + i], x2 = in[row + i + half];
          out[row + i] = x1 * c - x2 * s;
          out[row + i + half] = x2 * c + x1 * s;
        }
      }
  return Tensor::from_vector(out, x.shape(), DType::Float64);
}

// The same by plain ops on x [B, H, T, d] (differentiable): x ∘ C + rotate_half(x) ∘ S with
// rotate_half([x₁, x₂]) = [−x₂, x₁] and C, S [T, d] the cosines and sines, each twice per row.
Tensor rope_by_ops(const Tensor& x, int64_t first, double base = kDefaultRopeBase) {
  const int64_t T = x.size(2), d = x.size(3), half = d / 2;
  std::vector<double> c(T * d), s(T * d);
  for (int64_t t = 0; t < T; ++t)
    for (int64_t i = 0; i < half; ++i) {
      const double theta = rotation_angle(first + t, i, d, base);
      c[t * d + i] = c[t * d + i + half] = std::cos(theta);
      s[t * d + i] = s[t * d + i + half] = std::sin(theta);
    }
  const Tensor C = Tensor::from_vector(c, {T, d}, x.dtype()).to(x.device()),
               S = Tensor::from_vector(s, {T, d}, x.dtype()).to(x.device());
  const Tensor rotated = concat({-slice(x, 3, half, d), slice(x, 3, 0, half)}, 3);
  return x * C + rotated * S;
}

// --- softmax attention written out --------------------------------------------------------------

using ag::test::defined_visible;

// ALiBi's slopes for n heads as Press et al.'s get_slopes computes them
// (ofirpress/attention_with_linear_biases; BLOOM's too): for n a power of two
// start·start^i with start = 2^(−8/n); otherwise, with c = 2^⌊log2 n⌋,
// get_slopes(c) + get_slopes(2c)[0::2][:n − c].
std::vector<double> get_slopes(int64_t n) {
  const auto power_of_2 = [](int64_t heads) {
    const double start = std::pow(2.0, -8.0 / static_cast<double>(heads));
    std::vector<double> slopes;
    for (int64_t i = 0; i < heads; ++i) slopes.push_back(start * std::pow(start, static_cast<double>(i)));
    return slopes;
  };
  int64_t c = 1;
  while (2 * c <= n) c *= 2;
  if (c == n) return power_of_2(n);
  std::vector<double> slopes = power_of_2(c);
  const std::vector<double> next = get_slopes(2 * c);
  for (int64_t i = 0; static_cast<int64_t>(slopes.size()) < n; i += 2) slopes.push_back(next[i]);
  return slopes;
}

struct PositionsProblem {
  int64_t B, Hq, Hkv, Tq, Tk, d;
  SparsePattern pattern;
  bool causal = true;
  AlibiSlopes slopes = AlibiSlopes::Reference;
  int64_t q_offset() const { return Tk - Tq; }
  AttentionSpec spec(AttentionImpl impl, PositionEncoding position, AttentionLayout layout) const {
    return {.function = SoftmaxAttention{.impl = impl, .pattern = pattern}, .causal = causal, .layout = layout, .position = position, .alibi_slopes = slopes};
  }
  Inputs inputs(uint64_t seed, AttentionLayout layout) const {
    return {random(shape_of(layout, B, Hq, Tq, d), seed), random(shape_of(layout, B, Hkv, Tk, d), seed + 1),
            random(shape_of(layout, B, Hkv, Tk, d), seed + 2)};
  }
  // M [Hq, Tq, Tk]: 0 where query i (at p = i + q_offset) sees key j, −∞ elsewhere.
  Tensor mask() const {
    std::vector<double> m(Hq * Tq * Tk);
    for (int64_t h = 0; h < Hq; ++h)
      for (int64_t i = 0; i < Tq; ++i)
        for (int64_t j = 0; j < Tk; ++j)
          m[(h * Tq + i) * Tk + j] = !causal || defined_visible(pattern, h, i + q_offset(), j) ? 0.0 : -kInfinity;
    return Tensor::from_vector(m, {Hq, Tq, Tk}, DType::Float64);
  }
  // ALiBi's bias [Hq, Tq, Tk]: −m_h·(p − j), for every (i, j), visible or not; m_h = get_slopes(Hq)[h],
  // or 2^(−8(h+1)/Hq) under the geometric rule.
  Tensor alibi_bias() const {
    const std::vector<double> reference = get_slopes(Hq);
    std::vector<double> m(Hq * Tq * Tk);
    for (int64_t h = 0; h < Hq; ++h) {
      const double slope = slopes == AlibiSlopes::Reference
                               ? reference[h]
                               : std::pow(2.0, -8.0 * static_cast<double>(h + 1) / static_cast<double>(Hq));
      for (int64_t i = 0; i < Tq; ++i)
        for (int64_t j = 0; j < Tk; ++j) m[(h * Tq + i) * Tk + j] = -slope * static_cast<double>(i + q_offset() - j);
    }
    return Tensor::from_vector(m, {Hq, Tq, Tk}, DType::Float64);
  }
};

std::string describe(const PositionsProblem& p) {
  const SparsePattern& s = p.pattern;
  return "Hq " + std::to_string(p.Hq) + " Hkv " + std::to_string(p.Hkv) + " Tq " + std::to_string(p.Tq) + " Tk " +
         std::to_string(p.Tk) + " d " + std::to_string(p.d) + (p.causal ? " causal" : " not causal") + " window " +
         std::to_string(s.window) + " dilation " + std::to_string(s.dilation) + " global " + std::to_string(s.global) +
         " random " + std::to_string(s.random_blocks);
}

using Result = ag::test::AttentionRun;
using ag::test::max_abs_error;
using ag::test::run_attention;

// softmax(scale·Q'K'ᵀ + B + M) V by plain ops on the CPU: Q', K' rotated by rope_by_ops (q at
// q_offset + i, k at j), B the bias matrix (alibi), M the visibility mask, kv heads repeated.
Result reference(const PositionsProblem& p, PositionEncoding position, AttentionLayout layout, const Inputs& in,
                 const Tensor& upstream) {
  Inputs x;
  for (const Tensor& t : in) x.push_back(t.detach().clone().requires_grad_());
  const int64_t group = p.Hq / p.Hkv;
  const auto repeat = [&](const Tensor& t) {
    return expand(t.reshape({p.B, p.Hkv, 1, p.Tk, p.d}), {p.B, p.Hkv, group, p.Tk, p.d}).reshape({p.B, p.Hq, p.Tk, p.d});
  };
  Tensor Q = heads_first(x[0], layout), K = heads_first(x[1], layout);
  if (position == PositionEncoding::Rope) Q = rope_by_ops(Q, p.q_offset()), K = rope_by_ops(K, 0);
  Tensor S = matmul(Q, transpose(repeat(K), 2, 3)) * (1.0 / std::sqrt(static_cast<double>(p.d)));
  if (position == PositionEncoding::Alibi) S = S + p.alibi_bias();
  const Tensor Z = heads_first(matmul(softmax(S + p.mask()), repeat(heads_first(x[2], layout))), layout);
  Z.backward(upstream);
  return {.Z = Z.detach(), .dQ = x[0].grad(), .dK = x[1].grad(), .dV = x[2].grad()};
}

std::vector<SparsePattern> patterns() {  // none, and every pattern the sparse tests try
  std::vector<SparsePattern> all = ag::test::sparse_patterns();
  all.insert(all.begin(), SparsePattern{});
  return all;
}

std::vector<PositionsProblem> positions_problems() {
  std::vector<PositionsProblem> all = {{1, 4, 2, 30, 30, 8, {}, false}, {1, 4, 1, 9, 33, 4, {}, false}};  // not causal
  for (const SparsePattern& pattern : patterns()) {
    all.push_back({1, 4, 2, 50, 50, 8, pattern});
    all.push_back({2, 4, 1, 19, 45, 4, pattern});  // fewer queries than keys: q_offset = Tk − Tq
  }
  // Several of flash's 64 × 128 tiles (the bias at tile offsets i0, j0 ≠ 0), dense's wide blocks (Tq > 256)
  all.push_back({1, 2, 1, 270, 270, 8, {}});
  all.push_back({1, 4, 2, 270, 270, 4, {.window = 5, .dilation = 3, .global = 3}});
  all.push_back({1, 2, 1, 130, 300, 4, {.window = 7, .global = 2, .random_blocks = 3, .seed = 11, .layer = 2}});
  // Head counts that are not powers of two, where ALiBi's reference slopes are not 2^(−8(h+1)/Hq)
  all.push_back({1, 6, 3, 40, 40, 4, {}});
  all.push_back({1, 12, 4, 17, 29, 4, {.window = 5, .global = 2}});
  all.push_back({1, 6, 2, 40, 40, 4, {}, true, AlibiSlopes::Geometric});  // the slopes of models saved before the rule
  return all;
}

void check_every_impl_equals_reference(Device device) {
  for (const PositionsProblem& p : positions_problems())
    for (PositionEncoding position : {PositionEncoding::Rope, PositionEncoding::Alibi})
      for (AttentionLayout layout : kLayouts) {
        if (position == PositionEncoding::Alibi && !p.causal) continue;  // ALiBi needs causal attention
        CAPTURE(describe(p));
        CAPTURE(name_of(position));
        CAPTURE(layout_name(layout));
        const Inputs in = p.inputs(100, layout);
        const Tensor upstream = random(shape_of(layout, p.B, p.Hq, p.Tq, p.d), 103, DType::Float64, false);
        const Result expected = reference(p, position, layout, in, upstream);
        for (AttentionImpl impl : ag::test::attention_impls()) {
          CAPTURE(name_of(impl));
          const Result r = run_attention(in, p.spec(impl, position, layout), device, DType::Float64, upstream);
          CHECK_CLOSE(r.Z, expected.Z, 1e-12);
          CHECK_CLOSE(r.dQ, expected.dQ, 1e-12);
          CHECK_CLOSE(r.dK, expected.dK, 1e-12);
          CHECK_CLOSE(r.dV, expected.dV, 1e-12);
        }
      }
}


// --- decoding -----------------------------------------------------------------------------------

// The rows Z of `spec` over q, k, v [B, T, H, d] fed `chunk` positions at a time (the first call
// `prefill` of them) through a fresh LayerKVCache of `capacity`, on `device`, back on the CPU.
// `bytes` receives the cache's bytes() after every call.
Tensor decode(const Inputs& qkv, AttentionSpec spec, Device device, int64_t capacity, int64_t prefill, int64_t chunk,
              std::vector<int64_t>* bytes = nullptr) {
  NoGradGuard no_grad;
  LayerKVCache cache{.capacity = capacity};
  spec.cache = &cache;
  if (auto* linear = std::get_if<LinearAttention>(&spec.function); linear && linear->omega.defined())
    linear->omega = linear->omega.to(device);
  const Tensor q = qkv[0].detach().to(device), k = qkv[1].detach().to(device), v = qkv[2].detach().to(device);
  const int64_t T = q.size(1);
  std::vector<Tensor> rows;
  for (int64_t t = 0; t < T;) {
    const int64_t end = std::min(T, t + (t == 0 ? prefill : chunk));
    rows.push_back(attention(slice(q, 1, t, end), slice(k, 1, t, end), slice(v, 1, t, end), spec));
    CHECK(cache.length + cache.rolled == end);
    CHECK(cache.length <= capacity);
    if (bytes) bytes->push_back(cache.bytes());
    t = end;
  }
  return concat(rows, 1).to(Device::CPU);
}

Inputs decode_inputs(int64_t B, int64_t Hq, int64_t Hkv, int64_t T, int64_t d, uint64_t seed) {
  return {random({B, T, Hq, d}, seed, DType::Float64, false), random({B, T, Hkv, d}, seed + 1, DType::Float64, false),
          random({B, T, Hkv, d}, seed + 2, DType::Float64, false)};
}

// The full causal computation on the CPU.
Tensor full(const Inputs& qkv, AttentionSpec spec) {
  NoGradGuard no_grad;
  spec.cache = nullptr;
  return attention(qkv[0], qkv[1], qkv[2], spec);
}

}  // namespace

// --- the rope op --------------------------------------------------------------------------------

TEST_CASE("positions: rope equals the rotate_half definition (both layouts, first_position, base — float64)") {
  for (AttentionLayout layout : kLayouts)
    for (int64_t first : {0, 5, 1000})
      for (double base : {kDefaultRopeBase, 100.0}) {
        CAPTURE(layout_name(layout));
        CAPTURE(first);
        CAPTURE(base);
        const Tensor x = random(shape_of(layout, 2, 3, 7, 8), 1, DType::Float64, false);
        const Tensor y = rope(x, layout, first, base);
        CHECK(y.shape() == x.shape());
        CHECK_CLOSE(y, rope_definition(x, layout, first, base), 1e-15);
        // and the plain-ops rotation the references below use is the same rotation
        CHECK_CLOSE(heads_first(rope_by_ops(heads_first(x, layout), first, base), layout),
                    rope_definition(x, layout, first, base), 1e-15);
      }
  // Position 0 is the identity; the default base is 10000.
  const Tensor x = random({1, 2, 1, 6}, 2, DType::Float64, false);
  CHECK(rope(x, AttentionLayout::BHTD).to_vector() == x.to_vector());
  CHECK_CLOSE(rope(x, AttentionLayout::BHTD, 3), rope_definition(x, AttentionLayout::BHTD, 3, 10000.0), 1e-15);
}

// The angles p·f_i are rounded to float64 before cos and sin, an absolute error of ~p·1e-16 in each:
// at positions up to ~1000 that stays below 1e-12 of |q|·|k|.
TEST_CASE("positions: rope's q'(p)·k'(p') depends only on p − p', and rope keeps every row's norm") {
  const int64_t d = 16;
  const Tensor q = random({1, 1, 1, d}, 3, DType::Float64, false), k = random({1, 1, 1, d}, 4, DType::Float64, false);
  const auto dot_at = [&](int64_t p, int64_t p_prime) {
    return sum(rope(q, AttentionLayout::BHTD, p) * rope(k, AttentionLayout::BHTD, p_prime)).item();
  };
  const double scale = std::sqrt(sum(q * q).item() * sum(k * k).item());
  for (int64_t delta : {0, 1, 7, -3, 100}) {
    CAPTURE(delta);
    const double at_zero = dot_at(std::max<int64_t>(delta, 0), std::max<int64_t>(-delta, 0));
    for (int64_t p_prime : {3, 10, 257, 1000}) {
      CAPTURE(p_prime);
      CHECK(std::abs(dot_at(p_prime + delta, p_prime) - at_zero) <= 1e-12 * scale);
    }
  }
  // not trivially: a different distance gives a different product
  CHECK(std::abs(dot_at(5, 0) - dot_at(6, 0)) > 1e-3 * scale);

  const Tensor x = random({2, 3, 50, 8}, 5, DType::Float64, false);
  const Tensor norms = sum(x * x, 3), rotated = rope(x, AttentionLayout::BHTD, 17);
  CHECK_CLOSE(sum(rotated * rotated, 3), norms, 1e-14);
}

TEST_CASE_EVERY_DEVICE("positions: gradcheck of the rope op — on a device forward and backward as on the CPU") {
  for (AttentionLayout layout : kLayouts) {
    CAPTURE(layout_name(layout));
    const GradcheckFn f = [layout](const Inputs& x) { return rope(x[0], layout, 3, 50.0); };
    const Inputs x = {random(shape_of(layout, 2, 3, 5, 6), 6)};
    if (device == Device::CPU) {
      CHECK_GRADCHECK(f, x);
    } else {
      ag::test::check_device_matches_cpu(device, f, x, 1e-14, DType::Float64);
      // many rows, far positions, float32 (the angle is formed in float64 on both devices)
      const GradcheckFn far = [layout](const Inputs& y) { return rope(y[0], layout, 4000); };
      ag::test::check_device_matches_cpu(device, far, {random(shape_of(layout, 2, 8, 300, 64), 7)}, 1e-6);
    }
  }
}

// --- every implementation, every pattern, GQA, both layouts -------------------------------------

TEST_CASE("positions: alibi slopes for H = 6 and 12 are get_slopes' (Press et al., BLOOM), geometric keeps 2^(-8(h+1)/H)") {
  // The reference rule by hand: H = 6 takes the 4 slopes of 4 heads, 2^-2, 2^-4, 2^-6, 2^-8, then every
  // other slope of 8 heads (2^-1, 2^-2, ...): 2^-1, 2^-3. H = 12: the 8 slopes of 8 heads, 2^-1 ... 2^-8,
  // then 2^-0.5, 2^-1.5, 2^-2.5, 2^-3.5 from the 16 of 16 heads.
  const std::vector<std::pair<int64_t, std::vector<double>>> reference = {
      {6, {0.25, 0.0625, 0.015625, 0.00390625, 0.5, 0.125}},
      {12, {0.5, 0.25, 0.125, 0.0625, 0.03125, 0.015625, 0.0078125, 0.00390625, 0.70710678118654752,
            0.35355339059327376, 0.17677669529663688, 0.088388347648318440}}};
  for (const auto& entry : reference) {
    CAPTURE(entry.first);
    const AttentionMask mask{.causal = true, .pattern = {}, .alibi_heads = entry.first};
    const std::vector<double> python = get_slopes(entry.first);  // the test's port of get_slopes, as the reference tests use
    for (int64_t h = 0; h < entry.first; ++h) {
      CAPTURE(h);
      CHECK(mask.alibi_slope(h) == doctest::Approx(entry.second[h]).epsilon(1e-15));
      CHECK(python[h] == doctest::Approx(entry.second[h]).epsilon(1e-15));
    }
  }
  // H = 6 under the geometric rule: 2^(-4/3), 2^(-8/3), 2^-4, 2^(-16/3), 2^(-20/3), 2^-8.
  const std::vector<double> geometric = {0.39685026299204987, 0.15749013123685915, 0.0625,
                                         0.024803141437003117, 0.0098431332023036966, 0.00390625};
  const AttentionMask old{.causal = true, .pattern = {}, .alibi_heads = 6, .alibi_slopes = AlibiSlopes::Geometric};
  for (int64_t h = 0; h < 6; ++h) CHECK(old.alibi_slope(h) == doctest::Approx(geometric[h]).epsilon(1e-15));
  // A power of two: both rules give 2^(-8(h+1)/H), so no model with such H changes.
  for (const int64_t H : {1, 2, 4, 8, 16, 32})
    for (int64_t h = 0; h < H; ++h) {
      const AttentionMask ref{.causal = true, .pattern = {}, .alibi_heads = H};
      const AttentionMask geo{.causal = true, .pattern = {}, .alibi_heads = H, .alibi_slopes = AlibiSlopes::Geometric};
      CHECK(ref.alibi_slope(h) == geo.alibi_slope(h));
      CHECK(ref.alibi_slope(h) == std::exp2(-8.0 * static_cast<double>(h + 1) / static_cast<double>(H)));
    }
}

TEST_CASE_EVERY_DEVICE("positions: every implementation with rope and with alibi equals the plain-ops reference (patterns, GQA)") {
  check_every_impl_equals_reference(device);
}

// On a device: Z and the gradients in float64 within 1e-12 of the CPU's.
TEST_CASE_EVERY_DEVICE("positions: gradcheck of every implementation with rope and with alibi (GQA, every pattern)") {
  const std::vector<PositionsProblem> small = {
      {1, 4, 2, 6, 9, 4, {}},                                                 // GQA, q_offset 3
      {1, 4, 1, 5, 5, 2, {}, false},                                          // not causal
      {1, 2, 1, 34, 34, 2, {.window = 3, .dilation = 2, .global = 2, .random_blocks = 1, .seed = 3}},
  };
  const auto check = [device](const PositionsProblem& p, AttentionImpl impl, PositionEncoding position) {
    if (position == PositionEncoding::Alibi && !p.causal) return;  // ALiBi needs causal attention
    CAPTURE(describe(p));
    CAPTURE(name_of(position));
    CAPTURE(name_of(impl));
    const AttentionLayout layout = p.Hkv == 2 ? AttentionLayout::BTHD : AttentionLayout::BHTD;
    const AttentionSpec spec = p.spec(impl, position, layout);
    const GradcheckFn f = [spec](const Inputs& x) { return attention(x[0], x[1], x[2], spec); };
    if (device == Device::CPU) CHECK_GRADCHECK(f, p.inputs(200, layout));
    else ag::test::check_device_matches_cpu(device, f, p.inputs(200, layout), 1e-12, DType::Float64);
  };
  for (PositionEncoding position : {PositionEncoding::Rope, PositionEncoding::Alibi}) {
    for (const PositionsProblem& p : small)
      for (AttentionImpl impl : ag::test::attention_impls()) check(p, impl, position);
    // every pattern, at a size where a random block can be drawn (query block 1 draws block 0)
    for (const SparsePattern& pattern : patterns())
      for (AttentionImpl impl : {AttentionImpl::Dense, AttentionImpl::Flash}) check({1, 2, 1, 20, 20, 2, pattern}, impl, position);
  }
}

// On the CPU: flash in float32 within twice dense float32's error against float64 (FlashAttention's
// recipe). On a device: dense and flash in float32, forward and backward, as on the CPU.
TEST_CASE_EVERY_DEVICE("positions: rope and alibi in float32 - flash's error budget — dense and flash on a device as on the CPU") {
  for (const SparsePattern& pattern : {SparsePattern{}, SparsePattern{.window = 20, .global = 3}})
    for (PositionEncoding position : {PositionEncoding::Rope, PositionEncoding::Alibi}) {
      CAPTURE(name_of(position));
      CAPTURE(pattern.window);
      const PositionsProblem p{2, 8, 4, 200, 200, 32, pattern};
      const Inputs in = p.inputs(300, AttentionLayout::BHTD);
      if (device == Device::CPU) {
        const Tensor upstream = random({p.B, p.Hq, p.Tq, p.d}, 303, DType::Float64, false);
        const auto run32 = [&](AttentionImpl impl) {
          Inputs x;
          for (const Tensor& t : in) x.push_back(t.detach().to(DType::Float32).clone().requires_grad_());
          const Tensor Z = attention(x[0], x[1], x[2], p.spec(impl, position, AttentionLayout::BHTD));
          Z.backward(upstream.to(DType::Float32));
          const auto f64 = [](const Tensor& t) { return t.to(DType::Float64); };
          return Result{.Z = f64(Z), .dQ = f64(x[0].grad()), .dK = f64(x[1].grad()), .dV = f64(x[2].grad())};
        };
        const Result exact = run_attention(in, p.spec(AttentionImpl::Dense, position, AttentionLayout::BHTD), Device::CPU, DType::Float64, upstream);
        const Result dense = run32(AttentionImpl::Dense), flash = run32(AttentionImpl::Flash);
        CHECK(max_abs_error(flash.Z, exact.Z) <= 2 * max_abs_error(dense.Z, exact.Z));
        CHECK(max_abs_error(flash.dQ, exact.dQ) <= 2 * max_abs_error(dense.dQ, exact.dQ));
        CHECK(max_abs_error(flash.dK, exact.dK) <= 2 * max_abs_error(dense.dK, exact.dK));
        CHECK(max_abs_error(flash.dV, exact.dV) <= 2 * max_abs_error(dense.dV, exact.dV));
      } else {
        for (AttentionImpl impl : {AttentionImpl::Dense, AttentionImpl::Flash}) {
          CAPTURE(name_of(impl));
          const AttentionSpec spec = p.spec(impl, position, AttentionLayout::BHTD);
          const GradcheckFn f = [spec](const Inputs& x) { return attention(x[0], x[1], x[2], spec); };
          ag::test::check_device_matches_cpu(device, f, in, 1e-5);
        }
      }
    }
}

// A query that sees only itself gets P = 1 exactly when the backward forms S (bias included) as the
// forward did: Z = V to the bit and dQ = dK = 0 exactly, in float32 where an FMA would show.
TEST_CASE_EVERY_DEVICE("positions: under alibi a query that sees one key gets P = 1 exactly (Z = V and dQ = dK = 0)") {
  for (AttentionImpl impl : ag::test::attention_impls()) {
    CAPTURE(name_of(impl));
    const PositionsProblem p{2, 4, 2, 150, 150, 16, {.window = 1}};
    Inputs x;
    for (const Tensor& t : p.inputs(350, AttentionLayout::BHTD))
      x.push_back(t.detach().to(DType::Float32).to(device).clone().requires_grad_());
    const Tensor Z = attention(x[0], x[1], x[2], p.spec(impl, PositionEncoding::Alibi, AttentionLayout::BHTD));
    Z.backward(random(Z.shape(), 351, DType::Float32, false).to(device));
    const std::vector<double> z = Z.to(Device::CPU).to_vector(), v = x[2].to(Device::CPU).to_vector();
    const auto repeated_v = [&](size_t at) {  // Z's element at (b, h, t, e) is V's at (b, h / 2, t, e)
      const size_t e = at % 16, t = at / 16 % 150, h = at / (16 * 150) % 4, b = at / (16 * 150 * 4);
      return v[((b * 2 + h / 2) * 150 + t) * 16 + e];
    };
    bool equal = true;
    for (size_t i = 0; i < z.size(); ++i) equal = equal && z[i] == repeated_v(i);
    CHECK(equal);
    for (const Tensor& g : {x[0].grad(), x[1].grad()}) {
      const std::vector<double> values = g.to(Device::CPU).to_vector();
      CHECK(std::all_of(values.begin(), values.end(), [](double e) { return e == 0.0; }));
    }
  }
}

TEST_CASE("positions: linear attention with rope equals linear attention on q and k rotated by plain ops") {
  for (FeatureMap map : {FeatureMap::Elu1, FeatureMap::Favor})
    for (bool causal : {true, false})
      for (AttentionLayout layout : kLayouts) {
        CAPTURE(name_of(map));
        CAPTURE(causal);
        CAPTURE(layout_name(layout));
        AttentionSpec spec{.function = LinearAttention{.feature_map = map, .omega = map == FeatureMap::Favor ? favor_projection(8, 8, 7) : Tensor()}, .causal = causal, .layout = layout};
        const Inputs in = {random(shape_of(layout, 2, 4, 70, 8), 400), random(shape_of(layout, 2, 2, 70, 8), 401),
                           random(shape_of(layout, 2, 2, 70, 8), 402)};
        const Tensor upstream = random(shape_of(layout, 2, 4, 70, 8), 403, DType::Float64, false);
        AttentionSpec rotated = spec;
        spec.position = PositionEncoding::Rope;
        const Result with_rope = run_attention(in, spec, Device::CPU, DType::Float64, upstream);
        Inputs x;
        for (const Tensor& t : in) x.push_back(t.detach().clone().requires_grad_());
        const Tensor Z = attention(heads_first(rope_by_ops(heads_first(x[0], layout), 0), layout),
                                   heads_first(rope_by_ops(heads_first(x[1], layout), 0), layout), x[2], rotated);
        Z.backward(upstream);
        CHECK_CLOSE(with_rope.Z, Z, 1e-12);
        CHECK_CLOSE(with_rope.dQ, x[0].grad(), 1e-12);
        CHECK_CLOSE(with_rope.dK, x[1].grad(), 1e-12);
        CHECK_CLOSE(with_rope.dV, x[2].grad(), 1e-12);
      }
}

// --- decoding -----------------------------------------------------------------------------------

// Float64: the cached rows within 1e-12 of the full causal computation on the CPU, on every device.
TEST_CASE_EVERY_DEVICE("positions: decoding through a LayerKVCache equals the full causal computation (rope, alibi, none)") {
  const Inputs qkv = decode_inputs(2, 4, 2, 40, 8, 500);
  for (PositionEncoding position : {PositionEncoding::Rope, PositionEncoding::Alibi, PositionEncoding::None})
    for (AttentionImpl impl : ag::test::attention_impls()) {
      CAPTURE(name_of(position));
      CAPTURE(name_of(impl));
      const AttentionSpec spec{.function = SoftmaxAttention{.impl = impl}, .causal = true, .layout = AttentionLayout::BTHD, .position = position};
      const Tensor expected = full(qkv, spec);
      CHECK_CLOSE(decode(qkv, spec, device, 40, 1, 1), expected, 1e-12);  // one position at a time
      CHECK_CLOSE(decode(qkv, spec, device, 45, 7, 1), expected, 1e-12);  // a prefill, then singles
      CHECK_CLOSE(decode(qkv, spec, device, 40, 4, 3), expected, 1e-12);  // chunks
    }
  const Inputs linear_qkv = decode_inputs(2, 4, 2, 70, 8, 510);  // past a chunk of 64
  for (FeatureMap map : {FeatureMap::Elu1, FeatureMap::Favor})
    for (PositionEncoding position : {PositionEncoding::Rope, PositionEncoding::None}) {
      CAPTURE(name_of(map));
      CAPTURE(name_of(position));
      const AttentionSpec spec{.function = LinearAttention{.feature_map = map, .omega = map == FeatureMap::Favor ? favor_projection(8, 8, 7) : Tensor()}, .causal = true, .layout = AttentionLayout::BTHD, .position = position};
      const Tensor expected = full(linear_qkv, spec);
      CHECK_CLOSE(decode(linear_qkv, spec, device, 70, 1, 1), expected, 1e-12);
      CHECK_CLOSE(decode(linear_qkv, spec, device, 70, 5, 1), expected, 1e-12);
    }
}

// A cache of rolling_cache_capacity(pattern, T_new) positions, fed T_new at a time over 60
// positions (6× its capacity and more): the rows of full recomputation with the pattern, and
// the same bytes after every call.
TEST_CASE_EVERY_DEVICE("positions: a window cache rolls far past its capacity - the full computation's rows in constant memory") {
  struct Rolling {
    SparsePattern pattern;
    PositionEncoding position;
  };
  const Rolling cases[] = {
      {{.window = 4, .dilation = 2, .global = 2}, PositionEncoding::Rope},
      {{.window = 4, .dilation = 2, .global = 2}, PositionEncoding::None},
      {{.window = 4}, PositionEncoding::Alibi},
      {{.window = 3, .dilation = 3}, PositionEncoding::Alibi},
  };
  const Inputs qkv = decode_inputs(2, 4, 2, 60, 8, 600);
  for (const Rolling& c : cases)
    for (AttentionImpl impl : ag::test::attention_impls())
      for (int64_t T_new : {1, 3}) {
        CAPTURE(c.pattern.window);
        CAPTURE(c.pattern.dilation);
        CAPTURE(c.pattern.global);
        CAPTURE(name_of(c.position));
        CAPTURE(name_of(impl));
        CAPTURE(T_new);
        const AttentionSpec spec{.function = SoftmaxAttention{.impl = impl, .pattern = c.pattern}, .causal = true, .layout = AttentionLayout::BTHD, .position = c.position};
        CHECK(attention_cache_rolls(spec));
        const int64_t capacity = rolling_cache_capacity(c.pattern, T_new);
        CHECK(capacity == c.pattern.global + c.pattern.window * c.pattern.dilation - 1 + T_new);
        std::vector<int64_t> bytes;
        CHECK_CLOSE(decode(qkv, spec, device, capacity, T_new, T_new, &bytes), full(qkv, spec), 1e-12);
        CHECK(bytes.front() == 2 * 2 * capacity * 2 * 8 * 8);  // K and V [B, capacity, Hkv, d] in float64
        CHECK(std::all_of(bytes.begin(), bytes.end(), [&](int64_t b) { return b == bytes.front(); }));
      }
}

TEST_CASE("positions: a full cache that cannot roll is an error that says why") {
  const Inputs qkv = decode_inputs(1, 4, 2, 12, 8, 700);
  struct Full {
    SparsePattern pattern;
    PositionEncoding position;
    int64_t capacity;
    const char* says;
  };
  const Full cases[] = {
      {{}, PositionEncoding::Rope, 10, "it rolls only for a window without random blocks"},
      {{.window = 4, .random_blocks = 1, .seed = 3}, PositionEncoding::Rope, 10, "without random blocks"},
      {{.window = 4, .global = 2}, PositionEncoding::Alibi, 10, "without global keys under ALiBi"},
      // it would roll, but 6 positions cannot hold 2 global keys, the 7 positions the window spans and the new one
      {{.window = 4, .dilation = 2, .global = 2}, PositionEncoding::None, 6, "cannot hold 2 global keys"},
  };
  for (const Full& c : cases) {
    CAPTURE(c.says);
    const AttentionSpec spec{.function = SoftmaxAttention{.impl = AttentionImpl::Flash, .pattern = c.pattern}, .causal = true, .layout = AttentionLayout::BTHD, .position = c.position};
    CHECK(attention_cache_rolls(spec) == (c.capacity == 6));
    NoGradGuard no_grad;
    LayerKVCache cache{.capacity = c.capacity};
    AttentionSpec cached = spec;
    cached.cache = &cache;
    const auto step = [&](int64_t t) {
      return attention(slice(qkv[0], 1, t, t + 1), slice(qkv[1], 1, t, t + 1), slice(qkv[2], 1, t, t + 1), cached);
    };
    for (int64_t t = 0; t < c.capacity; ++t) step(t);
    CHECK_THROWS_WITH_AS(step(c.capacity), doctest::Contains(c.says), Error);
  }
}

TEST_CASE("positions: learned and none leave the op as it is (the model adds learned positions to X)") {
  const PositionsProblem p{1, 4, 2, 10, 10, 4, {.window = 3, .global = 1}};
  const Inputs in = p.inputs(800, AttentionLayout::BHTD);
  for (AttentionImpl impl : ag::test::attention_impls()) {
    CAPTURE(name_of(impl));
    const Tensor none = attention(in[0], in[1], in[2], p.spec(impl, PositionEncoding::None, AttentionLayout::BHTD));
    const Tensor learned = attention(in[0], in[1], in[2], p.spec(impl, PositionEncoding::Learned, AttentionLayout::BHTD));
    CHECK(learned.to_vector() == none.to_vector());
    const AttentionSpec plain{.function = SoftmaxAttention{.impl = impl, .pattern = p.pattern}, .causal = true};  // the default: none
    CHECK(attention(in[0], in[1], in[2], plain).to_vector() == none.to_vector());
  }
}

// --- bad input ----------------------------------------------------------------------------------

TEST_CASE("positions: odd head size with rope, alibi with linear attention and rope_base <= 0 or NaN are errors naming the key") {
  const Tensor odd = Tensor::zeros({1, 2, 4, 3}, DType::Float64), even = Tensor::zeros({1, 2, 4, 4}, DType::Float64);
  CHECK_THROWS_WITH_AS(attention(odd, odd, odd, {.causal = true, .position = PositionEncoding::Rope}),
                       doctest::Contains("position rope rotates pairs of a head's dims: head size 3 is odd"), Error);
  CHECK_THROWS_WITH_AS(rope(odd, AttentionLayout::BHTD), doctest::Contains("rope: x"), Error);
  CHECK_THROWS_WITH_AS(attention(even, even, even,
                                 {.function = LinearAttention{}, .causal = true, .position = PositionEncoding::Alibi}),
                       doctest::Contains("position alibi biases softmax attention's scores"), Error);
  for (double base : {0.0, -2.0, std::nan(""), kInfinity}) {
    CAPTURE(base);
    CHECK_THROWS_WITH_AS(attention(even, even, even, {.causal = true, .position = PositionEncoding::Rope, .rope_base = base}),
                         doctest::Contains("rope_base"), Error);
    CHECK_THROWS_WITH_AS(rope(even, AttentionLayout::BHTD, 0, base), doctest::Contains("rope_base"), Error);
  }
  CHECK_THROWS_WITH_AS(attention(even, even, even, {.causal = false, .position = PositionEncoding::Alibi}),
                       doctest::Contains("position alibi biases each score by its key's distance back from the query"), Error);
  // odd head size without rope, and an odd head size with alibi, are fine
  CHECK(attention(odd, odd, odd, {.causal = true, .position = PositionEncoding::Alibi}).shape() == odd.shape());
}

}  // namespace positions_test
