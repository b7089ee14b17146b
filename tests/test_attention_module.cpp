// MultiHeadSelfAttention and Block: gradcheck of the input and every parameter
// (every implementation, causal and not); dense and flash agree with the
// composed reference to 1e-10 in float64; causality bit for bit; the kept attention A; and the
// Block against PyTorch's numbers (tests/golden/block.safetensors, written by
// scripts/make_golden_block.py).
#include <cmath>

#include "core/safetensors.h"
#include "nn/gpt.h"
#include "tests/helpers.h"

// The file's names and using-directives stay its own in a unity build, where the test
// files compile as one translation unit (CMakeLists.txt).
namespace attention_module_test {

using namespace ag;
using namespace ag::nn;
using ag::test::random;

namespace {
using Inputs = std::vector<Tensor>;
constexpr int64_t B = 2, T = 5, C = 8, H = 2;
using ag::test::attention_impls;

// A float64 attention module with PyTorch-like random weights and biases.
std::shared_ptr<MultiHeadSelfAttention> make_attention(bool causal, AttentionImpl impl, uint64_t seed) {
  Generator gen(seed);
  auto attn = std::make_shared<MultiHeadSelfAttention>(AttentionConfig{.C = C, .H = H, .causal = causal}, SoftmaxOptions{.impl = impl}, &gen);
  attn->to(DType::Float64);
  return attn;
}

double max_abs(const Tensor& t) {
  double m = 0;
  for (double v : t.to_vector()) m = std::max(m, std::abs(v));
  return m;
}

// The output, then dL/dx and dL/d(each parameter), for L = sum(y * R).
std::vector<Tensor> output_and_gradients(MultiHeadSelfAttention& attn, Tensor x, const Tensor& R) {
  attn.zero_grad();
  x.zero_grad();
  const Tensor y = attn.forward(x);
  y.backward(R);
  std::vector<Tensor> out = {y.detach(), x.grad()};
  for (const Tensor& p : attn.parameters()) out.push_back(p.grad());
  return out;
}
}  // namespace

TEST_CASE("attention module: gradcheck of the input and every parameter, every impl, causal and not") {
  for (AttentionImpl impl : attention_impls()) {
    for (bool causal : {true, false}) {
      CAPTURE(name_of(impl));
      CAPTURE(causal);
      const auto attn = make_attention(causal, impl, 1);
      ag::test::check_module_gradients(*attn, random({B, T, C}, 2), [&](const Tensor& x) { return attn->forward(x); });
    }
  }
}

TEST_CASE("attention module: dense and flash agree with composed in the output and every gradient") {
  for (bool causal : {true, false}) {
    CAPTURE(causal);
    const auto attn = make_attention(causal, AttentionImpl::Composed, 3);
    const Tensor x = random({B, T, C}, 4), R = random({B, T, C}, 5, DType::Float64, false);
    const std::vector<Tensor> composed = output_and_gradients(*attn, x, R);
    const std::vector<NamedTensor> parameters = attn->named_parameters();
    for (AttentionImpl impl : {AttentionImpl::Dense, AttentionImpl::Flash}) {
      CAPTURE(name_of(impl));
      attn->set_impl(impl);
      const std::vector<Tensor> other = output_and_gradients(*attn, x, R);
      const auto name_of = [&](size_t i) { return i == 0 ? "output" : i == 1 ? "dX" : parameters[i - 2].name; };
      const auto gradient_of = [&](const std::string& name) {
        for (size_t i = 2; i < other.size(); ++i)
          if (name_of(i) == name) return other[i];
        return Tensor();
      };
      for (size_t i = 0; i < composed.size(); ++i) {
        CAPTURE(name_of(i));
        if (name_of(i) == "w_k.bias")  // exactly 0 in theory: both sides are rounding noise (see below)
          CHECK(max_abs(other[i]) <= 1e-12 * max_abs(gradient_of("w_k.weight")));
        else
          CHECK_CLOSE(other[i], composed[i], 1e-10);
      }
    }
  }
}

TEST_CASE("attention module: perturbing token t changes no output before t, bit for bit") {
  for (AttentionImpl impl : attention_impls()) {
    CAPTURE(name_of(impl));
    const auto attn = make_attention(true, impl, 6);
    const Tensor x = random({B, T, C}, 7, DType::Float64, false);
    const std::vector<double> before = attn->forward(x).to_vector();
    for (int64_t t = 0; t < T; ++t) {
      CAPTURE(t);
      const Tensor perturbed = x.clone();
      for (int64_t b = 0; b < B; ++b)
        for (int64_t c = 0; c < C; ++c) perturbed.data<double>()[(b * T + t) * C + c] += 0.5;
      const std::vector<double> after = attn->forward(perturbed).to_vector();
      for (int64_t b = 0; b < B; ++b) {
        const auto row = [&](const std::vector<double>& v, int64_t i) { return v.begin() + (b * T + i) * C; };
        CHECK(std::equal(row(before, 0), row(before, t), row(after, 0)));       // positions < t: identical
        CHECK_FALSE(std::equal(row(before, t), row(before, T), row(after, t)));  // positions >= t: changed
      }
    }
  }
}

TEST_CASE("attention module: a probe sees A [B, H, T, T] for every head, every impl") {
  const auto attn = make_attention(true, AttentionImpl::Composed, 8);
  const Tensor x = random({B, T, C}, 9, DType::Float64, false);
  int64_t records = 0;
  nn::MixerRecord last;
  attn->set_probe([&records, &last](const nn::MixerRecord& r) { ++records, last = r; });
  attn->forward(x);
  REQUIRE(records == 1);
  const Tensor composed = last.weights;
  CHECK(last.queries.shape() == Shape{B, T, H, C / H});
  CHECK(last.keys.shape() == Shape{B, T, H, C / H});
  CHECK(last.values.shape() == Shape{B, T, H, C / H});
  CHECK_FALSE(last.decays.defined());  // ssd's alone
  for (AttentionImpl impl : {AttentionImpl::Dense, AttentionImpl::Flash}) {
    CAPTURE(name_of(impl));
    attn->set_impl(impl);
    attn->forward(x);
    const Tensor kept = last.weights;
    CHECK(kept.shape() == Shape{B, H, T, T});
    CHECK_FALSE(kept.requires_grad());
    CHECK_CLOSE(kept, composed, 1e-12);
  }

  const std::vector<double> A = composed.to_vector();
  for (int64_t row = 0; row < B * H * T; ++row) {
    const int64_t i = row % T;
    double total = 0;
    for (int64_t j = 0; j < T; ++j) {
      const double a = A[row * T + j];
      total += a;
      if (j > i) CHECK(a == 0.0);  // masked: exactly 0, not tiny
    }
    CHECK(total == doctest::Approx(1.0).epsilon(1e-12));
  }
  attn->set_probe({});
  attn->forward(x);
  CHECK(records == 3);  // removed: no more records
}

// b_K adds the same q_i·b_K/√d_h to every score S_ij of row i, and softmax is
// shift-invariant per row: the key bias cannot change the output. In the
// backward, each row of dS sums to 0, so dL/db_K = Σ_i (Σ_j dS_ij) q_i/√d_h = 0.
TEST_CASE("attention module: the key bias gets no gradient (softmax is shift-invariant)") {
  for (AttentionImpl impl : attention_impls()) {
    CAPTURE(name_of(impl));
    const auto attn = make_attention(true, impl, 12);
    const Tensor x = random({B, T, C}, 13), R = random({B, T, C}, 14, DType::Float64, false);
    output_and_gradients(*attn, x, R);
    Tensor dW_K, db_K;
    for (const NamedTensor& p : attn->named_parameters()) {
      if (p.name == "w_k.weight") dW_K = p.tensor.grad();
      if (p.name == "w_k.bias") db_K = p.tensor.grad();
    }
    CHECK(max_abs(db_K) <= 1e-12 * max_abs(dW_K));  // rounding only
  }
}

TEST_CASE("attention module: C must be a multiple of H") {
  CHECK_THROWS_WITH_AS(MultiHeadSelfAttention({.C = 10, .H = 4}), doctest::Contains("C = 10 is not a multiple of H = 4"),
                       Error);
}

TEST_CASE("attention module: gradcheck of a Block, input and every parameter") {
  for (AttentionImpl impl : attention_impls()) {
    CAPTURE(name_of(impl));
    Generator gen(10);
    Block block(std::make_shared<MultiHeadSelfAttention>(AttentionConfig{.C = C, .H = H}, SoftmaxOptions{.impl = impl}, &gen),
                {.C = C, .gelu = GeluApprox::Erf}, &gen);
    block.to(DType::Float64);
    ag::test::check_module_gradients(block, random({B, T, C}, 11), [&](const Tensor& x) { return block.forward(x); });
  }
}

// The Block with PyTorch's weights gives PyTorch's output and gradients:
// ≤ 1e-10 in float64, ≤ 1e-5 in float32 (normwise relative).
TEST_CASE("attention module: Block matches PyTorch (golden file)") {
  const SafetensorsFile golden = load_safetensors(ATTOGRAD_SOURCE_DIR "/tests/golden/block.safetensors");
  const int64_t golden_C = golden.at("x").size(2), golden_H = 4;  // as in the script
  for (AttentionImpl impl : attention_impls()) {
    for (DType dtype : {DType::Float64, DType::Float32}) {
      CAPTURE(name_of(impl));
      CAPTURE(dtype);
      const double tolerance = dtype == DType::Float64 ? 1e-10 : 1e-5;
      Generator gen(15);
      Block block(std::make_shared<MultiHeadSelfAttention>(AttentionConfig{.C = golden_C, .H = golden_H},
                                                           SoftmaxOptions{.impl = impl}, &gen),
                  {.C = golden_C, .gelu = GeluApprox::Erf}, &gen);
      block.to(dtype);
      std::vector<NamedTensor> state;
      for (const NamedTensor& p : block.named_parameters())
        state.push_back({p.name, golden.at(p.name).to(dtype)});
      block.load_state(state);

      Tensor x = golden.at("x").to(dtype).clone();
      x.requires_grad_();
      const Tensor out = block.forward(x);
      sum(out * golden.at("R").to(dtype)).backward();

      CHECK_CLOSE(out, golden.at("out"), tolerance);
      CHECK_CLOSE(x.grad(), golden.at("grad.x"), tolerance);
      for (const NamedTensor& p : block.named_parameters()) {
        CAPTURE(p.name);
        if (p.name == "attn.w_k.bias")  // exactly 0 in theory: both sides are rounding noise
          CHECK(max_abs(p.tensor.grad()) <= tolerance * max_abs(golden.at("grad.attn.w_k.weight")));
        else
          CHECK_CLOSE(p.tensor.grad(), golden.at("grad." + p.name), tolerance);
      }
    }
  }
}

}  // namespace attention_module_test
