// Optimizers: SGD, Adam and AdamW against hand-computed steps and against
// PyTorch's golden numbers (tests/golden/optim.json, from
// scripts/make_golden_optim.py); gradient clipping; the warmup-cosine schedule;
// decay groups; and exact resumption through state()/load_state().
#include <algorithm>
#include <cmath>
#include <fstream>
#include <functional>
#include <limits>
#include <memory>
#include <numbers>

#include <nlohmann/json.hpp>

#include "helpers.h"
#include "nn/linear.h"
#include "optim/adam.h"
#include "optim/clip_grad.h"
#include "optim/schedule.h"
#include "optim/sgd.h"

namespace ag::optim {
namespace {

using test::relative_error;

Tensor param(const std::vector<double>& values, const Shape& shape, DType dtype = DType::Float64,
             Device device = Device::CPU) {
  Tensor p = Tensor::from_vector(values, shape, dtype).to(device);
  p.requires_grad_();
  return p;
}

void set_grad(const Tensor& p, const std::vector<double>& g) {
  Tensor(p).set_grad(Tensor::from_vector(g, p.shape(), p.dtype()).to(p.device()));
}

// Relative closeness of one scalar, within rtol.
void check_near(double actual, double expected, double rtol) {
  INFO("actual " << actual << ", expected " << expected);
  CHECK(std::abs(actual - expected) <= rtol * std::abs(expected));
}

// --- SGD by hand ---------------------------------------------------------------------------
// All values are binary fractions, so every step is exact.

TEST_CASE("optim: SGD without momentum, with and without weight decay") {
  Tensor p = param({1.0, -2.0}, {2});
  SGD sgd({{"p", p}}, {.lr = 0.5});
  set_grad(p, {0.5, 0.25});
  sgd.step();  // p ← p − 0.5·g = [1 − 0.25, −2 − 0.125]
  CHECK(p.to_vector() == std::vector<double>{0.75, -2.125});
  set_grad(p, {-1.0, 2.0});
  sgd.step();  // [0.75 + 0.5, −2.125 − 1]
  CHECK(p.to_vector() == std::vector<double>{1.25, -3.125});

  Tensor q = param({2.0}, {1});
  SGD decayed(std::vector<ParamGroup>{{.params = {{"q", q}}, .weight_decay = 0.25}}, {.lr = 0.5});
  set_grad(q, {1.0});
  decayed.step();  // g ← 1 + 0.25·2 = 1.5;  q ← 2 − 0.5·1.5
  CHECK(q.item() == 1.25);
}

TEST_CASE("optim: SGD with momentum and dampening") {
  Tensor p = param({1.0}, {1});
  SGD sgd({{"p", p}}, {.lr = 0.5, .momentum = 0.5});
  set_grad(p, {1.0});
  sgd.step();  // b ← g = 1 (first step);      p ← 1 − 0.5·1 = 0.5
  CHECK(p.item() == 0.5);
  set_grad(p, {2.0});
  sgd.step();  // b ← 0.5·1 + 2 = 2.5;          p ← 0.5 − 0.5·2.5 = −0.75
  CHECK(p.item() == -0.75);
  set_grad(p, {-1.0});
  sgd.step();  // b ← 0.5·2.5 − 1 = 0.25;       p ← −0.75 − 0.5·0.25 = −0.875
  CHECK(p.item() == -0.875);

  Tensor q = param({1.0}, {1});
  SGD damped({{"q", q}}, {.lr = 0.5, .momentum = 0.5, .dampening = 0.5});
  set_grad(q, {1.0});
  damped.step();  // b ← g = 1: the first step is not dampened;  q ← 0.5
  CHECK(q.item() == 0.5);
  set_grad(q, {2.0});
  damped.step();  // b ← 0.5·1 + (1 − 0.5)·2 = 1.5;  q ← 0.5 − 0.75 = −0.25
  CHECK(q.item() == -0.25);
}

TEST_CASE("optim: SGD with Nesterov momentum") {
  Tensor p = param({1.0}, {1});
  SGD sgd({{"p", p}}, {.lr = 0.5, .momentum = 0.5, .nesterov = true});
  set_grad(p, {1.0});
  sgd.step();  // b ← 1;  g ← 1 + 0.5·1 = 1.5;        p ← 1 − 0.75 = 0.25
  CHECK(p.item() == 0.25);
  set_grad(p, {2.0});
  sgd.step();  // b ← 0.5 + 2 = 2.5;  g ← 2 + 1.25 = 3.25;  p ← 0.25 − 1.625 = −1.375
  CHECK(p.item() == -1.375);

  CHECK_THROWS_AS(SGD({{"p", p}}, {.lr = 0.5, .nesterov = true}), Error);
  CHECK_THROWS_AS(SGD({{"p", p}}, {.lr = 0.5, .momentum = 0.5, .dampening = 0.1, .nesterov = true}), Error);
}

// --- Adam and AdamW by hand ----------------------------------------------------------------
// Defaults β1 = 0.9, β2 = 0.999, ε = 1e-8; lr = 0.1. Step 1 always moves by
// lr·g/(|g| + ε): m̂ = g and v̂ = g². Step 2 with g1 = 1, g2 = 2:
//   m = 0.9·(0.1·1) + 0.1·2 = 0.29,         m̂ = 0.29 / (1 − 0.9²)      = 1.5263157894...
//   v = 0.999·(0.001·1) + 0.001·4 = 0.004999, v̂ = 0.004999 / (1 − 0.999²) = 2.5007503751...
//   m̂ / (√v̂ + ε) = 0.96518202...
constexpr double kEps = 1e-8;
const double kMhat2 = 0.29 / 0.19, kVhat2 = 0.004999 / 0.001999;

TEST_CASE("optim: Adam, two steps by hand") {
  Tensor p = param({1.0, -1.0}, {2});
  Adam adam({{"p", p}}, {.lr = 0.1});
  set_grad(p, {1.0, -2.0});
  adam.step();  // p ← p − 0.1·sign(g) (up to ε) = [0.900000001, −0.900000001]
  check_near(p.to_vector()[0], 1.0 - 0.1 * 1.0 / (1.0 + kEps), 1e-14);
  check_near(p.to_vector()[1], -1.0 + 0.1 * 2.0 / (2.0 + kEps), 1e-14);
  set_grad(p, {2.0, -4.0});
  adam.step();  // element 0: 0.900000001 − 0.1·0.96518202 = 0.80348179...
  // Element 1 has twice the gradients; m̂/√v̂ is scale-free, so it mirrors element 0 (up to ε).
  check_near(p.to_vector()[0], 1.0 - 0.1 / (1.0 + kEps) - 0.1 * kMhat2 / (std::sqrt(kVhat2) + kEps), 1e-13);
  check_near(p.to_vector()[0], 0.8034817990281656, 1e-13);
  check_near(p.to_vector()[1], -1.0 + 0.1 * 2.0 / (2.0 + kEps) + 0.1 * 2 * kMhat2 / (std::sqrt(4 * kVhat2) + kEps),
             1e-13);
}

TEST_CASE("optim: Adam weight decay is an L2 term in the gradient") {
  Tensor p = param({1.0}, {1});
  Adam adam(std::vector<ParamGroup>{{.params = {{"p", p}}, .weight_decay = 0.5}}, {.lr = 0.1});
  set_grad(p, {1.0});
  adam.step();  // g ← 1 + 0.5·1 = 1.5;  p ← 1 − 0.1·1.5/(1.5 + ε) ≈ 0.9
  const double p1 = 1.0 - 0.1 * 1.5 / (1.5 + kEps);
  check_near(p.item(), p1, 1e-14);
  set_grad(p, {0.0});
  adam.step();  // g ← 0 + 0.5·p1 = 0.45: the decay alone drives the update, through m and v
  const double g2 = 0.5 * p1;
  const double m = 0.9 * (0.1 * 1.5) + 0.1 * g2;               // ≈ 0.18
  const double v = 0.999 * (0.001 * 1.5 * 1.5) + 0.001 * g2 * g2;  // ≈ 0.00245025
  check_near(p.item(), p1 - 0.1 * (m / 0.19) / (std::sqrt(v / 0.001999) + kEps), 1e-13);
  check_near(p.item(), 0.814430282472004, 1e-8);  // the ≈ values above
}

TEST_CASE("optim: AdamW decays the weights directly") {
  Tensor p = param({1.0}, {1});
  AdamW adamw(std::vector<ParamGroup>{{.params = {{"p", p}}, .weight_decay = 0.5}}, {.lr = 0.1});
  set_grad(p, {1.0});
  adamw.step();  // p ← 1·(1 − 0.1·0.5) = 0.95, then − 0.1·1/(1 + ε) → 0.850000001
  const double p1 = 0.95 - 0.1 / (1.0 + kEps);
  check_near(p.item(), p1, 1e-14);
  set_grad(p, {2.0});
  adamw.step();  // p ← 0.95·p1 = 0.80750000095, then − 0.1·0.96518202 (g1 = 1, g2 = 2 above)
  check_near(p.item(), 0.95 * p1 - 0.1 * kMhat2 / (std::sqrt(kVhat2) + kEps), 1e-13);
  check_near(p.item(), 0.7109817989781656, 1e-13);

  // torch's default decay is 0.01.
  Tensor q = param({1.0}, {1});
  AdamW defaults({{"q", q}}, {.lr = 0.1});
  set_grad(q, {1.0});
  defaults.step();
  check_near(q.item(), 1.0 * (1 - 0.1 * 0.01) - 0.1 / (1.0 + kEps), 1e-14);
}

// Issue 47: a step skipped by its guard (the divergence guard: a non-finite
// gradient norm) leaves everything as it was, the step count included, as torch's
// GradScaler skips the whole step — on a GPU too, where the guard and the count
// stay on the device. Advancing t alone made the next bias
// corrections those of t = 3 for moments of two steps: for this constant
// gradient the third step moved 0.86 of its length (0.74 after a skipped first).
TEST_CASE_EVERY_DEVICE("optim: a skipped step leaves the parameters, the moments and the step count") {
  const Tensor finite = Tensor::from_vector({1.0}, {1}, DType::Float64).to(device);
  const Tensor diverged = Tensor::from_vector({NAN}, {1}, DType::Float64).to(device);
  const auto param = [device](const std::vector<double>& values, const Shape& shape) {
    return optim::param(values, shape, DType::Float64, device);
  };
  SUBCASE("AdamW") {
    Tensor p = param({1.0}, {1}), q = param({1.0}, {1});
    AdamW skipping({{"p", p}}, {.lr = 0.1}), plain({{"q", q}}, {.lr = 0.1});
    set_grad(p, {1.0});
    skipping.step(finite);
    set_grad(p, {NAN});
    skipping.step(diverged);
    const double after_one = p.item();
    CHECK(skipping.state()[2].tensor.to_indices() == std::vector<int64_t>{1});  // step.p: still 1
    set_grad(p, {1.0});
    skipping.step(finite);
    set_grad(q, {1.0});
    plain.step();
    CHECK(q.item() == after_one);
    plain.step();
    CHECK(p.item() == q.item());  // bit for bit: two plain steps
    const NamedTensors a = skipping.state(), b = plain.state();
    REQUIRE(a.size() == b.size());
    for (size_t i = 0; i < a.size(); ++i) {
      INFO(a[i].name);
      CHECK(a[i].tensor.to_vector() == b[i].tensor.to_vector());  // m, v and t = 2
    }
  }
  SUBCASE("AdamW: a checkpoint after a skipped step resumes on the same step count") {
    Tensor p = param({1.0}, {1});
    AdamW skipping({{"p", p}}, {.lr = 0.1});
    set_grad(p, {1.0});
    skipping.step(finite);
    set_grad(p, {NAN});
    skipping.step(diverged);
    Tensor r = param({p.item()}, {1});  // the checkpoint: the parameter and the state
    AdamW resumed({{"p", r}}, {.lr = 0.1});
    resumed.load_state(skipping.state());
    set_grad(p, {1.0});
    skipping.step(finite);
    set_grad(r, {1.0});
    resumed.step(finite);
    CHECK(r.item() == p.item());
  }
  SUBCASE("SGD: after a skipped first step, the next is the first (b ← g)") {
    Tensor p = param({1.0}, {1}), q = param({1.0}, {1});
    const SgdOptions options{.lr = 0.5, .momentum = 0.9, .dampening = 0.5};
    SGD skipping({{"p", p}}, options), plain({{"q", q}}, options);
    set_grad(p, {NAN});
    skipping.step(diverged);
    CHECK(p.item() == 1.0);
    CHECK(skipping.state().empty());
    set_grad(p, {1.0});
    skipping.step(finite);
    set_grad(q, {1.0});
    plain.step();
    CHECK(p.item() == q.item());  // 0.5, where b ← 0.5·g (dampened) would give 0.75
  }
}

TEST_CASE("optim: Adam refuses eps <= 0 (a zero gradient would give 0/0)") {
  Tensor p = param({1.0}, {1});
  CHECK_THROWS_WITH_AS(AdamW({{"p", p}}, {.eps = 0.0}),
                       "adamw: eps must be > 0 (with eps = 0 a zero gradient gives 0/0), got 0", Error);
  CHECK_THROWS_AS(Adam({{"p", p}}, {.eps = -1e-8}), Error);
}

TEST_CASE("optim: a parameter without a gradient steps with a zero one, on the shared step count") {
  // Flat buffers give every parameter a gradient (zero after zero_grad): the
  // semantics of torch's zero_grad(set_to_none=False), with one step count.
  Tensor a = param({1.0}, {1}), b = param({-1.0}, {1});
  Adam adam({{"a", a}, {"b", b}}, {.lr = 0.1});
  CHECK(b.grad().defined());
  CHECK(b.grad().item() == 0.0);
  set_grad(a, {1.0});
  adam.step();
  CHECK(b.item() == -1.0);  // m = v = 0: the update is 0 / (0 + eps)
  std::vector<std::string> names;
  for (const auto& [name, t] : adam.state()) names.push_back(name);
  CHECK(names == std::vector<std::string>{"exp_avg.a", "exp_avg_sq.a", "step.a", "exp_avg.b", "exp_avg_sq.b", "step.b"});
  adam.zero_grad();
  CHECK(a.grad().item() == 0.0);
  set_grad(b, {1.0});
  adam.step();  // b at t = 2: m = 0.1, v = 0.001; m̂ = 0.1 / (1 − 0.81), v̂ = 0.001 / (1 − 0.998001)
  const double m_hat = 0.1 / (1 - 0.81), v_hat = 0.001 / (1 - 0.999 * 0.999);
  check_near(b.item(), -1.0 - 0.1 * m_hat / (std::sqrt(v_hat) + kEps), 1e-12);
}

TEST_CASE("optim: parameters move into one flat buffer per dtype, group after group") {
  Tensor w = param({1, 2, 3, 4}, {2, 2}), bias = param({5, 6}, {2}), w32 = param({7}, {1}, DType::Float32);
  const std::vector<NamedParameter> params{{"w", w}, {"bias", bias}, {"w32", w32}};
  AdamW adamw(decay_groups(params, 0.1));
  const std::vector<Tensor> grads = adamw.gradient_buffers();
  REQUIRE(grads.size() == 2);  // float64 and float32
  // w and bias now read one float64 buffer, each at an aligned offset; their values are kept.
  CHECK(w.to_vector() == std::vector<double>{1, 2, 3, 4});
  CHECK(bias.to_vector() == std::vector<double>{5, 6});
  CHECK(w.impl()->storage == bias.impl()->storage);
  CHECK(bias.impl()->offset == FlatParameters::kAlignment);
  CHECK(w32.impl()->storage != w.impl()->storage);
  // Gradients are views of the gradient buffers: backward adds into them, set_grad copies into them.
  const auto backward = [&] {
    (sum(mul(w, w)) + sum(bias)).backward();
    sum(w32).backward();
  };
  backward();
  CHECK(w.grad().to_vector() == std::vector<double>{2, 4, 6, 8});
  CHECK(static_cast<const char*>(w.grad().raw_data()) == static_cast<const char*>(grads[0].raw_data()));
  CHECK(grads[0].to_vector()[FlatParameters::kAlignment] == 1.0);  // bias's gradient, in the buffer
  CHECK(grads[1].to_vector()[0] == 1.0);                           // w32's, in the float32 buffer
  backward();  // a second backward accumulates in place
  CHECK(w.grad().to_vector() == std::vector<double>{4, 8, 12, 16});
  adamw.zero_grad();
  for (const Tensor& g : grads)
    for (double v : g.to_vector()) CHECK(v == 0.0);
  // Converting a parameter after the optimizer was made takes it out of the buffer: a clear error.
  nn::Linear moved({.in = 2, .out = 2});
  AdamW late(moved.named_parameters());
  moved.to(DType::Float64);
  CHECK_THROWS_WITH_AS(late.step(), doctest::Contains("no longer lives in the optimizer's flat buffer"), Error);
}

TEST_CASE("optim: large tensors (the OpenMP path) step like one element") {
  // 2^16 elements: above kParallelGrain, so the kernels run multithreaded.
  // (A parameter lives in one optimizer's flat buffer, so each optimizer gets its own.)
  const int64_t n = int64_t{1} << 16;
  Tensor big = param(std::vector<double>(n, 1.0), {n}), one = param({1.0}, {1});
  Tensor big_s = param(std::vector<double>(n, 1.0), {n}), one_s = param({1.0}, {1});
  AdamW big_opt({{"big", big}}, {.lr = 0.1}), one_opt({{"one", one}}, {.lr = 0.1});
  SGD big_sgd({{"big", big_s}}, {.lr = 0.1, .momentum = 0.9}), one_sgd({{"one", one_s}}, {.lr = 0.1, .momentum = 0.9});
  for (double g : {1.0, 2.0, -0.5}) {
    for (const Tensor& p : {big, big_s}) set_grad(p, std::vector<double>(n, g));
    for (const Tensor& p : {one, one_s}) set_grad(p, {g});
    big_opt.step();
    one_opt.step();
    big_sgd.step();
    one_sgd.step();
  }
  for (const auto& [many, single] : {std::pair{big, one}, std::pair{big_s, one_s}}) {
    const std::vector<double> values = many.to_vector();
    const double expected = single.item();
    CHECK(std::all_of(values.begin(), values.end(), [&](double v) { return v == expected; }));
  }
}

// --- against PyTorch ----------------------------------------------------------------------------

const nlohmann::json& golden() {
  static const nlohmann::json parsed = [] {
    const std::string path = std::string(ATTOGRAD_SOURCE_DIR) + "/tests/golden/optim.json";
    std::ifstream file(path);
    REQUIRE_MESSAGE(file.good(), "cannot open " << path << " (regenerate: /usr/bin/python3 scripts/make_golden_optim.py)");
    return nlohmann::json::parse(file);
  }();
  return parsed;
}

using MakeOptimizer = std::function<std::unique_ptr<Optimizer>(std::vector<ParamGroup>, const nlohmann::json& hyper)>;

// Replays a golden case: the same initial values and gradients, in `dtype`,
// comparing the parameters after every step.
void replay(const char* case_name, const MakeOptimizer& make, DType dtype, double rtol) {
  const nlohmann::json& c = golden()["cases"][case_name];
  std::vector<ParamGroup> groups;
  std::vector<Tensor> params;
  for (const auto& record : c["params"]) {
    const Shape shape = record["shape"].get<Shape>();
    params.push_back(param(record["initial"].get<std::vector<double>>(), shape, dtype));
    const size_t group = record["group"].get<size_t>();
    if (groups.size() <= group) groups.resize(group + 1);
    groups[group].params.push_back({record["name"].get<std::string>(), params.back()});
  }
  std::unique_ptr<Optimizer> opt = make(groups, c["hyper"]);
  const int steps = golden()["steps"].get<int>();
  for (int s = 0; s < steps; ++s) {
    for (size_t i = 0; i < params.size(); ++i) set_grad(params[i], c["params"][i]["grads"][s].get<std::vector<double>>());
    opt->step();
    for (size_t i = 0; i < params.size(); ++i) {
      const nlohmann::json& record = c["params"][i];
      const Tensor expected = Tensor::from_vector(record["after"][s].get<std::vector<double>>(), params[i].shape(),
                                                  DType::Float64);
      INFO(case_name << " " << std::string(dtype_name(dtype)) << ", step " << s + 1 << ", " << record["name"].get<std::string>());
      CHECK_CLOSE(params[i], expected, rtol);
    }
  }
}

AdamOptions adam_options(const nlohmann::json& h) {
  return {.lr = h["lr"], .beta1 = h["betas"][0], .beta2 = h["betas"][1], .eps = h["eps"]};
}

SgdOptions sgd_options(const nlohmann::json& h) {
  return {.lr = h["lr"], .momentum = h["momentum"], .dampening = h["dampening"], .nesterov = h["nesterov"]};
}

TEST_CASE("optim: AdamW, Adam and SGD match torch.optim on golden numbers") {
  const MakeOptimizer adamw = [](std::vector<ParamGroup> groups, const nlohmann::json& h) {
    for (size_t g = 0; g < groups.size(); ++g) groups[g].weight_decay = h["group_weight_decay"][g];
    return std::make_unique<AdamW>(groups, adam_options(h));
  };
  const MakeOptimizer adam = [](std::vector<ParamGroup> groups, const nlohmann::json& h) {
    groups[0].weight_decay = h["weight_decay"];
    return std::make_unique<Adam>(groups, adam_options(h));
  };
  const MakeOptimizer sgd = [](std::vector<ParamGroup> groups, const nlohmann::json& h) {
    groups[0].weight_decay = h["weight_decay"];
    return std::make_unique<SGD>(groups, sgd_options(h));
  };
  // float64 repeats torch's arithmetic; float32 differs by its own rounding only.
  for (auto [dtype, rtol] : {std::pair{DType::Float64, 1e-12}, std::pair{DType::Float32, 1e-6}}) {
    replay("adamw", adamw, dtype, rtol);
    replay("adam", adam, dtype, rtol);
    replay("sgd_nesterov", sgd, dtype, rtol);
    replay("sgd_dampening", sgd, dtype, rtol);
  }
}

// --- clip_grad_norm ---------------------------------------------------------------------------

TEST_CASE("optim: clip_grad_norm takes one L2 norm over all gradients") {
  for (DType dtype : {DType::Float64, DType::Float32}) {
    INFO(std::string(dtype_name(dtype)));
    Tensor a = param({0.0}, {1}, dtype), b = param({0.0, 0.0}, {2, 1}, dtype), frozen = param({5.0}, {1}, dtype);
    const std::vector<NamedParameter> params{{"a", a}, {"b", b}, {"frozen", frozen}};

    // √(3² + 4² + 12²) = 13; over max_norm 6.5 every grad scales by 6.5/(13 + 1e-6).
    set_grad(a, {3.0});
    set_grad(b, {4.0, 12.0});
    CHECK(clip_grad_norm(params, 6.5).item() == 13.0);
    const double coef = 6.5 / (13.0 + 1e-6);
    const double rtol = dtype == DType::Float64 ? 1e-15 : 1e-7;
    check_near(a.grad().item(), 3.0 * coef, rtol);
    CHECK_CLOSE(b.grad(), Tensor::from_vector({4.0 * coef, 12.0 * coef}, {2, 1}, DType::Float64), rtol);
    CHECK_FALSE(frozen.grad().defined());  // no grad: skipped, not created

    // Under the threshold nothing changes, bit for bit.
    set_grad(a, {3.0});
    set_grad(b, {4.0, 12.0});
    CHECK(clip_grad_norm(std::vector<Tensor>{a, b, frozen}, 13.5).item() == 13.0);
    CHECK(a.grad().item() == 3.0);
    CHECK(b.grad().to_vector() == std::vector<double>{4.0, 12.0});
  }
  CHECK(clip_grad_norm(std::vector<Tensor>{param({1.0}, {1})}, 1.0).item() == 0.0);  // no grads at all

  // 2^16 grads of 0.5 (the OpenMP path): norm √(2^16·0.25) = 128 exactly.
  const int64_t n = int64_t{1} << 16;
  Tensor big = param(std::vector<double>(n, 0.0), {n});
  set_grad(big, std::vector<double>(n, 0.5));
  CHECK(clip_grad_norm(std::vector<Tensor>{big}, 64.0).item() == 128.0);
  const std::vector<double> clipped = big.grad().to_vector();
  const double expected = 0.5 * (64.0 / (128.0 + 1e-6));
  CHECK(std::all_of(clipped.begin(), clipped.end(), [&](double g) { return g == expected; }));
  CHECK_THROWS_AS(clip_grad_norm(std::vector<Tensor>{}, 0.0), Error);
}

// --- schedule ------------------------------------------------------------------------------------

TEST_CASE("optim: warmup then cosine decay, as nanoGPT's get_lr") {
  const CosineSchedule s{.lr = 6e-4, .min_lr = 6e-5, .warmup_iters = 10, .decay_iters = 110};
  CHECK(warmup_cosine_lr(0, s) == 6e-4 * 1 / 11);            // warmup starts above 0
  CHECK(warmup_cosine_lr(9, s) == 6e-4 * 10 / 11);           // last warmup iter
  CHECK(warmup_cosine_lr(10, s) == 6e-4);                    // ratio 0: cos 0 = 1, the peak
  check_near(warmup_cosine_lr(60, s), (6e-4 + 6e-5) / 2, 1e-15);  // ratio ½: halfway
  check_near(warmup_cosine_lr(35, s), 6e-5 + 0.5 * (1 + std::cos(std::numbers::pi / 4)) * (6e-4 - 6e-5), 1e-15);
  CHECK(warmup_cosine_lr(110, s) == 6e-5);                   // ratio 1: cos π = −1, the floor
  CHECK(warmup_cosine_lr(111, s) == 6e-5);
  CHECK(warmup_cosine_lr(100000, s) == 6e-5);
  CHECK_THROWS_AS(warmup_cosine_lr(0, {.warmup_iters = 10, .decay_iters = 10}), Error);
}

// --- decay groups ----------------------------------------------------------------------------------

TEST_CASE("optim: decay_groups decays matrices, not biases or LayerNorm parameters") {
  const std::vector<NamedParameter> params{
      {"wte.weight", Tensor::zeros({5, 2})},   {"h.0.ln_1.weight", Tensor::ones({2})},
      {"h.0.attn.w_q.weight", Tensor::zeros({2, 2})}, {"h.0.attn.w_q.bias", Tensor::zeros({2})}};
  const std::vector<ParamGroup> groups = decay_groups(params, 0.1);
  REQUIRE(groups.size() == 2);
  auto names = [](const ParamGroup& g) {
    std::vector<std::string> out;
    for (const NamedParameter& p : g.params) out.push_back(p.name);
    return out;
  };
  CHECK(groups[0].weight_decay == 0.1);
  CHECK(names(groups[0]) == std::vector<std::string>{"wte.weight", "h.0.attn.w_q.weight"});
  CHECK(groups[1].weight_decay == 0.0);
  CHECK(names(groups[1]) == std::vector<std::string>{"h.0.ln_1.weight", "h.0.attn.w_q.bias"});
  CHECK(groups[0].params[0].tensor.same(params[0].tensor));  // the module's tensor, not a copy
}

// --- state round trip --------------------------------------------------------------------------------

std::vector<double> grad_at(int step, int64_t n) {
  std::vector<double> g(n);
  for (int64_t i = 0; i < n; ++i) g[i] = std::sin(1.0 + 0.7 * i + 1.9 * step);
  return g;
}

// Runs 5 steps straight through, and 2 steps, a checkpoint (state() and the
// parameter values), a fresh optimizer that loads it, and 3 steps: the final
// parameters must agree bit for bit.
void check_resume(const std::function<std::unique_ptr<Optimizer>(std::vector<ParamGroup>)>& make,
                  const std::vector<std::string>& expected_names) {
  auto fresh_params = [](const std::vector<double>& w, const std::vector<double>& b) {
    return std::vector<NamedParameter>{{"w", param(w, {2, 2})}, {"b", param(b, {2})}};
  };
  auto run = [](Optimizer& opt, const std::vector<NamedParameter>& params, int from, int to) {
    for (int s = from; s < to; ++s) {
      for (const NamedParameter& p : params) set_grad(p.tensor, grad_at(s, p.tensor.numel()));
      opt.step();
    }
  };
  std::vector<NamedParameter> straight = fresh_params({0.5, -1.0, 1.5, -2.0}, {0.25, -0.75});
  std::unique_ptr<Optimizer> opt = make(decay_groups(straight, 0.1));
  run(*opt, straight, 0, 2);
  const NamedTensors saved = opt->state();
  std::vector<NamedParameter> resumed = fresh_params(straight[0].tensor.to_vector(), straight[1].tensor.to_vector());
  run(*opt, straight, 2, 5);  // must not disturb `saved`: state() is a snapshot

  std::vector<std::string> names;
  for (const auto& [name, t] : saved) names.push_back(name);
  CHECK(names == expected_names);

  std::unique_ptr<Optimizer> reloaded = make(decay_groups(resumed, 0.1));
  reloaded->load_state(saved);
  run(*reloaded, resumed, 2, 5);
  for (size_t i = 0; i < straight.size(); ++i) {
    INFO(straight[i].name);
    CHECK(resumed[i].tensor.to_vector() == straight[i].tensor.to_vector());
  }
}

TEST_CASE("optim: state() and load_state() resume exactly") {
  SUBCASE("AdamW") {
    check_resume([](std::vector<ParamGroup> g) { return std::make_unique<AdamW>(g, AdamOptions{.lr = 0.05}); },
                 {"exp_avg.w", "exp_avg_sq.w", "step.w", "exp_avg.b", "exp_avg_sq.b", "step.b"});
  }
  SUBCASE("SGD with momentum") {
    check_resume([](std::vector<ParamGroup> g) {
      return std::make_unique<SGD>(g, SgdOptions{.lr = 0.05, .momentum = 0.9, .nesterov = true});
    }, {"momentum.w", "momentum.b"});
  }
}

TEST_CASE("optim: load_state rejects state that does not fit") {
  Tensor w = param({1.0, 2.0}, {2});
  AdamW adamw({{"w", w}});
  const Tensor m = Tensor::zeros({2}, DType::Float64);
  const Tensor step = Tensor::from_indices({1}, {1});
  CHECK_THROWS_AS(adamw.load_state({{"exp_avg.nope", m}}), Error);                  // no such parameter
  CHECK_THROWS_AS(adamw.load_state({{"momentum.w", m}}), Error);                     // not Adam state
  CHECK_THROWS_AS(adamw.load_state({{"exp_avg.w", Tensor::zeros({3}, DType::Float64)},
                                    {"exp_avg_sq.w", m}, {"step.w", step}}), Error); // wrong shape
  CHECK_THROWS_AS(adamw.load_state({{"exp_avg.w", m}, {"step.w", step}}), Error);    // exp_avg_sq missing
  adamw.load_state({{"exp_avg.w", m}, {"exp_avg_sq.w", m}, {"step.w", step}});
  CHECK(adamw.state().size() == 3);

  // Issue 10: values a corrupt or diverged checkpoint holds, refused before anything is written.
  const auto with = [&](const Tensor& exp_avg, const Tensor& exp_avg_sq, const Tensor& saved_step) {
    return NamedTensors{{"exp_avg.w", exp_avg}, {"exp_avg_sq.w", exp_avg_sq}, {"step.w", saved_step}};
  };
  const Tensor nan = Tensor::from_vector({0.0, NAN}, {2}, DType::Float64);
  const Tensor negative = Tensor::from_vector({1.0, -1e-3}, {2}, DType::Float64);
  CHECK_THROWS_WITH_AS(adamw.load_state(with(nan, m, step)), doctest::Contains("'exp_avg.w' holds nan (must be finite)"),
                       Error);
  CHECK_THROWS_WITH_AS(adamw.load_state(with(m, nan, step)), doctest::Contains("'exp_avg_sq.w' holds nan"), Error);
  CHECK_THROWS_WITH_AS(adamw.load_state(with(m, negative, step)),
                       "adamw: load_state: 'exp_avg_sq.w' holds -0.001 (must be finite and >= 0)", Error);
  // Moments stored as I32 load widened to int64: refused, not reinterpreted as numbers.
  CHECK_THROWS_WITH_AS(adamw.load_state(with(m, Tensor::from_indices({1, 2}, {2}), step)),
                       doctest::Contains("'exp_avg_sq.w' is [2] int64, not a floating tensor"), Error);
  // A step count of INT64_MAX (or 1e300) once overflowed the float-to-int conversion of the bias correction.
  constexpr int64_t max = std::numeric_limits<int64_t>::max();
  CHECK_THROWS_WITH_AS(adamw.load_state(with(m, m, Tensor::from_indices({max}, {1}))),
                       "adamw: load_state: 'step.w' is 9223372036854775807, not a step count in [1, 2^53]", Error);
  CHECK_THROWS_WITH_AS(adamw.load_state(with(m, m, Tensor::from_indices({0}, {1}))), doctest::Contains("is 0, not a step count"),
                       Error);
  CHECK_THROWS_WITH_AS(adamw.load_state(with(m, m, Tensor::from_vector({1e300}, {1}, DType::Float64))),
                       doctest::Contains("not one int64"), Error);
  for (const NamedTensor& saved : adamw.state())  // the last good state, untouched
    if (saved.name != "step.w") CHECK(saved.tensor.to_vector() == m.to_vector());
}

// Each part of a compound check alone, the rest right: a check that lost the part would let the
// input through (a coverage build found each untested; docs/reliability.md, "Refusals no test made").
TEST_CASE("optim: options, parameters and saved state are refused each wrong part on its own") {
  Tensor w = param({1.0, 2.0}, {2});
  const char* betas = "betas must lie in [0, 1)";
  CHECK_THROWS_WITH_AS(AdamW({{"w", w}}, {.beta1 = -0.1}), doctest::Contains(betas), Error);
  CHECK_THROWS_WITH_AS(AdamW({{"w", w}}, {.beta1 = 1.0}), doctest::Contains(betas), Error);
  CHECK_THROWS_WITH_AS(AdamW({{"w", w}}, {.beta2 = -0.1}), doctest::Contains(betas), Error);
  CHECK_THROWS_WITH_AS(AdamW({{"w", w}}, {.beta2 = 1.0}), "adamw: betas must lie in [0, 1), got (0.9, 1)", Error);
  CHECK_THROWS_WITH_AS(SGD({{"w", w}}, {.momentum = -0.5}), "sgd: momentum must be >= 0, got -0.5", Error);
  CHECK_THROWS_WITH_AS(SGD({{"w", w}}, {.nesterov = true}), doctest::Contains("sgd: nesterov needs momentum > 0 and dampening 0"), Error);
  CHECK_THROWS_WITH_AS(SGD({{"w", w}}, {.momentum = 0.9, .dampening = 0.1, .nesterov = true}),
                       doctest::Contains("sgd: nesterov needs momentum > 0 and dampening 0, got momentum 0.9, dampening 0.1"), Error);
  // The parameters: a decay >= 0, each defined, floating and named once.
  CHECK_THROWS_WITH_AS(AdamW({ParamGroup{.params = {{"w", w}}, .weight_decay = -0.1}}), "adamw: weight_decay must be >= 0, got -0.1", Error);
  CHECK_THROWS_WITH_AS(AdamW({{"u", Tensor()}}), "adamw: parameter 'u' is undefined", Error);
  CHECK_THROWS_WITH_AS(AdamW({{"i", Tensor::from_indices({1}, {1})}}), "adamw: parameter 'i' is [1] int64, not floating", Error);
  CHECK_THROWS_WITH_AS(AdamW({{"w", w}, {"w", param({3.0}, {1})}}), "adamw: parameter name 'w' appears twice", Error);
  // The learning rate and the step's device scalars: one float64 each (numel, dtype alone).
  AdamW adamw({{"w", w}});
  CHECK_THROWS_WITH_AS(adamw.set_lr(-1e-3), "adamw: learning rate must be >= 0, got -0.001", Error);
  const char* lr_scalar = "is not one float64 on the parameters' device";
  CHECK_THROWS_WITH_AS(adamw.read_lr_from(Tensor::zeros({2}, DType::Float64)), doctest::Contains(lr_scalar), Error);
  CHECK_THROWS_WITH_AS(adamw.read_lr_from(Tensor::zeros({1}, DType::Float32)), doctest::Contains(lr_scalar), Error);
  w.set_grad(Tensor::zeros({2}, DType::Float64));
  CHECK_THROWS_WITH_AS(adamw.step(Tensor::zeros({2}, DType::Float64)), doctest::Contains("adamw: step: skip_unless_finite [2] float64"), Error);
  CHECK_THROWS_WITH_AS(adamw.step(Tensor::zeros({1}, DType::Float32)), doctest::Contains("adamw: step: skip_unless_finite [1] float32"), Error);
  // Saved state: names <kind>.<parameter>, floating tensors, one int64 step, every piece of every parameter.
  const Tensor m = Tensor::zeros({2}, DType::Float64), step = Tensor::from_indices({1}, {1});
  CHECK_THROWS_WITH_AS(adamw.load_state({{"exp_avg", m}}), "adamw: load_state: 'exp_avg' is not <kind>.<parameter name>", Error);
  CHECK_THROWS_WITH_AS(adamw.load_state({{"exp_avg.w", Tensor()}, {"exp_avg_sq.w", m}, {"step.w", step}}),
                       doctest::Contains("'exp_avg.w' is (undefined tensor), not a floating tensor"), Error);
  CHECK_THROWS_WITH_AS(adamw.load_state({{"exp_avg.w", m}, {"exp_avg_sq.w", m}, {"step.w", Tensor()}}),
                       doctest::Contains("'step.w' is (undefined tensor), not one int64"), Error);
  CHECK_THROWS_WITH_AS(adamw.load_state({{"exp_avg.w", m}, {"exp_avg_sq.w", m}, {"step.w", Tensor::from_indices({1, 1}, {2})}}),
                       doctest::Contains("'step.w' is [2] int64, not one int64"), Error);
  const char* lacks = "adamw: load_state: parameter 'w' lacks one of exp_avg, exp_avg_sq, step";
  CHECK_THROWS_WITH_AS(adamw.load_state({{"exp_avg_sq.w", m}, {"step.w", step}}), lacks, Error);
  CHECK_THROWS_WITH_AS(adamw.load_state({{"exp_avg.w", m}, {"exp_avg_sq.w", m}}), lacks, Error);
  Tensor b = param({0.5}, {1});
  AdamW two({{"w", w}, {"b", b}});
  const Tensor m1 = Tensor::zeros({1}, DType::Float64);
  CHECK_THROWS_WITH_AS(two.load_state({{"exp_avg.w", m}, {"exp_avg_sq.w", m}, {"step.w", step}, {"exp_avg.b", m1},
                                       {"exp_avg_sq.b", m1}, {"step.b", Tensor::from_indices({2}, {1})}}),
                       "adamw: load_state: parameter 'b' is at step 2, the others at 1 (all parameters step together)", Error);
  SGD plain({{"w", w}}, {.momentum = 0.0}), momentum({{"w", w}, {"b", b}}, {.momentum = 0.9});
  CHECK_THROWS_WITH_AS(momentum.load_state({{"velocity.w", m}}), "sgd: load_state: unknown state 'velocity.w'", Error);
  CHECK_THROWS_WITH_AS(plain.load_state({{"momentum.w", m}}), "sgd: load_state: 'momentum.w' given, but momentum is 0", Error);
  CHECK_THROWS_WITH_AS(momentum.load_state({{"momentum.w", m}}), "sgd: load_state: parameter 'b' has no momentum", Error);
  // The schedule: 0 <= warmup < decay (each alone).
  CHECK_THROWS_WITH_AS(warmup_cosine_lr(0, {.lr = 1e-3, .min_lr = 1e-4, .warmup_iters = -1, .decay_iters = 10}),
                       doctest::Contains("need 0 <= warmup_iters < decay_iters, got warmup_iters -1, decay_iters 10"), Error);
  CHECK_THROWS_WITH_AS(warmup_cosine_lr(0, {.lr = 1e-3, .min_lr = 1e-4, .warmup_iters = 10, .decay_iters = 10}),
                       doctest::Contains("got warmup_iters 10, decay_iters 10"), Error);
}

}  // namespace
}  // namespace ag::optim
