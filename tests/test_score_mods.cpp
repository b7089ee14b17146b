// Softmax attention's score modifiers (ScoreMods, core/ops.h; docs/backprop.md, "Score
// modifiers and their adjoints"): tanh soft-capping, per-head sink logits, a T5
// relative-position bias table, a bias table read through a user-given index, and a
// score function of the user's own (the README's example).
// Float64 gradcheck of q, k, v and every learnable tensor in each implementation; the
// three implementations agree; two runs give the same bits; PyTorch float64 goldens
// (tests/golden/score_mods.safetensors, written by scripts/make_golden_score_mods.py);
// bad input gets an error naming what is wrong; every case on the CPU and on CUDA.
#include <algorithm>
#include <cmath>
#include <limits>
#include <string>
#include <vector>

#include "core/cpu/vector_math.h"
#include "core/safetensors.h"
#include "core/threads.h"
#include "tests/helpers.h"

// The file's names and using-directives stay its own in a unity build, where the test
// files compile as one translation unit (CMakeLists.txt).
namespace score_mods_test {

using namespace ag;
using ag::test::attention_impls;
using ag::test::random;
using Inputs = std::vector<Tensor>;

namespace {

// Which modifiers a case uses, and the problem's geometry. Inputs are
// {q, k, v, sinks, relative table, indexed table, index}; the tensors of the
// modifiers a case leaves out are there but not read (and need no gradient).
// The custom score function a case uses, if any: locality() or temperature() below.
enum class Custom { None, Locality, Temperature };
struct ModsCase {
  bool cap = false, sinks = false, relative = false, indexed = false;
  Custom custom = Custom::None;
  bool causal = false, bidirectional = true;
  int64_t B = 1, Hq = 2, Hkv = 1, Tq = 6, Tk = 6, d = 4;
  int64_t buckets = 8, max_distance = 5, entries = 3;
  double soft_cap = 1.5;
  AttentionLayout layout = AttentionLayout::BHTD;
};

std::string describe(const ModsCase& c) {
  std::string s;
  for (const auto& [on, name] : {std::pair{c.cap, "cap"}, std::pair{c.sinks, "sinks"}, std::pair{c.relative, "relative"},
                                 std::pair{c.indexed, "indexed"}, std::pair{c.custom == Custom::Locality, "custom locality"},
                                 std::pair{c.custom == Custom::Temperature, "custom temperature"},
                                 std::pair{c.causal, "causal"}})
    if (on) s += std::string(name) + " ";
  return s + "Tq " + std::to_string(c.Tq) + " Tk " + std::to_string(c.Tk) + (c.bidirectional ? "" : " unidirectional");
}

Inputs inputs_of(const ModsCase& c, uint64_t seed) {
  const bool bthd = c.layout == AttentionLayout::BTHD;
  const Shape q_shape = bthd ? Shape{c.B, c.Tq, c.Hq, c.d} : Shape{c.B, c.Hq, c.Tq, c.d};
  const Shape kv_shape = bthd ? Shape{c.B, c.Tk, c.Hkv, c.d} : Shape{c.B, c.Hkv, c.Tk, c.d};
  std::vector<int64_t> index(c.Tq * c.Tk);
  for (int64_t e = 0; e < c.Tq * c.Tk; ++e) index[e] = (e * 7 + e / c.Tk) % c.entries;
  return {random(q_shape, seed),
          random(kv_shape, seed + 1),
          random(kv_shape, seed + 2),
          random({c.Hq}, seed + 3, DType::Float64, c.sinks),
          random({c.Hq, c.buckets}, seed + 4, DType::Float64, c.relative) * 0.5,
          random({c.Hq, c.entries}, seed + 5, DType::Float64, c.indexed) * 0.5,
          Tensor::from_indices(index, {c.Tq, c.Tk})};
}

// `* 0.5` above made the tables non-leaves: leaves again, requiring grad where the case reads them.
Inputs leaves(const ModsCase& c, Inputs x) {
  const bool used[] = {true, true, true, c.sinks, c.relative, c.indexed};
  for (size_t i = 0; i < 6; ++i) {
    x[i] = x[i].detach().clone();
    if (used[i]) x[i].requires_grad_();
  }
  return x;
}

// The README's custom modifier: a Gaussian locality bias, wider in later heads.
ScoreFunction locality() {
  return {.value = [](double s, int64_t h, int64_t q, int64_t k) {
            const double w = 4.0 * (h + 1);
            return s - static_cast<double>((q - k) * (q - k)) / (2 * w * w);
          },
          .derivative = [](double, int64_t, int64_t, int64_t) { return 1.0; }};
}

// A temperature per head and distance, s · t(h, q, k) with t = 1 + h/10 + (q − k)/20 (in [0.75, 1.4]
// here): unlike locality's, its derivative t depends on where the score is, so a derivative
// evaluated at the wrong query, key or head (or without a query offset, Tq < Tk) fails gradcheck.
ScoreFunction temperature() {
  const auto t = [](int64_t h, int64_t q, int64_t k) { return 1.0 + 0.1 * static_cast<double>(h) + 0.05 * static_cast<double>(q - k); };
  return {.value = [t](double s, int64_t h, int64_t q, int64_t k) { return s * t(h, q, k); },
          .derivative = [t](double, int64_t h, int64_t q, int64_t k) { return t(h, q, k); }};
}

AttentionSpec spec_of(const ModsCase& c, AttentionImpl impl, const Inputs& x) {
  SoftmaxAttention softmax{.impl = impl};
  if (c.cap) softmax.mods.soft_cap = c.soft_cap;
  if (c.sinks) softmax.mods.sinks = x[3];
  if (c.relative) softmax.mods.relative = {.table = x[4], .bidirectional = c.bidirectional, .max_distance = c.max_distance};
  if (c.indexed) softmax.mods.indexed = {.table = x[5], .index = x[6]};
  if (c.custom != Custom::None) softmax.mods.custom = c.custom == Custom::Locality ? locality() : temperature();
  return {.function = softmax, .causal = c.causal, .layout = c.layout};
}

GradcheckFn attend(const ModsCase& c, AttentionImpl impl) {
  return [c, impl](const Inputs& x) { return attention(x[0], x[1], x[2], spec_of(c, impl, x)); };
}

// Z and every gradient (q, k, v, then the modifiers' tensors the case reads) from upstream R.
std::vector<Tensor> outputs(const ModsCase& c, AttentionImpl impl, const Inputs& given, const Tensor& R) {
  const Inputs x = leaves(c, given);
  const Tensor Z = attend(c, impl)(x);
  sum(Z * R).backward();
  std::vector<Tensor> all{Z.detach()};
  for (size_t i = 0; i < 6; ++i)
    if (x[i].requires_grad()) all.push_back(x[i].grad());
  return all;
}

std::vector<ModsCase> gradcheck_cases() {
  std::vector<ModsCase> cases;
  for (bool causal : {false, true}) {
    cases.push_back({.cap = true, .causal = causal});
    cases.push_back({.sinks = true, .causal = causal});
    cases.push_back({.relative = true, .causal = causal});
    cases.push_back({.relative = true, .causal = causal, .bidirectional = false, .buckets = 6});
    cases.push_back({.indexed = true, .causal = causal});
    cases.push_back({.cap = true, .sinks = true, .relative = true, .indexed = true, .causal = causal});
    cases.push_back({.custom = Custom::Locality, .causal = causal});
    cases.push_back({.cap = true, .sinks = true, .relative = true, .custom = Custom::Locality, .causal = causal});
    cases.push_back({.custom = Custom::Temperature, .causal = causal});
  }
  // A position-dependent derivative where the queries sit after a query offset (Tq < Tk, causal).
  cases.push_back({.custom = Custom::Temperature, .causal = true, .Tq = 3, .Tk = 7});
  // Tq ≠ Tk (queries at the last positions), BTHD, grouped and plain heads, B = 2.
  cases.push_back({.cap = true, .sinks = true, .relative = true, .indexed = true, .causal = true, .B = 2, .Hq = 2,
                   .Hkv = 2, .Tq = 3, .Tk = 7, .layout = AttentionLayout::BTHD});
  return cases;
}

}  // namespace

TEST_CASE_EVERY_DEVICE("score mods: float64 gradcheck of q, k, v, sinks and both tables — composed, dense, flash") {
  uint64_t seed = 10;
  for (const ModsCase& c : gradcheck_cases())
    for (AttentionImpl impl : attention_impls()) {
      if (c.custom != Custom::None && device != Device::CPU) continue;  // a host callable: the CPU only (refused below)
      CAPTURE(describe(c));
      CAPTURE(name_of(impl));
      const Inputs x = leaves(c, inputs_of(c, seed += 10));
      if (device == Device::CPU) CHECK_GRADCHECK(attend(c, impl), x);
      else ag::test::check_device_matches_cpu(device, attend(c, impl), x, 1e-10, DType::Float64);
    }
}

TEST_CASE_EVERY_DEVICE("score mods: dense and flash equal composed (float64 ≤ 1e-12) across flash's tiles") {
  // T = 150 spans several of flash's query and key tiles on both devices; a sparse window too.
  for (bool causal : {false, true})
    for (int64_t Tq : {150, 37}) {
      const ModsCase c{.cap = true, .sinks = true, .relative = true, .indexed = true, .causal = causal, .B = 2, .Hq = 4,
                       .Hkv = 2, .Tq = Tq, .Tk = 150, .d = 8, .buckets = 32, .max_distance = 128, .entries = 5};
      CAPTURE(describe(c));
      const Inputs x = inputs_of(c, 200 + Tq);
      const Tensor R = random({c.B, c.Hq, c.Tq, c.d}, 300, DType::Float64, false);
      Inputs on_device;
      for (const Tensor& t : x) on_device.push_back(t.detach().to(device));
      const std::vector<Tensor> reference = outputs(c, AttentionImpl::Composed, on_device, R.to(device));
      for (AttentionImpl impl : {AttentionImpl::Dense, AttentionImpl::Flash}) {
        CAPTURE(name_of(impl));
        const std::vector<Tensor> got = outputs(c, impl, on_device, R.to(device));
        REQUIRE(got.size() == reference.size());
        for (size_t i = 0; i < got.size(); ++i) {
          CAPTURE(i);
          CHECK_CLOSE(got[i], reference[i], 1e-12);
        }
      }
    }
}

TEST_CASE_EVERY_DEVICE("score mods: two runs give the same bits (float32, every gradient — CPU on 1 thread and on all)") {
  const ModsCase c{.cap = true, .sinks = true, .relative = true, .indexed = true, .causal = true, .B = 2, .Hq = 4,
                   .Hkv = 2, .Tq = 200, .Tk = 200, .d = 16, .buckets = 32, .max_distance = 128, .entries = 7};
  Inputs x;
  for (const Tensor& t : inputs_of(c, 500)) x.push_back(t.detach().to(t.dtype() == DType::Int64 ? DType::Int64 : DType::Float32).to(device));
  const Tensor R = random({c.B, c.Hq, c.Tq, c.d}, 501, DType::Float32, false).to(device);
  for (AttentionImpl impl : {AttentionImpl::Dense, AttentionImpl::Flash}) {
    CAPTURE(name_of(impl));
    ag::test::check_same_bits_again(device, [&] { return outputs(c, impl, x, R); });
  }
}

TEST_CASE("score mods: relative_position_bucket is T5's rule (every bucket of the goldens' cases, from PyTorch)") {
  const SafetensorsFile golden = load_safetensors(ATTOGRAD_SOURCE_DIR "/tests/golden/score_mods.safetensors");
  struct Setting {
    const char* name;
    bool bidirectional;
    int64_t buckets, max_distance;
  };
  for (const Setting& s : {Setting{"buckets.bidirectional", true, 32, 128}, Setting{"buckets.unidirectional", false, 32, 128},
                           Setting{"buckets.small", true, 8, 5}}) {
    CAPTURE(s.name);
    const std::vector<double> expected = golden.at(s.name).to_vector();  // relative positions −300 … 300
    for (int64_t r = -300; r <= 300; ++r) {
      CAPTURE(r);
      CHECK(relative_position_bucket(r, s.bidirectional, s.buckets, s.max_distance) ==
            static_cast<int64_t>(expected[r + 300]));
    }
  }
}

TEST_CASE("score mods: flash's float tanh is within 4 ulp of float64's over [−20, 20]") {
  double worst_ulp = 0, worst_x = 0;
  for (int64_t n = -2000000; n <= 2000000; ++n) {
    const float x = static_cast<float>(n) * 1e-5f;
    const double exact = std::tanh(static_cast<double>(x));
    const double ulp = std::max(std::abs(std::nextafter(static_cast<float>(exact), 2.0f) - static_cast<float>(exact)),
                                std::numeric_limits<float>::denorm_min());
    const double error = std::abs(static_cast<double>(math::tanh_vectorisable(x)) - exact) / ulp;
    if (error > worst_ulp) worst_ulp = error, worst_x = x;
  }
  INFO("worst " << worst_ulp << " ulp at x = " << worst_x);
  CHECK(worst_ulp <= 4.0);
}

TEST_CASE("score mods: each relative bucket is one interval of distances (distances_of, what CUDA's sums test)") {
  for (bool bidirectional : {true, false})
    for (int64_t buckets : {4, 6, 8, 32, 33})
      for (int64_t max_distance : {5, 20, 128}) {
        const int64_t per_direction = bidirectional ? buckets / 2 : buckets;
        if (per_direction < 2 || max_distance <= per_direction / 2) continue;  // refused by the op
        const ScoreModifiers mods{.relative_buckets = buckets, .max_distance = max_distance, .bidirectional = bidirectional};
        for (int64_t e = 0; e < buckets; ++e) {
          const ScoreModifiers::Distances range = mods.distances_of(e);
          int64_t wrong = 0, first_wrong = 0;
          for (int64_t n = -400; n <= 400; ++n)
            if ((range.lo <= n && n <= range.hi) != (mods.bucket(n, 0) == e) && wrong++ == 0) first_wrong = n;
          INFO("bidirectional " << bidirectional << ", " << buckets << " buckets, max_distance " << max_distance
                                << ", bucket " << e << ": wrong at n = " << first_wrong);
          CHECK(wrong == 0);
        }
      }
}

TEST_CASE_EVERY_DEVICE("score mods: match PyTorch float64 (golden file) to 1e-12 — relative bias, soft-cap, sinks, all") {
  const SafetensorsFile golden = load_safetensors(ATTOGRAD_SOURCE_DIR "/tests/golden/score_mods.safetensors");
  const auto at = [&](const std::string& name) { return golden.at(name).to(device); };
  // Each case as the script computes it: q, k, v [2, 3, 7, 4] (BHTD), loss = sum(Z ∘ R).
  struct GoldenCase {
    const char* name;
    ModsCase mods;
  };
  const GoldenCase cases[] = {
      {"relative", {.relative = true, .causal = false, .buckets = 8, .max_distance = 5}},
      {"relative_causal", {.relative = true, .causal = true, .bidirectional = false, .buckets = 6, .max_distance = 5}},
      {"capped", {.cap = true, .causal = true, .soft_cap = 1.5}},
      {"sinks", {.sinks = true, .causal = true}},
      {"all", {.cap = true, .sinks = true, .relative = true, .indexed = true, .causal = true, .buckets = 8,
               .max_distance = 5, .entries = 4, .soft_cap = 2.0}},
  };
  for (const GoldenCase& g : cases)
    for (AttentionImpl impl : attention_impls()) {
      const std::string prefix = std::string(g.name) + ".";
      CAPTURE(prefix);
      CAPTURE(name_of(impl));
      ModsCase c = g.mods;
      c.B = 2, c.Hq = 3, c.Hkv = 3, c.Tq = 7, c.Tk = 7, c.d = 4;
      Inputs x{at(prefix + "q"), at(prefix + "k"), at(prefix + "v"),
               c.sinks ? at(prefix + "sinks") : Tensor::zeros({c.Hq}, DType::Float64, device),
               c.relative ? at(prefix + "relative") : Tensor::zeros({c.Hq, c.buckets}, DType::Float64, device),
               c.indexed ? at(prefix + "indexed") : Tensor::zeros({c.Hq, c.entries}, DType::Float64, device),
               c.indexed ? at(prefix + "index").to(DType::Int64) : Tensor::from_indices(std::vector<int64_t>(49, 0), {7, 7}).to(device)};
      const std::vector<Tensor> got = outputs(c, impl, x, at(prefix + "R"));
      std::vector<std::string> names{"out", "grad.q", "grad.k", "grad.v"};
      if (c.sinks) names.push_back("grad.sinks");
      if (c.relative) names.push_back("grad.relative");
      if (c.indexed) names.push_back("grad.indexed");
      REQUIRE(got.size() == names.size());
      for (size_t i = 0; i < names.size(); ++i) {
        CAPTURE(names[i]);
        CHECK_CLOSE(got[i], at(prefix + names[i]), 1e-12);
      }
    }
}

TEST_CASE("score mods: a row that sees no key gives zeros and its sink takes all the mass") {
  // q_offset = −1: query 0 sits before key 0 and sees nothing.
  const ModsCase c{.sinks = true, .causal = true, .Tq = 4, .Tk = 4};
  const Inputs x = leaves(c, inputs_of(c, 950));
  for (AttentionImpl impl : attention_impls()) {
    CAPTURE(name_of(impl));
    const GradcheckFn f = [c, impl](const Inputs& in) {
      AttentionSpec spec = spec_of(c, impl, in);
      std::get<SoftmaxAttention>(spec.function).q_offset = -1;
      return attention(in[0], in[1], in[2], spec);
    };
    for (double z : slice(f(x), 2, 0, 1).to_vector()) CHECK(z == 0.0);
    CHECK_GRADCHECK(f, x);
  }
}

TEST_CASE("score mods: bad input names what is wrong") {
  const ModsCase c{.cap = true, .sinks = true, .relative = true, .indexed = true, .causal = true};
  const Inputs x = inputs_of(c, 990);
  const auto error = [&](auto&& edit) {
    AttentionSpec spec = spec_of(c, AttentionImpl::Dense, x);
    edit(std::get<SoftmaxAttention>(spec.function).mods);
    return ag::test::error_of([&] { attention(x[0], x[1], x[2], spec); });
  };
  CHECK(ag::test::contains(error([](ScoreMods& m) { m.soft_cap = 0.0; }), "soft_cap 0 is not a positive number"));
  CHECK(ag::test::contains(error([](ScoreMods& m) { m.soft_cap = -2.0; }), "soft_cap -2 is not a positive number"));
  CHECK(ag::test::contains(error([](ScoreMods& m) { m.sinks = Tensor::zeros({3}, DType::Float64); }),
                           "sinks [3] is not [Hq] with Hq = 2"));
  CHECK(ag::test::contains(error([](ScoreMods& m) { m.relative.table = Tensor::zeros({2, 8, 1}, DType::Float64); }),
                           "relative bias table [2,8,1] is not [Hq, num_buckets] with Hq = 2"));
  CHECK(ag::test::contains(error([](ScoreMods& m) { m.relative.table = Tensor::zeros({3, 8}, DType::Float64); }),
                           "relative bias table [3,8] is not [Hq, num_buckets] with Hq = 2"));
  CHECK(ag::test::contains(error([](ScoreMods& m) { m.relative.table = Tensor::zeros({2, 8}, DType::Float32); }),
                           "is not in q's dtype and device"));
  CHECK(ag::test::contains(error([](ScoreMods& m) { m.relative.table = Tensor::zeros({2, 2}, DType::Float64); }),
                           "2 buckets leave none for distances beyond 0"));
  CHECK(ag::test::contains(error([](ScoreMods& m) { m.relative.max_distance = 2; }),
                           "max_distance 2 is not beyond the 2 distances"));
  CHECK(ag::test::contains(error([](ScoreMods& m) { m.indexed.table = Tensor::zeros({2, 3, 1}, DType::Float64); }),
                           "indexed bias table [2,3,1] is not [Hq, n] with Hq = 2"));
  CHECK(ag::test::contains(error([](ScoreMods& m) { m.indexed.index = Tensor::from_indices({0, 1}, {1, 2}); }),
                           "indexed bias index [1,2] int64 is not int64 [Tq, Tk] = [6,6]"));
  CHECK(ag::test::contains(error([](ScoreMods& m) { m.indexed.index = Tensor(); }), "indexed bias index (none)"));
  std::vector<int64_t> bad(36, 0);
  bad[2 * 6 + 4] = 3;  // the table has 3 entries
  CHECK(ag::test::contains(error([&](ScoreMods& m) { m.indexed.index = Tensor::from_indices(bad, {6, 6}); }),
                           "indexed bias index[2, 4] = 3 is outside its table's 3 entries [0, 3)"));
  bad[2 * 6 + 4] = -1;
  CHECK(ag::test::contains(error([&](ScoreMods& m) { m.indexed.index = Tensor::from_indices(bad, {6, 6}); }),
                           "indexed bias index[2, 4] = -1 is outside"));
}

TEST_CASE("score mods: a custom score function — the README's example runs, and tanh by hand equals soft_cap") {
  // The README's lines, as written there.
  Tensor q = Tensor::randn({2, 4, 64, 32}), k = Tensor::randn({2, 4, 64, 32}), v = Tensor::randn({2, 4, 64, 32});
  q.requires_grad_();
  SoftmaxAttention softmax{.impl = AttentionImpl::Flash};
  softmax.mods.custom = {  // a Gaussian locality bias, wider in later heads: s − (q − k)² / 2w²
      .value = [](double s, int64_t h, int64_t q, int64_t k) {
        const double w = 4.0 * (h + 1);
        return s - static_cast<double>((q - k) * (q - k)) / (2 * w * w);
      },
      .derivative = [](double, int64_t, int64_t, int64_t) { return 1.0; }};
  softmax.mods.soft_cap = 30.0;                                 // then Gemma 2's cap
  softmax.mods.sinks = Tensor::zeros({4}).requires_grad_();     // and a learned sink per head
  Tensor z2 = attention(q, k, v, {.function = softmax, .causal = true});
  sum(z2).backward();
  CHECK(q.grad().defined());
  CHECK(softmax.mods.sinks.grad().defined());
  // The same in composed and dense, float32.
  for (AttentionImpl impl : {AttentionImpl::Composed, AttentionImpl::Dense}) {
    SoftmaxAttention other = softmax;
    other.impl = impl;
    CHECK_CLOSE(attention(q, k, v, {.function = other, .causal = true}), z2, 1e-5);
  }

  // A cap written as a custom function equals soft_cap, to rounding, in every implementation.
  const double cap = 1.5;
  const ModsCase c{.sinks = true, .relative = true, .causal = true, .Tq = 70, .Tk = 70};
  const Inputs x = inputs_of(c, 960);
  const Tensor R = random({c.B, c.Hq, c.Tq, c.d}, 961, DType::Float64, false);
  ModsCase capped = c;
  capped.cap = true, capped.soft_cap = cap;
  for (AttentionImpl impl : attention_impls()) {
    CAPTURE(name_of(impl));
    const Inputs by_mods = leaves(capped, x), by_hand = leaves(c, x);
    sum(attend(capped, impl)(by_mods) * R).backward();
    AttentionSpec spec = spec_of(c, impl, by_hand);
    std::get<SoftmaxAttention>(spec.function).mods.custom = {
        .value = [cap](double u, int64_t, int64_t, int64_t) { return cap * std::tanh(u / cap); },
        .derivative = [cap](double u, int64_t, int64_t, int64_t) { return 1 - std::pow(std::tanh(u / cap), 2); }};
    const Tensor Z = attention(by_hand[0], by_hand[1], by_hand[2], spec);
    sum(Z * R).backward();
    CHECK_CLOSE(Z, attend(capped, impl)(by_mods), 1e-12);
    for (size_t i : {0, 1, 2, 3, 4}) {
      CAPTURE(i);
      CHECK_CLOSE(by_hand[i].grad(), by_mods[i].grad(), 1e-12);
    }
  }
}

TEST_CASE_EVERY_DEVICE("score mods: a custom score function without a derivative, or on CUDA, is refused") {
  const ModsCase c{.custom = Custom::Locality};
  Inputs x;
  for (const Tensor& t : inputs_of(c, 970)) x.push_back(t.detach().to(device));
  AttentionSpec spec = spec_of(c, AttentionImpl::Dense, x);
  if (device == Device::CPU) {
    std::get<SoftmaxAttention>(spec.function).mods.custom.derivative = nullptr;
    CHECK(ag::test::contains(ag::test::error_of([&] { attention(x[0], x[1], x[2], spec); }),
                             "the custom score function has no derivative"));
  } else {
    CHECK(ag::test::contains(ag::test::error_of([&] { attention(x[0], x[1], x[2], spec); }),
                             "a custom score function is a C++ callable on the host: the CPU only"));
  }
}

TEST_CASE_EVERY_DEVICE("score mods: with ALiBi and a sparse window, and decoding through a KV cache, every implementation agrees") {
  // The modifiers come before M (ALiBi's bias and the pattern's −∞) in every implementation.
  const ModsCase c{.cap = true, .sinks = true, .relative = true, .causal = true, .B = 1, .Hq = 4, .Hkv = 2, .Tq = 90,
                   .Tk = 90, .d = 8, .buckets = 16, .max_distance = 64, .layout = AttentionLayout::BTHD};
  Inputs x;
  for (const Tensor& t : inputs_of(c, 980)) x.push_back(t.detach().to(device));
  const auto spec_for = [&](AttentionImpl impl, const Inputs& in) {
    AttentionSpec spec = spec_of(c, impl, in);
    spec.position = PositionEncoding::Alibi;
    std::get<SoftmaxAttention>(spec.function).pattern = {.window = 24, .dilation = 2, .global = 2};
    return spec;
  };
  const Tensor R = random({c.B, c.Tq, c.Hq, c.d}, 981, DType::Float64, false).to(device);
  const auto run = [&](AttentionImpl impl) {
    const Inputs in = leaves(c, x);
    const Tensor Z = attention(in[0], in[1], in[2], spec_for(impl, in));
    sum(Z * R).backward();
    return std::vector<Tensor>{Z.detach(), in[0].grad(), in[1].grad(), in[2].grad(), in[3].grad(), in[4].grad()};
  };
  const std::vector<Tensor> reference = run(AttentionImpl::Composed);
  for (AttentionImpl impl : {AttentionImpl::Dense, AttentionImpl::Flash}) {
    CAPTURE(name_of(impl));
    const std::vector<Tensor> got = run(impl);
    for (size_t i = 0; i < got.size(); ++i) {
      CAPTURE(i);
      CHECK_CLOSE(got[i], reference[i], 1e-12);
    }
  }
  // Decoding: a prefill of 5 positions, then one at a time, gives the full forward's rows
  // (the relative buckets at the queries' positions, not their row numbers).
  for (AttentionImpl impl : attention_impls()) {
    CAPTURE(name_of(impl));
    NoGradGuard no_grad;
    LayerKVCache cache{.capacity = c.Tk};
    std::vector<Tensor> rows;
    for (int64_t t = 0; t < c.Tq;) {
      const int64_t end = t == 0 ? 5 : t + 1;
      AttentionSpec spec = spec_for(impl, x);
      spec.cache = &cache;
      rows.push_back(attention(slice(x[0], 1, t, end), slice(x[1], 1, t, end), slice(x[2], 1, t, end), spec));
      t = end;
    }
    CHECK_CLOSE(concat(rows, 1), reference[0], 1e-12);
  }
}

TEST_CASE("score mods: float32 matches float64 to 1e-5 in every implementation (every gradient)") {
  const ModsCase c{.cap = true, .sinks = true, .relative = true, .indexed = true, .causal = true, .B = 2, .Hq = 4,
                   .Hkv = 2, .Tq = 150, .Tk = 150, .d = 16, .buckets = 32, .max_distance = 128, .entries = 5,
                   .soft_cap = 5.0};
  const Inputs x = leaves(c, inputs_of(c, 1000));
  for (AttentionImpl impl : attention_impls()) {
    CAPTURE(name_of(impl));
    ag::test::check_float32_matches_float64(attend(c, impl), x);
  }
}

}  // namespace score_mods_test
