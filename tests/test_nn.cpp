// nn::Module and the layers: hierarchical names, load_state and its errors,
// conversions, modes; gradchecks of Linear, LayerNorm, Embedding and MLP; the
// GPT's parameter names and count, tied head, initialisation, loss at init,
// and a gradcheck of its loss over every parameter.
#include <algorithm>
#include <cmath>

#include "core/autograd.h"
#include "nn/gpt.h"
#include "nn/s4.h"
#include "nn/ssd.h"
#include "tests/helpers.h"

// The file's names and using-directives stay its own in a unity build, where the test
// files compile as one translation unit (CMakeLists.txt).
namespace nn_test {

using namespace ag;
using namespace ag::nn;
using ag::test::random;

namespace {
using Inputs = std::vector<Tensor>;

std::vector<std::string> names_of(const Module& m) {
  std::vector<std::string> names;
  for (const NamedTensor& p : m.named_parameters()) names.push_back(p.name);
  return names;
}

Tensor random_tokens(const Shape& shape, int64_t V, uint64_t seed) {
  Generator gen(seed);
  std::vector<int64_t> t(numel(shape));
  for (int64_t& v : t) v = static_cast<int64_t>(gen.integer(V));
  return Tensor::from_indices(t, shape);
}

// Mean and standard deviation of a tensor's elements.
std::pair<double, double> moments(const Tensor& t) {
  const std::vector<double> v = t.to_vector();
  double mean = 0, var = 0;
  for (double x : v) mean += x / v.size();
  for (double x : v) var += (x - mean) * (x - mean) / v.size();
  return {mean, std::sqrt(var)};
}

GPTConfig tiny_config() {
  return {.vocab_size = 11, .block_size = 6, .n_layer = 2, .n_head = 2, .n_embd = 8};
}

// A module that registers one tensor under two names: it must be listed once.
struct TiedPair : Module {
  TiedPair() {
    const Tensor shared = Tensor::ones({2, 3});
    register_parameter("first", shared);
    register_parameter("second", shared);
    register_parameter("other", Tensor::zeros({4}));
  }
};
}  // namespace

TEST_CASE("nn: Linear computes xW + b with W stored [in, out]") {
  Generator gen(1);
  Linear linear({.in = 3, .out = 4}, &gen);
  CHECK(names_of(linear) == std::vector<std::string>{"weight", "bias"});
  CHECK(linear.weight().shape() == Shape{3, 4});
  CHECK(linear.weight().requires_grad());
  const Tensor x = random({2, 5, 3}, 2, DType::Float32, false);
  const Tensor expected = matmul(x, linear.weight()) + linear.bias();
  CHECK_CLOSE(linear.forward(x), expected, 1e-6);
  CHECK(names_of(Linear({.in = 3, .out = 4, .bias = false}, &gen)) == std::vector<std::string>{"weight"});
  CHECK_THROWS_AS(linear.forward(random({2, 4}, 3, DType::Float32, false)), Error);
}

TEST_CASE("nn: gradcheck of Linear, LayerNorm, Embedding and MLP") {
  Generator gen(3);
  SUBCASE("Linear") {
    Linear linear({.in = 4, .out = 3}, &gen);
    ag::test::check_module_gradients(linear, random({2, 3, 4}, 4), [&](const Tensor& x) { return linear.forward(x); });
  }
  SUBCASE("LayerNorm") {
    LayerNorm ln(5);
    ag::test::check_module_gradients(ln, random({3, 5}, 5), [&](const Tensor& x) { return ln.forward(x); });
  }
  SUBCASE("Embedding") {
    Embedding emb(5, 3, &gen);
    const Tensor idx = Tensor::from_indices({0, 4, 4, 2}, {2, 2});  // a repeated row sums its gradients
    ag::test::check_module_gradients(emb, Tensor(), [&](const Tensor&) { return emb.forward(idx); });
  }
  SUBCASE("MLP, both GELUs") {
    for (GeluApprox approx : {GeluApprox::Erf, GeluApprox::Tanh}) {
      MLP mlp({.C = 4, .gelu = approx}, &gen);
      CHECK(names_of(mlp) == std::vector<std::string>{"fc.weight", "fc.bias", "proj.weight", "proj.bias"});
      ag::test::check_module_gradients(mlp, random({2, 3, 4}, 6), [&](const Tensor& x) { return mlp.forward(x); });
    }
  }
}

TEST_CASE("nn: Dropout is the identity in eval mode, and train/eval reach every submodule") {
  GPTConfig config = tiny_config();
  config.dropout = 0.5;
  Generator gen(7);
  GPT gpt(config, gen);
  CHECK(gpt.block(1).attn().is_training());
  gpt.eval();
  CHECK_FALSE(gpt.is_training());
  CHECK_FALSE(gpt.block(1).attn().is_training());
  const Tensor idx = random_tokens({2, 6}, config.vocab_size, 8);
  const std::vector<double> a = gpt.forward(idx).to_vector(), b = gpt.forward(idx).to_vector();
  CHECK(a == b);
  gpt.train();
  CHECK(gpt.block(1).attn().is_training());

  Dropout dropout(0.5);
  const Tensor x = Tensor::ones({1000});
  const std::vector<double> y = dropout.forward(x).to_vector();
  CHECK(std::count(y.begin(), y.end(), 0.0) > 300);
  CHECK(std::count(y.begin(), y.end(), 2.0) > 300);
  dropout.eval();
  CHECK(dropout.forward(x).to_vector() == x.to_vector());
}

TEST_CASE("nn: hierarchical names of a Block, in registration order") {
  Block block(std::make_shared<MultiHeadSelfAttention>(AttentionConfig{.C = 8, .H = 2}), {.C = 8, .gelu = GeluApprox::Erf});
  CHECK(names_of(block) ==
        std::vector<std::string>{"ln1.weight",        "ln1.bias",        "attn.w_q.weight", "attn.w_q.bias",
                                 "attn.w_k.weight",   "attn.w_k.bias",   "attn.w_v.weight", "attn.w_v.bias",
                                 "attn.w_o.weight",   "attn.w_o.bias",   "ln2.weight",      "ln2.bias",
                                 "mlp.fc.weight",     "mlp.fc.bias",     "mlp.proj.weight", "mlp.proj.bias"});
  for (const Tensor& p : block.parameters()) CHECK(p.requires_grad());
}

TEST_CASE("nn: a tensor registered twice is listed and counted once") {
  TiedPair m;
  CHECK(names_of(m) == std::vector<std::string>{"first", "other"});
  CHECK(m.num_parameters() == 10);
}

TEST_CASE("nn: load_state copies into the existing storages") {
  Generator gen(9);
  Linear source({.in = 3, .out = 2}, &gen), target({.in = 3, .out = 2}, &gen);
  const Tensor held = target.weight();  // as an optimizer holds it
  target.load_state(source.state());
  CHECK(held.same(target.weight()));
  CHECK(held.to_vector() == source.weight().to_vector());
  CHECK(target.bias().to_vector() == source.bias().to_vector());
}

TEST_CASE("nn: load_state errors name the parameter") {
  Generator gen(10);
  Linear linear({.in = 3, .out = 2}, &gen);
  const Tensor w = Tensor::zeros({3, 2}), b = Tensor::zeros({2});
  CHECK_THROWS_WITH_AS(linear.load_state({{"weight", w}}), doctest::Contains("'bias' is missing"), Error);
  CHECK_THROWS_WITH_AS(linear.load_state({{"weight", Tensor::zeros({2, 3})}, {"bias", b}}),
                       doctest::Contains("'weight' is [3,2] float32 but the state holds [2,3] float32"),
                       Error);
  CHECK_THROWS_WITH_AS(linear.load_state({{"weight", w}, {"bias", b.to(DType::Float64)}}),
                       doctest::Contains("'bias' is [2] float32 but the state holds [2] float64"), Error);
  CHECK_THROWS_WITH_AS(linear.load_state({{"weight", w}, {"bias", b}, {"scale", b}}),
                       doctest::Contains("'scale'"), Error);
  linear.load_state({{"weight", w}, {"bias", b}});
  CHECK(linear.weight().to_vector() == w.to_vector());
}

TEST_CASE("nn: to(DType) converts every parameter in place and drops gradients") {
  Generator gen(11);
  MLP mlp({.C = 4, .gelu = GeluApprox::Erf}, &gen);
  const std::vector<Tensor> before = mlp.parameters();
  const std::vector<double> values = before[0].to_vector();
  sum(mlp.forward(random({2, 4}, 12, DType::Float32, false))).backward();
  CHECK(before[0].grad().defined());
  mlp.to(DType::Float64);
  const std::vector<Tensor> after = mlp.parameters();
  for (size_t i = 0; i < after.size(); ++i) {
    CHECK(after[i].same(before[i]));
    CHECK(after[i].dtype() == DType::Float64);
    CHECK(after[i].requires_grad());
    CHECK_FALSE(after[i].grad().defined());
  }
  CHECK(after[0].to_vector() == values);  // float32 -> float64 is exact
  CHECK(mlp.forward(random({2, 4}, 12)).dtype() == DType::Float64);
}

TEST_CASE("nn: zero_grad clears every gradient") {
  Generator gen(13);
  Linear linear({.in = 3, .out = 2}, &gen);
  sum(linear.forward(random({4, 3}, 14, DType::Float32, false))).backward();
  CHECK(linear.weight().grad().defined());
  linear.zero_grad();
  for (const Tensor& p : linear.parameters()) CHECK_FALSE(p.grad().defined());
}

TEST_CASE("nn: GPT parameter names and count") {
  const GPTConfig config = tiny_config();
  Generator gen(15);
  GPT gpt(config, gen);
  std::vector<std::string> expected = {"tok_emb.weight", "pos_emb.weight"};
  for (int i = 0; i < 2; ++i) {
    const std::string b = "blocks." + std::to_string(i) + ".";
    for (const char* name : {"ln1.weight", "ln1.bias", "attn.w_q.weight", "attn.w_q.bias", "attn.w_k.weight",
                             "attn.w_k.bias", "attn.w_v.weight", "attn.w_v.bias", "attn.w_o.weight",
                             "attn.w_o.bias", "ln2.weight", "ln2.bias", "mlp.fc.weight", "mlp.fc.bias",
                             "mlp.proj.weight", "mlp.proj.bias"})
      expected.push_back(b + name);
  }
  expected.push_back("ln_f.weight");
  expected.push_back("ln_f.bias");
  CHECK(names_of(gpt) == expected);

  const int64_t V = 11, T = 6, C = 8, N = 2;
  const int64_t per_block = 2 * C + 4 * (C * C + C) + 2 * C + (C * 4 * C + 4 * C) + (4 * C * C + C);
  CHECK(gpt.num_parameters() == V * C + T * C + N * per_block + 2 * C);
}

TEST_CASE("nn: a GPT's forward hands each activation to the hook, in order, named by its module's parameter prefix") {
  const GPTConfig config = tiny_config();
  Generator gen(15);
  GPT gpt(config, gen);
  gpt.eval();
  std::vector<std::string> seen;
  std::vector<Tensor> values;
  gpt.set_activation_hook([&](const std::string& name, const Tensor& activation) {
    seen.push_back(name);
    values.push_back(activation);
  });
  std::vector<std::string> expected = {"tok_emb", "pos_emb"};
  for (const char* block : {"blocks.0", "blocks.1"})
    for (const char* part : {".ln1", ".attn", ".ln2", ".mlp", ""}) expected.push_back(block + std::string(part));
  expected.push_back("ln_f");
  expected.push_back("logits");
  const Tensor idx = random_tokens({2, 5}, config.vocab_size, 3);
  const Tensor logits = gpt.forward(idx);
  CHECK(seen == expected);
  CHECK(values.back().shape() == logits.shape());
  CHECK(values.back().to_vector() == logits.to_vector());  // the tensors themselves
  // Every name but the logits is the prefix of the parameters that computed it: what a checkpoint calls them.
  for (const std::string& name : seen) {
    CAPTURE(name);
    const std::vector<std::string> names = names_of(gpt);
    CHECK((name == "logits" ||
           std::any_of(names.begin(), names.end(), [&](const std::string& p) { return p.starts_with(name + "."); })));
  }

  // Generation through a KV cache names the same activations, and loss() those of forward().
  seen.clear();
  {
    NoGradGuard no_grad;
    KVCache cache = gpt.make_kv_cache(2);
    gpt.forward_cached(idx, cache);
  }
  CHECK(seen == expected);
  seen.clear();
  gpt.loss(idx, idx);
  CHECK(seen == expected);

  // Removed, it sees nothing; and the forward is the same with or without it.
  seen.clear();
  gpt.set_activation_hook({});
  CHECK(gpt.forward(idx).to_vector() == logits.to_vector());
  CHECK(seen.empty());
}

TEST_CASE("nn: GPT output head is tied to tok_emb (one parameter, both gradients)") {
  const GPTConfig config = tiny_config();
  Generator gen(16);
  GPT gpt(config, gen);
  // Tokens 0..4 only: rows 5..10 of tok_emb.weight get gradient from the head alone.
  const Tensor idx = Tensor::from_indices({0, 1, 2, 3, 4, 0}, {1, 6});
  gpt.loss(idx, Tensor::from_indices({1, 2, 3, 4, 0, 1}, {1, 6})).backward();
  const Tensor grad = gpt.named_parameters()[0].tensor.grad();
  const std::vector<double> g = grad.to_vector();
  bool unused_rows_have_gradient = true;
  for (int64_t row = 5; row < config.vocab_size; ++row) {
    double norm = 0;
    for (int64_t c = 0; c < config.n_embd; ++c) norm += std::abs(g[row * config.n_embd + c]);
    unused_rows_have_gradient = unused_rows_have_gradient && norm > 0;
  }
  CHECK(unused_rows_have_gradient);
  for (const NamedTensor& p : gpt.named_parameters()) CHECK(p.name.find("head") == std::string::npos);
}

TEST_CASE("nn: GPT loss with ignored targets: the head at the scored positions alone gives the full head's loss and gradients") {
  Generator gen(30);
  GPT gpt(tiny_config(), gen);
  gpt.to(DType::Float64);
  const Tensor idx = random_tokens({2, 6}, 11, 31);
  std::vector<int64_t> t = random_tokens({2, 6}, 11, 32).to_indices();
  for (const size_t ignored : {0, 3, 4, 8, 11}) t[ignored] = -100;
  const Tensor targets = Tensor::from_indices(t, {2, 6});
  for (const Reduction reduction : {Reduction::Mean, Reduction::Sum}) {
    // The loss of every position's logits, as forward() gives them.
    gpt.zero_grad();
    const Tensor full = cross_entropy(gpt.forward(idx).reshape({-1, 11}), targets.reshape({-1}), -100, reduction);
    full.backward();
    std::vector<Tensor> full_grads;
    for (const NamedTensor& p : gpt.named_parameters()) full_grads.push_back(p.tensor.grad().clone());
    gpt.zero_grad();
    const Tensor scored = gpt.loss(idx, targets, reduction);
    scored.backward();
    CHECK(scored.item() == doctest::Approx(full.item()).epsilon(1e-12));
    // Handed the targets as read on the host (a training step's), the loss reads nothing and is the same.
    CHECK(gpt.loss(idx, targets, reduction, -100, t).item() == scored.item());
    // Normwise over the whole gradient: w_k.bias's is zero exactly (softmax ignores
    // a shift shared by every key), so both computations leave only rounding there.
    double scale = 0;
    for (const Tensor& g : full_grads) scale = std::max(scale, ag::test::max_abs_error(g, Tensor::zeros(g.shape(), g.dtype())));
    const std::vector<NamedTensor> params = gpt.named_parameters();
    for (size_t i = 0; i < params.size(); ++i) {
      CAPTURE(params[i].name);
      CHECK(ag::test::max_abs_error(params[i].tensor.grad(), full_grads[i]) <= 1e-12 * scale);
    }
  }
}

TEST_CASE("nn: GPT initialisation statistics") {
  const GPTConfig config{.vocab_size = 256, .block_size = 64, .n_layer = 8, .n_head = 4, .n_embd = 64};
  Generator gen(17);
  GPT gpt(config, gen);
  const double residual_std = 0.02 / std::sqrt(2.0 * 8);
  for (const NamedTensor& p : gpt.named_parameters()) {
    CAPTURE(p.name);
    const auto [mean, sd] = moments(p.tensor);
    const bool layer_norm = p.name.find("ln") != std::string::npos;
    if (layer_norm && p.name.ends_with("weight")) {
      CHECK(mean == 1.0);
      CHECK(sd == 0.0);
    } else if (p.name.ends_with("bias")) {
      CHECK(mean == 0.0);
      CHECK(sd == 0.0);
    } else {
      const bool residual = p.name.ends_with("w_o.weight") || p.name.ends_with("proj.weight");
      const double expected = residual ? residual_std : 0.02;
      CHECK(std::abs(mean) < 0.2 * expected);
      CHECK(sd == doctest::Approx(expected).epsilon(0.1));
    }
  }
}

TEST_CASE("nn: GPT loss at init is close to ln(V)") {
  const GPTConfig config{.vocab_size = 64, .block_size = 16, .n_layer = 2, .n_head = 4, .n_embd = 32};
  Generator gen(18);
  GPT gpt(config, gen);
  const double loss = gpt.loss(random_tokens({4, 16}, 64, 19), random_tokens({4, 16}, 64, 20)).item();
  CHECK(loss == doctest::Approx(std::log(64.0)).epsilon(0.02));
}

TEST_CASE("nn: GPT forward shapes and the block_size check") {
  const GPTConfig config = tiny_config();
  Generator gen(21);
  GPT gpt(config, gen);
  CHECK(gpt.forward(random_tokens({3, 6}, 11, 22)).shape() == Shape{3, 6, 11});
  CHECK(gpt.forward(random_tokens({1, 1}, 11, 23)).shape() == Shape{1, 1, 11});
  CHECK_THROWS_WITH_AS(gpt.forward(random_tokens({1, 7}, 11, 24)), doctest::Contains("block_size = 6"),
                       Error);
}

TEST_CASE("nn: GPT gradcheck of the loss over every parameter, every attention impl") {
  for (AttentionImpl impl : ag::test::attention_impls()) {
    GPTConfig config{.vocab_size = 7, .block_size = 4, .n_layer = 1, .n_head = 2, .n_embd = 4};
    config.attn_impl = impl;
    Generator gen(25);
    GPT gpt(config, gen);
    // Weights of scale 0.5 instead of 0.02: the attention is then far from
    // uniform, and no parameter's gradient is so small that rounding dominates.
    std::vector<NamedTensor> state = gpt.state();
    for (NamedTensor& p : state) p.tensor = Tensor::randn(p.tensor.shape(), DType::Float32, &gen, 0.0, 0.5);
    gpt.load_state(state);
    const Tensor idx = random_tokens({2, 4}, 7, 26), targets = random_tokens({2, 4}, 7, 27);
    ag::test::check_module_gradients(gpt, Tensor(), [&](const Tensor&) { return gpt.loss(idx, targets); });
  }
}

TEST_CASE("nn: GPT causality: changing token t leaves the logits before t bit for bit") {
  const GPTConfig config = tiny_config();
  Generator gen(28);
  GPT gpt(config, gen);
  gpt.to(DType::Float64);
  std::vector<int64_t> tokens = random_tokens({1, 6}, 11, 29).to_indices();
  const std::vector<double> before = gpt.forward(Tensor::from_indices(tokens, {1, 6})).to_vector();
  const int64_t t = 3, V = config.vocab_size;
  tokens[t] = (tokens[t] + 1) % V;
  const std::vector<double> after = gpt.forward(Tensor::from_indices(tokens, {1, 6})).to_vector();
  CHECK(std::equal(before.begin(), before.begin() + t * V, after.begin()));
  CHECK_FALSE(std::equal(before.begin() + t * V, before.end(), after.begin() + t * V));
}

TEST_CASE("nn: to(Device) moves every parameter in place") {
  if (!ag::test::cuda_or_skip()) return;
  Generator gen(30);
  Linear linear({.in = 3, .out = 2}, &gen);
  const Tensor held = linear.weight();
  const std::vector<double> values = held.to_vector();
  linear.to(Device::CUDA);
  CHECK(held.device() == Device::CUDA);
  CHECK(linear.bias().device() == Device::CUDA);
  linear.to(Device::CPU);
  CHECK(held.device() == Device::CPU);
  CHECK(held.to_vector() == values);
}

// Each part of a compound check alone, the rest right: a check that lost the part would let the
// input through (a coverage build found each untested; docs/reliability.md, "Refusals no test made").
TEST_CASE("nn: modules refuse each wrong part of their configuration and input on its own") {
  // Names: non-empty, no dots, not taken by a parameter or a child (each alone).
  struct Named : Module {
    void parameter(const std::string& name) { register_parameter(name, Tensor::zeros({1})); }
    void child(const std::string& name) { register_module(name, std::make_shared<Named>()); }
  };
  Named m;
  m.parameter("p");
  m.child("c");
  CHECK_THROWS_WITH_AS(m.parameter(""), "register_parameter: invalid name '' (non-empty, no dots)", Error);
  CHECK_THROWS_WITH_AS(m.parameter("a.b"), "register_parameter: invalid name 'a.b' (non-empty, no dots)", Error);
  CHECK_THROWS_WITH_AS(m.parameter("p"), "register_parameter: name 'p' is already taken", Error);
  CHECK_THROWS_WITH_AS(m.parameter("c"), "register_parameter: name 'c' is already taken", Error);
  CHECK_THROWS_WITH_AS(m.child(""), "register_module: empty name", Error);
  CHECK_THROWS_WITH_AS(m.child("p"), "register_module: name 'p' is already taken", Error);
  CHECK_THROWS_WITH_AS(m.child("c"), "register_module: name 'c' is already taken", Error);

  // Attention's heads: H > 0, C > 0, H | C; H_kv > 0, H_kv | H.
  Generator gen(3);
  CHECK_THROWS_WITH_AS(MultiHeadSelfAttention({.C = 8, .H = 0}, {}, &gen), doctest::Contains("C = 8 is not a multiple of H = 0"), Error);
  CHECK_THROWS_WITH_AS(MultiHeadSelfAttention({.C = 0, .H = 2}, {}, &gen), doctest::Contains("C = 0 is not a multiple of H = 2"), Error);
  CHECK_THROWS_WITH_AS(MultiHeadSelfAttention({.C = 8, .H = 4, .H_kv = -1}, {}, &gen),
                       doctest::Contains("H = 4 is not a multiple of H_kv = -1"), Error);
  CHECK_THROWS_WITH_AS(MultiHeadSelfAttention({.C = 8, .H = 4, .H_kv = 3}, {}, &gen),
                       doctest::Contains("H = 4 is not a multiple of H_kv = 3"), Error);
  MultiHeadSelfAttention attn({.C = 8, .H = 2}, {}, &gen);
  CHECK_THROWS_WITH_AS(attn.forward(Tensor::zeros({5, 8})), doctest::Contains("input [5,8] float32 is not [B, T, 8]"), Error);
  CHECK_THROWS_WITH_AS(attn.forward(Tensor::zeros({1, 5, 6})), doctest::Contains("input [1,5,6] float32 is not [B, T, 8]"), Error);
  CHECK_THROWS_WITH_AS(attn.set_head_gates(Tensor::ones({3})), doctest::Contains("head gates [3] float32 are not [H = 2]"), Error);
  const Linear linear({.in = 4, .out = 2}, &gen);
  CHECK_THROWS_WITH_AS(linear.forward(Tensor::scalar(1.0)), doctest::Contains("Linear: input [] float32 does not end in 4 features"), Error);
  CHECK_THROWS_WITH_AS(CausalConv1d({.channels = 4, .width = 0}, &gen), doctest::Contains("width 0 and channels 4 must be positive"), Error);
  CHECK_THROWS_WITH_AS(CausalConv1d({.channels = 0, .width = 2}, &gen), doctest::Contains("width 2 and channels 0 must be positive"), Error);
  CHECK_THROWS_WITH_AS(SsdSelfAttention({.C = 8, .H = 2}, {.conv = -1}, &gen), doctest::Contains("ssd_conv -1 must be >= 0 (0: no convolution)"), Error);
  CHECK_THROWS_WITH_AS(S4Mixer({.C = 0}, &gen), "S4Mixer: the channel count C must be >= 1, got 0", Error);

  // A KV cache: every size positive; truncation within what it holds, never of a rolled or recurrent one.
  CHECK_THROWS_WITH_AS(KVCache({.layers = 0}), doctest::Contains("every size must be positive (layers 0, batch 1, capacity 1)"), Error);
  CHECK_THROWS_WITH_AS(KVCache({.batch = 0}), doctest::Contains("(layers 1, batch 0, capacity 1)"), Error);
  CHECK_THROWS_WITH_AS(KVCache({.capacity = 0}), doctest::Contains("(layers 1, batch 1, capacity 0)"), Error);
  KVCache cache({.layers = 2, .capacity = 8});
  CHECK_THROWS_WITH_AS(cache.truncate(-1), doctest::Contains("cannot truncate 0 positions to -1"), Error);
  cache.layer(1).rolled = 1;
  CHECK_THROWS_WITH_AS(cache.truncate(0), doctest::Contains("only keys and values that have not rolled can be truncated"), Error);
  cache.layer(1).rolled = 0;
  cache.layer(0).state = Tensor::zeros({1});
  CHECK_THROWS_WITH_AS(cache.truncate(0), doctest::Contains("only keys and values that have not rolled can be truncated"), Error);
}

TEST_CASE("nn: a GPT refuses each wrong part of its inputs on its own") {
  const GPTConfig config = tiny_config();  // V 11, T 6, 2 layers, 2 heads, width 8
  Generator gen(21);
  GPT gpt(config, gen);
  const Tensor idx = random_tokens({2, 4}, 11, 22);
  CHECK_THROWS_WITH_AS(gpt.forward(Tensor::from_indices({1, 2}, {2})), doctest::Contains("GPT: idx [2] int64 is not int64 [B, T]"), Error);
  CHECK_THROWS_WITH_AS(gpt.forward(Tensor::zeros({2, 4})), doctest::Contains("GPT: idx [2,4] float32 is not int64 [B, T]"), Error);
  CHECK_THROWS_WITH_AS(gpt.forward_embedded(Tensor::zeros({4, 8})), doctest::Contains("are not [B, T, C = 8]"), Error);
  CHECK_THROWS_WITH_AS(gpt.forward_embedded(Tensor::zeros({2, 4, 6})), doctest::Contains("are not [B, T, C = 8]"), Error);
  CHECK_THROWS_WITH_AS(gpt.forward_embedded(Tensor::zeros({2, 0, 8})), doctest::Contains("sequence length T = 0 is outside [1, block_size = 6]"), Error);
  CHECK_THROWS_WITH_AS(gpt.loss(idx, random_tokens({2, 3}, 11, 23)), doctest::Contains("differ in shape"), Error);
  const std::vector<int64_t> seven(7, 1);
  CHECK_THROWS_WITH_AS(gpt.loss(idx, idx, Reduction::Mean, -100, seven),
                       doctest::Contains("GPT::loss: 7 targets read on the host for targets [2,4] int64"), Error);
  // Packed documents: softmax only, int64 [B, T], the input's B and T (each alone).
  CHECK_THROWS_WITH_AS(gpt.set_documents(Tensor::zeros({2, 4})), doctest::Contains("GPT: document ids [2,4] float32 are not int64 [B, T]"), Error);
  CHECK_THROWS_WITH_AS(gpt.set_documents(Tensor::from_indices({0, 0, 0, 0}, {4})), doctest::Contains("are not int64 [B, T]"), Error);
  gpt.set_documents(Tensor::from_indices(std::vector<int64_t>(4, 0), {1, 4}));
  CHECK_THROWS_WITH_AS(gpt.forward(idx), doctest::Contains("GPT: document ids [1,4] int64 are not [B, T] of the input's"), Error);
  gpt.set_documents(Tensor::from_indices(std::vector<int64_t>(6, 0), {2, 3}));
  CHECK_THROWS_WITH_AS(gpt.forward(idx), doctest::Contains("GPT: document ids [2,3] int64 are not [B, T] of the input's"), Error);
  {
    NoGradGuard no_grad;
    KVCache cache = gpt.make_kv_cache(2);
    CHECK_THROWS_WITH_AS(gpt.forward_tree(Tensor::from_indices({1, 1}, {2, 1}), std::vector<int64_t>{-1}, cache),
                         doctest::Contains("a token tree after packed documents: set_documents(Tensor()) first"), Error);
  }
  gpt.set_documents(Tensor());
  CHECK_THROWS_WITH_AS(gpt.set_adjacency(Tensor::ones({4})), doctest::Contains("GPT: adjacency [4] float32 is not [T, T] or [B, T, T]"), Error);
  CHECK_THROWS_WITH_AS(gpt.set_adjacency(Tensor::ones({1, 1, 4, 4})), doctest::Contains("is not [T, T] or [B, T, T]"), Error);
  // Decoding: the cache's batch and layers, and a token tree's idx and parents (each alone).
  NoGradGuard no_grad;
  KVCache cache = gpt.make_kv_cache(2);
  CHECK_THROWS_WITH_AS(gpt.forward_cached(Tensor::from_indices({1, 2}, {2}), cache), doctest::Contains("is not int64 [2, T] (the cache's batch)"), Error);
  CHECK_THROWS_WITH_AS(gpt.forward_cached(Tensor::zeros({2, 1}), cache), doctest::Contains("is not int64 [2, T] (the cache's batch)"), Error);
  CHECK_THROWS_WITH_AS(gpt.forward_cached(Tensor::from_indices({1}, {1, 1}), cache), doctest::Contains("is not int64 [2, T] (the cache's batch)"), Error);
  CHECK_THROWS_WITH_AS(gpt.forward_cached(Tensor::from_indices({}, {2, 0}), cache), doctest::Contains("GPT: positions 0 … -1 reach past block_size"), Error);
  KVCache one_layer({.layers = 1, .batch = 2, .capacity = 6});
  CHECK_THROWS_WITH_AS(gpt.forward_cached(Tensor::from_indices({1, 2}, {2, 1}), one_layer), doctest::Contains("GPT: a cache for 1 layers, the model has 2"), Error);
  const std::vector<int64_t> two{-1, 0};
  const char* tree_idx = "(the cache's batch, one token per node)";
  CHECK_THROWS_WITH_AS(gpt.forward_tree(Tensor::from_indices({1, 2}, {2}), two, cache), doctest::Contains(tree_idx), Error);
  CHECK_THROWS_WITH_AS(gpt.forward_tree(Tensor::zeros({2, 2}), two, cache), doctest::Contains(tree_idx), Error);
  CHECK_THROWS_WITH_AS(gpt.forward_tree(Tensor::from_indices({1, 2}, {1, 2}), two, cache), doctest::Contains(tree_idx), Error);
  CHECK_THROWS_WITH_AS(gpt.forward_tree(Tensor::from_indices({}, {2, 0}), std::vector<int64_t>{}, cache), doctest::Contains(tree_idx), Error);
  CHECK_THROWS_WITH_AS(gpt.forward_tree(Tensor::from_indices({1, 2, 3, 4}, {2, 2}), std::vector<int64_t>{-1, -2}, cache),
                       doctest::Contains("GPT: token tree node 1 has parent -2: a parent must be an earlier node"), Error);
  // A head mask: n_layer groups of n_head 0s and 1s split by '/' (2 of 4 here: 9 characters).
  GPTConfig masked = config;
  masked.n_head = 4;
  masked.n_layer = 2;
  const char* mask_shape = "is not 2 groups of 4 0s and 1s split by '/'";
  for (const char* bad : {"11111111", "1x11/1111", "1111x1111"}) {
    CAPTURE(bad);
    masked.head_mask = bad;
    CHECK_THROWS_WITH_AS(masked.head_gates(), doctest::Contains(mask_shape), Error);
  }
  masked.head_mask = "0011/1101";
  CHECK(masked.head_gates() == std::vector<std::vector<double>>{{0, 0, 1, 1}, {1, 1, 0, 1}});
  CHECK_THROWS_WITH_AS(head_mask_text({{1.0, 0.5}}), "head_mask: gate 0.5 is neither 0 nor 1", Error);
  // A function without a mask cannot take masks of its own: documents, a graph, a token tree.
  GPTConfig linear_config = config;
  linear_config.attention = AttentionFunction::Linear;
  GPT linear_gpt(linear_config, gen);
  CHECK_THROWS_WITH_AS(linear_gpt.set_documents(Tensor::from_indices({0, 0}, {1, 2})), doctest::Contains("packed documents need softmax attention"), Error);
  CHECK_THROWS_WITH_AS(linear_gpt.set_adjacency(Tensor::ones({2, 2})), doctest::Contains("a graph's mask needs softmax attention"), Error);
  KVCache linear_cache = linear_gpt.make_kv_cache(1);
  CHECK_THROWS_WITH_AS(linear_gpt.forward_tree(Tensor::from_indices({1}, {1, 1}), std::vector<int64_t>{-1}, linear_cache),
                       doctest::Contains("a token tree needs softmax attention (its tree mask), not linear"), Error);
}

}  // namespace nn_test
