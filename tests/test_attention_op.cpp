// The attention op (core/ops.h): its three implementations against each other
// and against gradcheck, FlashAttention's error budget (its own test recipe),
// the contract's corner cases (rows that see no key, a query over a long cache,
// grouped kv heads, the two layouts) and determinism. Every implementation
// (EnumNames<AttentionImpl>) on every device (TEST_CASE_EVERY_DEVICE): a
// device's results are compared with the CPU's.
#include <array>
#include <cmath>
#include <limits>

#include "core/threads.h"
#include "tests/helpers.h"

// The file's names and using-directives stay its own in a unity build, where the test
// files compile as one translation unit (CMakeLists.txt).
namespace attention_op_test {

using namespace ag;
using ag::test::softmax_of;
using ag::test::random;

namespace {
using Inputs = std::vector<Tensor>;

using ag::test::attention_impls;

// One problem's sizes. Shapes follow `layout`.
struct Problem {
  int64_t B, Hq, Hkv, Tq, Tk, d;
  AttentionSpec spec;

  Shape q_shape() const { return shape(Hq, Tq); }
  Shape kv_shape() const { return shape(Hkv, Tk); }
  Shape shape(int64_t H, int64_t T) const {
    return spec.layout == AttentionLayout::BTHD ? Shape{B, T, H, d} : Shape{B, H, T, d};
  }
  // q, k, v: float64 N(0, 1), requiring grad.
  Inputs inputs(uint64_t seed) const {
    return {random(q_shape(), seed), random(kv_shape(), seed + 1), random(kv_shape(), seed + 2)};
  }
};

std::string describe(const Problem& p) {
  return "B " + std::to_string(p.B) + " Hq " + std::to_string(p.Hq) + " Hkv " + std::to_string(p.Hkv) + " Tq " +
         std::to_string(p.Tq) + " Tk " + std::to_string(p.Tk) + " d " + std::to_string(p.d) +
         (p.spec.causal ? " causal" : "") +
         (softmax_of(p.spec).q_offset ? " q_offset " + std::to_string(*softmax_of(p.spec).q_offset) : "") +
         (p.spec.layout == AttentionLayout::BTHD ? " BTHD" : " BHTD");
}

GradcheckFn attention_fn(AttentionSpec spec) {
  return [spec](const Inputs& x) { return attention(x[0], x[1], x[2], spec); };
}

// On the CPU, gradcheck in float64; on a device, Z and every gradient in float64
// within 1e-10 of the CPU's (as every implementation agrees with composed).
void check_gradients(Device device, const AttentionSpec& spec, const Inputs& inputs) {
  if (device == Device::CPU) CHECK_GRADCHECK(attention_fn(spec), inputs);
  else ag::test::check_device_matches_cpu(device, attention_fn(spec), inputs, 1e-10, DType::Float64);
}

using Result = ag::test::AttentionRun;
using ag::test::max_abs_error;
using ag::test::run_attention;

Tensor upstream_for(const Problem& p, uint64_t seed) { return random(p.q_shape(), seed, DType::Float64, false); }


// √(mean (a − b)²) over the elements where they differ (equal infinities agree).
double rms_error(const Tensor& a, const Tensor& b) {
  const std::vector<double> va = a.to_vector(), vb = b.to_vector();
  REQUIRE(va.size() == vb.size());
  double sum = 0;
  for (size_t i = 0; i < va.size(); ++i)
    if (va[i] != vb[i]) sum += (va[i] - vb[i]) * (va[i] - vb[i]);
  return std::sqrt(sum / static_cast<double>(std::max<size_t>(va.size(), 1)));
}

// The sizes the cross-implementation and cross-device checks walk: odd and
// tile-edge lengths, Tq ≠ Tk with default and explicit offsets, grouped kv
// heads, both layouts, causal and not.
std::vector<Problem> agreement_problems() {
  std::vector<Problem> problems;
  const std::vector<std::array<int64_t, 6>> sizes = {
      // B, Hq, Hkv, Tq, Tk, d
      {2, 2, 2, 9, 9, 5},    {1, 4, 1, 17, 17, 8},  {2, 4, 2, 7, 12, 4},   {1, 2, 2, 12, 7, 3},
      {1, 3, 3, 65, 65, 16}, {1, 2, 1, 1, 100, 8},  {1, 2, 2, 130, 130, 32}, {1, 2, 1, 200, 70, 64},
  };
  for (const auto& [B, Hq, Hkv, Tq, Tk, d] : sizes)
    for (bool causal : {false, true})
      for (AttentionLayout layout : {AttentionLayout::BHTD, AttentionLayout::BTHD})
        problems.push_back({B, Hq, Hkv, Tq, Tk, d, {.causal = causal, .layout = layout}});
  // Explicit offsets: a query past the keys, and queries before the first key (rows that see nothing).
  problems.push_back({1, 2, 1, 6, 10, 4, {.function = SoftmaxAttention{.q_offset = 1}, .causal = true}});
  problems.push_back({1, 2, 2, 6, 6, 4, {.function = SoftmaxAttention{.q_offset = -3}, .causal = true}});
  return problems;
}

// Every implementation on `device` agrees with composed on the CPU, in float64:
// Z and every gradient ≤ 1e-10 (normwise relative), and lse of dense and flash.
void check_implementations_agree(Device device) {
  for (const Problem& p : agreement_problems()) {
    CAPTURE(describe(p));
    const Inputs in = p.inputs(10);
    const Tensor upstream = upstream_for(p, 13);
    AttentionSpec spec = p.spec;
    softmax_of(spec).impl = AttentionImpl::Composed;
    const Result reference = run_attention(in, spec, Device::CPU, DType::Float64, upstream);
    softmax_of(spec).impl = AttentionImpl::Dense;
    const Tensor reference_lse = run_attention(in, spec, Device::CPU, DType::Float64, upstream).lse;
    for (AttentionImpl impl : attention_impls()) {
      CAPTURE(name_of(impl));
      softmax_of(spec).impl = impl;
      const Result r = run_attention(in, spec, device, DType::Float64, upstream);
      CHECK_CLOSE(r.Z, reference.Z, 1e-10);
      CHECK_CLOSE(r.dQ, reference.dQ, 1e-10);
      CHECK_CLOSE(r.dK, reference.dK, 1e-10);
      CHECK_CLOSE(r.dV, reference.dV, 1e-10);
      if (impl != AttentionImpl::Composed) CHECK_CLOSE(r.lse, reference_lse, 1e-12);
    }
  }
}

// FlashAttention's test recipe: in float32, flash's error against a float64
// reference must stay within twice the dense float32 computation's error
// against it, for Z, lse, dQ, dK and dV. The max over elements is the recipe's
// statistic; as it is set by a few rows (the first rows of a causal mask, where
// attention is concentrated), the problems hold 32 heads so that it is a max over
// many such rows. The root-mean-square error, which every element sets, must
// also stay within 1.25× dense's: flash is as accurate, not just within 2×.
void check_flash_error_budget(Device device) {
  for (int64_t T : {63, 64, 65, 127, 1000})
    for (bool causal : {false, true}) {
      const Problem p = T < 1000 ? Problem{4, 8, 4, T, T, 32, {.causal = causal}}
                                 : Problem{2, 4, 2, T, T, 32, {.causal = causal}};
      CAPTURE(describe(p));
      const Inputs in = p.inputs(20 + T);
      const Tensor upstream = upstream_for(p, 23);
      AttentionSpec spec = p.spec;
      softmax_of(spec).impl = AttentionImpl::Dense;
      const Result reference = run_attention(in, spec, Device::CPU, DType::Float64, upstream);
      const Result dense = run_attention(in, spec, device, DType::Float32, upstream);
      softmax_of(spec).impl = AttentionImpl::Flash;
      const Result flash = run_attention(in, spec, device, DType::Float32, upstream);
      const auto check = [&](const char* name, const Tensor& ours, const Tensor& theirs, const Tensor& exact) {
        const double flash_max = max_abs_error(ours, exact), dense_max = max_abs_error(theirs, exact);
        const double flash_rms = rms_error(ours, exact), dense_rms = rms_error(theirs, exact);
        INFO(std::string(name) << ": flash error max " << flash_max << " rms " << flash_rms << ", dense error max "
                               << dense_max << " rms " << dense_rms);
        CHECK(flash_max <= 2 * dense_max);
        CHECK(flash_rms <= 1.25 * dense_rms);
      };
      check("Z", flash.Z, dense.Z, reference.Z);
      check("lse", flash.lse, dense.lse, reference.lse);
      check("dQ", flash.dQ, dense.dQ, reference.dQ);
      check("dK", flash.dK, dense.dK, reference.dK);
      check("dV", flash.dV, dense.dV, reference.dV);
    }
}

// A query that sees no key (causal, placed before the first key) gets Z = 0
// and lse = +inf, and sends no gradient anywhere: exact zeros, no NaN.
void check_rows_without_keys(Device device) {
  // Tq = 5 over Tk = 3, bottom-right aligned: q_offset = −2, so queries 0 and 1 see nothing.
  const Problem p{1, 2, 1, 5, 3, 4, {.causal = true}};
  const Inputs in = p.inputs(30);
  for (AttentionImpl impl : attention_impls())
    for (DType dtype : {DType::Float32, DType::Float64}) {
      CAPTURE(name_of(impl));
      CAPTURE(dtype);
      AttentionSpec spec = p.spec;
      softmax_of(spec).impl = impl;
      const Result r = run_attention(in, spec, device, dtype, upstream_for(p, 31));
      for (const Tensor& t : {r.Z, r.dQ, r.dK, r.dV}) CHECK(all_finite(t));
      const std::vector<double> Z = r.Z.to_vector(), dQ = r.dQ.to_vector();
      for (int64_t h = 0; h < p.Hq; ++h)
        for (int64_t i = 0; i < p.Tq; ++i)
          for (int64_t c = 0; c < p.d; ++c) {
            const size_t at = (h * p.Tq + i) * p.d + c;
            if (i < 2) {
              CHECK(Z[at] == 0.0);
              CHECK(dQ[at] == 0.0);
            } else {
              CHECK(Z[at] != 0.0);
            }
          }
      if (impl != AttentionImpl::Composed) {
        const std::vector<double> lse = r.lse.to_vector();
        for (int64_t h = 0; h < p.Hq; ++h)
          for (int64_t i = 0; i < p.Tq; ++i)
            CHECK((i < 2 ? std::isinf(lse[h * p.Tq + i]) && lse[h * p.Tq + i] > 0 : std::isfinite(lse[h * p.Tq + i])));
      }
    }
}

// One new query over a cache of Tk = 100 keys, causal and bottom-right aligned,
// sees all 100: the same bits as without the mask. Top-left aligned
// (q_offset = 0) it sees key 0 only, so Z = V_0.
void check_one_query_over_a_cache(Device device) {
  const Problem p{1, 2, 2, 1, 100, 8, {.causal = true}};
  const Inputs in = p.inputs(40);
  const Tensor upstream = upstream_for(p, 41);
  for (AttentionImpl impl : attention_impls()) {
    CAPTURE(name_of(impl));
    AttentionSpec causal = p.spec, full = p.spec, top_left = p.spec;
    softmax_of(causal).impl = softmax_of(full).impl = softmax_of(top_left).impl = impl;
    full.causal = false;
    softmax_of(top_left).q_offset = 0;
    const Result seen = run_attention(in, causal, device, DType::Float64, upstream);
    const Result all = run_attention(in, full, device, DType::Float64, upstream);
    CHECK(max_abs_error(seen.Z, all.Z) == 0.0);
    CHECK(max_abs_error(seen.dK, all.dK) == 0.0);
    const Result first = run_attention(in, top_left, device, DType::Float64, upstream);
    const Tensor V0 = slice(in[2].detach(), 2, 0, 1);  // [1, H, 1, d]
    CHECK_CLOSE(first.Z, V0, 1e-15);
  }
}

// Grouped kv heads equal multi-head attention on K and V with each kv head
// repeated for its group, and the kv heads' gradients are the group sums.
void check_grouped_kv_heads(Device device) {
  for (AttentionLayout layout : {AttentionLayout::BHTD, AttentionLayout::BTHD}) {
    const Problem grouped{2, 6, 2, 11, 11, 4, {.causal = true, .layout = layout}};
    Problem repeated = grouped;
    repeated.Hkv = grouped.Hq;
    const Inputs in = grouped.inputs(50);
    const int64_t h_dim = layout == AttentionLayout::BTHD ? 2 : 1, group = 3;
    // K_rep[:, h] = K[:, h / group]: [..., Hkv, ...] → [..., Hkv, group, ...] → [..., Hq, ...]
    const auto repeat = [&](const Tensor& t) {
      Shape split = t.shape(), expanded;
      split.insert(split.begin() + h_dim + 1, 1);
      expanded = split;
      expanded[h_dim + 1] = group;
      return expand(t.detach().reshape(split), expanded).reshape(repeated.kv_shape());
    };
    const Inputs in_repeated = {in[0], repeat(in[1]), repeat(in[2])};
    const Tensor upstream = upstream_for(grouped, 51);
    for (AttentionImpl impl : attention_impls()) {
      CAPTURE(name_of(impl));
      CAPTURE(layout == AttentionLayout::BTHD);
      AttentionSpec spec = grouped.spec;
      softmax_of(spec).impl = impl;
      const Result g = run_attention(in, spec, device, DType::Float64, upstream);
      const Result m = run_attention(in_repeated, spec, device, DType::Float64, upstream);
      CHECK_CLOSE(g.Z, m.Z, 1e-12);
      CHECK_CLOSE(g.dQ, m.dQ, 1e-12);
      // dK of kv head j = Σ over its group of the repeated heads' dK
      const auto group_sum = [&](const Tensor& t) {
        Shape split = grouped.kv_shape();
        split.insert(split.begin() + h_dim + 1, group);
        return sum(t.reshape(split), h_dim + 1);
      };
      CHECK_CLOSE(g.dK, group_sum(m.dK), 1e-12);
      CHECK_CLOSE(g.dV, group_sum(m.dV), 1e-12);
    }
  }
}

// [B, T, H, d] in gives the same numbers as [B, H, T, d] in, Z and gradients in the input's layout.
void check_layouts_agree(Device device) {
  const Problem heads_first{2, 4, 2, 13, 9, 8, {.causal = true}};
  Problem tokens_first = heads_first;
  tokens_first.spec.layout = AttentionLayout::BTHD;
  const Inputs in = heads_first.inputs(60);
  const auto swap = [](const Tensor& t) { return permute(t.detach(), {0, 2, 1, 3}); };
  const Inputs in_swapped = {swap(in[0]), swap(in[1]), swap(in[2])};
  const Tensor upstream = upstream_for(heads_first, 61);
  for (AttentionImpl impl : attention_impls()) {
    CAPTURE(name_of(impl));
    AttentionSpec a = heads_first.spec, b = tokens_first.spec;
    softmax_of(a).impl = softmax_of(b).impl = impl;
    const Result r = run_attention(in, a, device, DType::Float64, upstream);
    const Result s = run_attention(in_swapped, b, device, DType::Float64, swap(upstream));
    CHECK_CLOSE(swap(s.Z), r.Z, 1e-13);
    CHECK_CLOSE(swap(s.dQ), r.dQ, 1e-13);
    CHECK_CLOSE(swap(s.dK), r.dK, 1e-13);
    CHECK_CLOSE(swap(s.dV), r.dV, 1e-13);
  }
}

// The flash backward's bits do not depend on the run (nor, on the CPU, on the thread count).
void check_flash_deterministic(Device device) {
  const Problem p{1, 4, 2, 300, 300, 16, {.function = SoftmaxAttention{.impl = AttentionImpl::Flash}, .causal = true}};
  const Inputs in = p.inputs(70);
  const Tensor upstream = upstream_for(p, 71);
  ag::test::check_same_bits_again(device, [&] {
    const Result r = run_attention(in, p.spec, device, DType::Float32, upstream);
    return std::vector<Tensor>{r.Z, r.dQ, r.dK, r.dV};
  });
}
}  // namespace

TEST_CASE_EVERY_DEVICE("attention op: flash gradcheck in float64 over T, d, Tq ≠ Tk, grouped kv heads, causal and not") {
  // T in {1, 2, 5, 33, 65} × d in {1, 4, 16}, one query head per kv head pair and Hkv = 1 of 2.
  for (int64_t T : {1, 2, 5, 33, 65})
    for (int64_t d : {1, 4, 16})
      for (bool causal : {false, true}) {
        const Problem p{1, 2, 1, T, T, d, {.function = SoftmaxAttention{.impl = AttentionImpl::Flash}, .causal = causal}};
        CAPTURE(describe(p));
        check_gradients(device, p.spec, p.inputs(100 + T + d));
      }
  // Hkv in {1, 2, Hq}, Tq ≠ Tk with the default and explicit offsets, both layouts.
  for (const Problem& p : {Problem{2, 4, 1, 5, 7, 3, {.causal = true}}, Problem{1, 4, 2, 7, 5, 4, {.causal = true}},
                           Problem{1, 4, 4, 6, 9, 2, {.function = SoftmaxAttention{.q_offset = 1}, .causal = true}},
                           Problem{1, 4, 2, 6, 6, 4, {.function = SoftmaxAttention{.q_offset = -2}, .causal = true}},
                           Problem{2, 4, 2, 5, 8, 3, {.layout = AttentionLayout::BTHD}},
                           Problem{1, 2, 2, 9, 4, 5, {.causal = true, .layout = AttentionLayout::BTHD}}}) {
    CAPTURE(describe(p));
    AttentionSpec flash = p.spec;
    softmax_of(flash).impl = AttentionImpl::Flash;
    check_gradients(device, flash, p.inputs(200));
  }
}

TEST_CASE_EVERY_DEVICE("attention op: dense gradcheck and float32 against float64, every implementation") {
  for (bool causal : {false, true}) {
    const Problem p{2, 4, 2, 7, 9, 4, {.causal = causal}};
    CAPTURE(describe(p));
    AttentionSpec spec = p.spec;
    softmax_of(spec).impl = AttentionImpl::Dense;
    check_gradients(device, spec, p.inputs(300));
    for (AttentionImpl impl : attention_impls()) {
      CAPTURE(name_of(impl));
      softmax_of(spec).impl = impl;
      // On a device: float32 against the CPU's float32, to the same 1e-5.
      if (device == Device::CPU) ag::test::check_float32_matches_float64(attention_fn(spec), p.inputs(310));
      else ag::test::check_device_matches_cpu(device, attention_fn(spec), p.inputs(310));
    }
  }
}

TEST_CASE_EVERY_DEVICE("attention op: composed, dense and flash agree to 1e-10 in float64") {
  check_implementations_agree(device);
}

TEST_CASE_EVERY_DEVICE("attention op: flash's float32 error is within twice dense's, for Z, lse, dQ, dK, dV") {
  check_flash_error_budget(device);
}

TEST_CASE_EVERY_DEVICE("attention op: a query that sees no key gives zeros, never NaN") {
  check_rows_without_keys(device);
}

TEST_CASE_EVERY_DEVICE("attention op: one query over 100 cached keys sees all 100") {
  check_one_query_over_a_cache(device);
}

TEST_CASE_EVERY_DEVICE("attention op: grouped kv heads equal repeated K, V with group-summed gradients") {
  check_grouped_kv_heads(device);
}

TEST_CASE_EVERY_DEVICE("attention op: the layouts [B, H, T, d] and [B, T, H, d] agree") { check_layouts_agree(device); }

TEST_CASE_EVERY_DEVICE("attention op: flash's backward gives the same bits every run, and on 1 and 2 threads") {
  check_flash_deterministic(device);
}

TEST_CASE_EVERY_DEVICE("attention op: A has rows summing to 1 and an exactly zero upper triangle") {
  const Problem p{1, 2, 2, 6, 6, 4, {.causal = true}};
  const auto on_device = [&](const Inputs& in) {
    Inputs out;
    for (const Tensor& t : in) out.push_back(t.detach().to(device));
    return out;
  };
  for (AttentionImpl impl : {AttentionImpl::Composed, AttentionImpl::Dense}) {
    CAPTURE(name_of(impl));
    AttentionSpec spec = p.spec;
    softmax_of(spec).impl = impl;
    const Inputs in = on_device(p.inputs(5));
    AttentionInternals internals;
    attention(in[0], in[1], in[2], spec, &internals);
    REQUIRE(internals.probabilities.shape() == Shape{1, 2, 6, 6});
    CHECK_FALSE(internals.probabilities.requires_grad());
    const std::vector<double> a = internals.probabilities.to_vector();
    for (int64_t h = 0; h < 2; ++h)
      for (int64_t i = 0; i < 6; ++i) {
        double row = 0;
        for (int64_t j = 0; j < 6; ++j) {
          const double v = a[(h * 6 + i) * 6 + j];
          if (j > i) CHECK(v == 0.0);
          row += v;
        }
        CHECK(row == doctest::Approx(1.0).epsilon(1e-14));
      }
  }
  // Flash never forms A; it hands back lse.
  const Inputs in = on_device(p.inputs(5));
  AttentionSpec flash = p.spec;
  softmax_of(flash).impl = AttentionImpl::Flash;
  AttentionInternals internals;
  attention(in[0], in[1], in[2], flash, &internals);
  CHECK_FALSE(internals.probabilities.defined());
  CHECK(internals.log_sum_exp.shape() == Shape{1, 2, 6});
}

TEST_CASE_EVERY_DEVICE("attention op: scores around ±1e4 give finite outputs and gradients") {
  for (DType dtype : {DType::Float32, DType::Float64})
    for (AttentionImpl impl : attention_impls())
      for (bool causal : {true, false}) {
        CAPTURE(dtype);
        CAPTURE(name_of(impl));
        CAPTURE(causal);
        // q·k ≈ ±1e4·√d so that S ≈ ±1e4 after scaling.
        const Shape shape = {1, 2, 8, 4};
        Tensor q = (random(shape, 8, dtype, false) * 100.0).to(device).requires_grad_();
        Tensor k = (random(shape, 9, dtype, false) * 100.0).to(device).requires_grad_();
        Tensor v = random(shape, 10, dtype, false).to(device).requires_grad_();
        const Tensor z = attention(q, k, v, {.function = SoftmaxAttention{.impl = impl}, .causal = causal});
        sum(z * z).backward();
        for (const Tensor& t : {z, q.grad(), k.grad(), v.grad()}) CHECK(all_finite(t));
      }
  // And softmax itself on rows of ±1e4.
  const Tensor x = Tensor::from_vector({1e4, -1e4, 1e4 - 1, 0}, {1, 4}).to(device).requires_grad_();
  const Tensor y = softmax(x);
  sum(y * y).backward();
  CHECK(all_finite(y));
  CHECK(all_finite(x.grad()));
}

TEST_CASE("attention op: shape errors name the op, the shapes and the layout") {
  CHECK_THROWS_WITH_AS(attention(Tensor::zeros({2, 3, 4}), Tensor::zeros({2, 3, 4}), Tensor::zeros({2, 3, 5})),
                       doctest::Contains("attention: q [2,3,4], k [2,3,4], v [2,3,5]: expected q [B, Hq, Tq, d]"),
                       Error);
  CHECK_THROWS_WITH_AS(attention(Tensor::zeros({1, 4, 3, 2}), Tensor::zeros({1, 3, 3, 2}), Tensor::zeros({1, 3, 3, 2})),
                       doctest::Contains("4 query heads are not a multiple of 3 kv heads"), Error);
  CHECK_THROWS_WITH_AS(attention(Tensor::zeros({1, 4, 3, 2}), Tensor::zeros({1, 5, 2, 2}), Tensor::zeros({1, 5, 2, 2}),
                                 {.layout = AttentionLayout::BTHD}),
                       doctest::Contains("3 query heads are not a multiple of 2 kv heads"), Error);
  const Tensor x = Tensor::zeros({1, 1, 2, 2});
  CHECK_THROWS_WITH_AS(attention(x, x, x, {.function = SoftmaxAttention{.scale = -1.0}}), doctest::Contains("scale -1 is not a positive number"),
                       Error);
}


// Each clause of a compound check alone: the others hold, so a check that lost this clause would
// let the input through (a coverage build found each untested: docs/reliability.md, "Refusals").
TEST_CASE("attention op: each part of the input checks refuses on its own") {
  const auto refuses = [](const Tensor& q, const Tensor& k, const Tensor& v, const AttentionSpec& spec,
                          const char* message) {
    CHECK_THROWS_WITH_AS(attention(q, k, v, spec), doctest::Contains(message), Error);
  };
  const Tensor x = Tensor::zeros({1, 2, 3, 4});  // BHTD: B 1, H 2, T 3, d 4
  const char* shapes = "expected q [B, Hq, Tq, d] and k, v [B, Hkv, Tk, d] (layout BHTD)";
  refuses(x, Tensor::zeros({2, 3, 4}), Tensor::zeros({2, 3, 4}), {}, shapes);              // k not 4-D
  refuses(x, x, Tensor::zeros({1, 2, 5, 4}), {}, shapes);                                  // v not k's shape
  refuses(x, Tensor::zeros({2, 2, 3, 4}), Tensor::zeros({2, 2, 3, 4}), {}, shapes);        // another batch
  refuses(x, Tensor::zeros({1, 2, 3, 2}), Tensor::zeros({1, 2, 3, 2}), {}, shapes);        // another d
  const Tensor d0 = Tensor::zeros({1, 2, 3, 0});
  refuses(d0, d0, d0, {}, shapes);                                                         // d = 0
  const Tensor h0 = Tensor::zeros({1, 0, 3, 4});
  refuses(x, h0, h0, {}, "2 query heads are not a multiple of 0 kv heads");

  // The softmax function's settings.
  const auto softmax = [](SoftmaxAttention s, bool causal = false) { return AttentionSpec{.function = s, .causal = causal}; };
  const double inf = std::numeric_limits<double>::infinity();
  refuses(x, x, x, softmax({.scale = inf}), "scale inf is not a positive number");
  refuses(x, x, x, softmax({.score = AttentionScore::Additive, .leaky_slope = std::nan("")}), "leaky_slope nan is not a finite number");
  refuses(x, x, x, softmax({.dropout = {.p = -0.5}}), "attention dropout p = -0.5 is outside [0, 1)");
  refuses(x, x, x, softmax({.mods = {.soft_cap = inf}}), "soft_cap inf is not a positive number");
  // A sparse pattern: each of its numbers out of range alone, and a window's companions without one.
  const char* pattern = "(window, global, random >= 0; dilation >= 1; random <= 16)";
  refuses(x, x, x, softmax({.pattern = {.window = -1}}, true), pattern);
  refuses(x, x, x, softmax({.pattern = {.window = 2, .dilation = 0}}, true), pattern);
  refuses(x, x, x, softmax({.pattern = {.window = 2, .global = -1}}, true), pattern);
  refuses(x, x, x, softmax({.pattern = {.window = 2, .random_blocks = -1}}, true), pattern);
  refuses(x, x, x, softmax({.pattern = {.window = 2, .random_blocks = 17}}, true), pattern);
  const char* companions = "without one (window 0) every earlier key is visible already";
  refuses(x, x, x, softmax({.pattern = {.dilation = 2}}, true), companions);
  refuses(x, x, x, softmax({.pattern = {.global = 1}}, true), companions);
  refuses(x, x, x, softmax({.pattern = {.random_blocks = 1}}, true), companions);

  // The learnable tables: their rank, heads and size.
  refuses(x, x, x, softmax({.mods = {.sinks = Tensor::zeros({2, 1})}}), "sinks [2,1] is not [Hq] = [2]");
  refuses(x, x, x, softmax({.mods = {.sinks = Tensor::zeros({3})}}), "sinks [3] is not [Hq] with Hq = 2");
  refuses(x, x, x, softmax({.mods = {.sinks = Tensor::zeros({2}, DType::Float64)}}), "sinks [2] float64 is not in q's dtype");
  refuses(x, x, x, softmax({.mods = {.relative = {.table = Tensor::zeros({2, 0})}}}),
          "relative bias table [2,0] is not [Hq, num_buckets] with Hq = 2");
  refuses(x, x, x, softmax({.mods = {.relative = {.table = Tensor::zeros({2, 3})}}}),
          "3 buckets leave none for distances beyond 0 (at least 4, bidirectional)");
  refuses(x, x, x, softmax({.mods = {.relative = {.table = Tensor::zeros({2, 1}), .bidirectional = false}}}),
          "1 buckets leave none for distances beyond 0 (at least 2)");
  const Tensor table = Tensor::zeros({2, 5});
  const auto indexed = [&](const Tensor& index) { return softmax({.mods = {.indexed = {.table = table, .index = index}}}); };
  const char* index_shape = "is not int64 [Tq, Tk] = [3,3] on q's device";
  refuses(x, x, x, indexed({}), "indexed bias index (none) is not int64 [Tq, Tk]");
  refuses(x, x, x, indexed(Tensor::zeros({3, 3})), index_shape);                                  // float32
  refuses(x, x, x, indexed(Tensor::from_indices(std::vector<int64_t>(9, 0), {9})), index_shape);   // 1-D
  refuses(x, x, x, indexed(Tensor::from_indices(std::vector<int64_t>(6, 0), {2, 3})), index_shape); // Tq rows wrong
  refuses(x, x, x, indexed(Tensor::from_indices(std::vector<int64_t>(6, 0), {3, 2})), index_shape); // Tk columns wrong
  refuses(x, x, x, indexed(Tensor::from_indices({0, 0, 0, 0, -1, 0, 0, 0, 0}, {3, 3})),
          "indexed bias index[1, 1] = -1 is outside its table's 5 entries [0, 5)");
  refuses(x, x, x, softmax({.mods = {.indexed = {.table = Tensor::zeros({2, 0}), .index = Tensor::from_indices(std::vector<int64_t>(9, 0), {3, 3})}}}),
          "indexed bias table [2,0] is not [Hq, n] with Hq = 2");

  // Mask functions: each operand's dtype, rank and size, and where the queries sit.
  const auto masked = [&](MaskMods m, std::optional<int64_t> q_offset = std::nullopt) {
    return softmax({.q_offset = q_offset, .masks = std::move(m)});
  };
  const char* documents = "are not int64 [Tk] or [B, Tk] = [3] or [1, 3] (one id per key position)";
  refuses(x, x, x, masked({.documents = Tensor::zeros({3})}), documents);                                  // float32
  refuses(x, x, x, masked({.documents = Tensor::from_indices({0, 0, 0, 0, 0, 0}, {2, 3})}), documents);     // B rows wrong
  refuses(x, x, x, masked({.documents = Tensor::from_indices({0, 0, 0, 0}, {1, 4})}), documents);           // Tk wrong
  refuses(x, x, x, masked({.documents = Tensor::from_indices({0, 0, 0}, {3})}, -1),
          "document ids are given per key position, and queries at -1..1 are not all among the 3 keys");
  refuses(x, x, x, masked({.documents = Tensor::from_indices({0, 0, 0}, {3})}, 1),
          "document ids are given per key position, and queries at 1..3 are not all among the 3 keys");
  refuses(x, x, x, masked({.prefix = -1}), "prefix-LM prefix -1 is outside [0, 3] (the keys)");
  const char* parents = "are not int64 [Tk] = [3] (one per key position)";
  refuses(x, x, x, masked({.parents = Tensor::zeros({3})}), parents);
  refuses(x, x, x, masked({.parents = Tensor::from_indices({-1, 0, 1}, {1, 3})}), parents);
  const Tensor chain = Tensor::from_indices({-1, 0, 1}, {3});
  refuses(x, x, x, masked({.parents = chain, .tree_prefix = -1}), "token tree prefix -1 is outside [0, 3]");
  refuses(x, x, x, masked({.parents = chain, .tree_prefix = 4}), "token tree prefix 4 is outside [0, 3]");
  refuses(x, x, x, masked({.parents = Tensor::from_indices({-1, -2, 1}, {3})}),
          "token tree node 1 has parent -2, not earlier than the node");
  const char* adjacency = "is not [Tq, Tk] = [3, 3] or [B, Tq, Tk] = [1, 3, 3]";
  refuses(x, x, x, masked({.adjacency = Tensor::ones({3})}), adjacency);          // 1-D
  refuses(x, x, x, masked({.adjacency = Tensor::ones({2, 3, 3})}), adjacency);    // B wrong
  refuses(x, x, x, masked({.adjacency = Tensor::ones({2, 3})}), adjacency);       // Tq wrong
  refuses(x, x, x, masked({.adjacency = Tensor::ones({3, 2})}), adjacency);       // Tk wrong

  // rope: the position encoding's input (an odd head size) and rope() itself on a 3-D x.
  const Tensor odd = Tensor::zeros({1, 2, 3, 3});
  refuses(odd, odd, odd, {.position = PositionEncoding::Rope}, "position rope rotates pairs of a head's dims: head size 3 is odd");
  refuses(x, x, x, {.position = PositionEncoding::Rope, .rope_base = inf}, "rope_base inf is not a positive number");
  CHECK_THROWS_WITH_AS(rope(Tensor::zeros({2, 3, 4}), AttentionLayout::BHTD, 0, 10000.0),
                       doctest::Contains("rope: x [2,3,4] float32 is not [B, H, T, d] or [B, T, H, d] with d even"), Error);
}

// Decoding through a KV cache: what the op asks of the call and of the cache.
TEST_CASE("attention op: decoding's checks each refuse on their own") {
  NoGradGuard no_grad;
  const Tensor x = Tensor::zeros({1, 2, 2, 4});  // BTHD: B 1, T 2, H 2, d 4
  const auto decode = [&](LayerKVCache& cache, AttentionSpec spec, const Tensor& q, const char* message) {
    spec.cache = &cache;
    CHECK_THROWS_WITH_AS(attention(q, x, x, spec), doctest::Contains(message), Error);
  };
  LayerKVCache cache{.capacity = 4};
  decode(cache, {.causal = false, .layout = AttentionLayout::BTHD}, x, "a KV cache needs causal attention");
  decode(cache, {.causal = true, .layout = AttentionLayout::BHTD}, x, "a KV cache holds BTHD rows");
  decode(cache, {.causal = true, .layout = AttentionLayout::BTHD}, Tensor::zeros({1, 1, 2, 4}),
         "decoding takes one query per new key");
  LayerKVCache full{.capacity = 4, .length = 3};
  decode(full, {.causal = true, .layout = AttentionLayout::BTHD}, x,
         "KV cache: positions 3 … 4 do not fit in its 4");
  LayerKVCache negative{.capacity = 4, .length = -1};
  decode(negative, {.causal = true, .layout = AttentionLayout::BTHD}, x, "KV cache: positions -1 … 0 do not fit in its 4");
  // A cache whose rows are not the new keys' shape, dtype (each alone).
  LayerKVCache wrong_rows{.capacity = 4, .k = Tensor::zeros({1, 5, 2, 4}), .v = Tensor::zeros({1, 5, 2, 4})};
  decode(wrong_rows, {.causal = true, .layout = AttentionLayout::BTHD}, x, "is not [1,4,2,4] in the new keys' dtype and device");
  LayerKVCache wrong_dtype{.capacity = 4, .k = Tensor::zeros({1, 4, 2, 4}, DType::Float64),
                           .v = Tensor::zeros({1, 4, 2, 4}, DType::Float64)};
  decode(wrong_dtype, {.causal = true, .layout = AttentionLayout::BTHD}, x, "is not [1,4,2,4] in the new keys' dtype and device");
  // Mask functions read key positions as the cache's rows: not after it rolled.
  LayerKVCache rolled{.capacity = 4, .length = 2, .rolled = 1};
  decode(rolled, {.function = SoftmaxAttention{.masks = {.documents = Tensor::from_indices({0, 0, 0, 0}, {4})}}, .causal = true,
                  .layout = AttentionLayout::BTHD},
         x, "KV cache: mask functions (MaskMods) read key positions as the cache's rows");
  // ... nor when it is about to roll: a window's cache (it rolls) with no room for the new positions.
  LayerKVCache about_to_roll{.capacity = 4, .length = 3};
  decode(about_to_roll, {.function = SoftmaxAttention{.pattern = {.window = 2}, .masks = {.documents = Tensor::from_indices({0, 0, 0, 0}, {4})}},
                         .causal = true, .layout = AttentionLayout::BTHD},
         x, "(3 positions taken, 4 held, 2 new)");
}

}  // namespace attention_op_test
