// Grouped-query attention and the KV cache: the attention op reading the first
// kv_length rows of a longer cache in place; a module with H_kv kv heads equals
// multi-head attention whose W_K, W_V repeat per group (forward, and gradients
// summed over the group), and passes gradcheck; at every decode step the cached
// logits equal a full forward of the same prefix (the bug nanoGPT's KV-cache
// PRs had: "not exactly the same"). Every implementation (EnumNames<AttentionImpl>)
// on every device (TEST_CASE_EVERY_DEVICE).
#include <cmath>

#include "core/autograd.h"
#include "nn/gpt.h"
#include "tests/helpers.h"

// The file's names and using-directives stay its own in a unity build, where the test
// files compile as one translation unit (CMakeLists.txt).
namespace kv_cache_test {

using namespace ag;
using namespace ag::nn;
using ag::test::random;
using ag::test::softmax_of;

namespace {
using ag::test::attention_impls;

Tensor on(Device device, const Tensor& t) {
  Tensor c = t.detach().to(device).clone();
  if (t.requires_grad()) c.requires_grad_();
  return c;
}
Tensor host(const Tensor& t) { return t.to(Device::CPU); }

// attention over a cache of T_max rows with kv_length = Tk equals attention
// over exactly those Tk rows; the rows after Tk get zero gradient.
void check_kv_length_reads_a_prefix(Device device) {
  constexpr int64_t B = 2, Hq = 4, Hkv = 2, T_max = 9, d = 3;
  for (AttentionLayout layout : {AttentionLayout::BTHD, AttentionLayout::BHTD}) {
    const bool bthd = layout == AttentionLayout::BTHD;
    const int64_t t_dim = bthd ? 1 : 2;
    const auto shape = [&](int64_t H, int64_t T) { return bthd ? Shape{B, T, H, d} : Shape{B, H, T, d}; };
    for (AttentionImpl impl : attention_impls())
      for (int64_t Tq : {1, 3}) {
        const int64_t Tk = 6;
        CAPTURE(name_of(impl));
        CAPTURE(bthd);
        CAPTURE(Tq);
        const Tensor q = on(device, random(shape(Hq, Tq), 1)), k = on(device, random(shape(Hkv, T_max), 2)),
                     v = on(device, random(shape(Hkv, T_max), 3));
        const Tensor k_used = on(device, slice(host(k).detach(), t_dim, 0, Tk)).requires_grad_(),
                     v_used = on(device, slice(host(v).detach(), t_dim, 0, Tk)).requires_grad_();
        const Tensor upstream = on(device, random(shape(Hq, Tq), 4, DType::Float64, false));
        const AttentionSpec spec{.function = SoftmaxAttention{.impl = impl}, .causal = true, .layout = layout};
        AttentionSpec cached = spec;
        softmax_of(cached).kv_length = Tk;
        const Tensor Z = attention(q, k, v, cached);
        Z.backward(upstream);
        const Tensor Z_used = attention(q.detach(), k_used, v_used, spec);
        Z_used.backward(upstream);
        CHECK_CLOSE(host(Z), host(Z_used), 1e-15);
        for (const auto& [big, used] : {std::pair{k, k_used}, std::pair{v, v_used}}) {
          CHECK_CLOSE(slice(host(big.grad()), t_dim, 0, Tk), host(used.grad()), 1e-15);
          CHECK(host(slice(host(big.grad()), t_dim, Tk, T_max)).to_vector() ==
                std::vector<double>(static_cast<size_t>(B * Hkv * (T_max - Tk) * d), 0.0));
        }
      }
  }
}

// A module with H_kv kv heads and the multi-head module whose W_K, W_V (and
// biases) repeat each kv head's d_h columns for its group give the same output;
// the GQA module's dW_K, dW_V are the group sums of the MHA module's.
void check_gqa_equals_repeated_mha(Device device) {
  constexpr int64_t B = 2, T = 7, C = 12, H = 6;
  for (int64_t H_kv : {1, 2, 3})
    for (AttentionImpl impl : attention_impls()) {
      CAPTURE(H_kv);
      CAPTURE(name_of(impl));
      const int64_t group = H / H_kv, d_h = C / H;
      Generator gen(20 + H_kv);
      MultiHeadSelfAttention gqa({.C = C, .H = H, .H_kv = H_kv}, {.impl = impl}, &gen), mha({.C = C, .H = H}, {.impl = impl}, &gen);
      gqa.to(DType::Float64);
      mha.to(DType::Float64);
      // [..., H_kv·d_h] → [..., H_kv, 1, d_h] → [..., H_kv, group, d_h] → [..., H·d_h] (repeat_interleave over heads)
      const auto repeat = [&](const Tensor& w) {
        Shape grouped = w.shape(), wide = w.shape();
        grouped.back() = H_kv;
        grouped.push_back(1);
        grouped.push_back(d_h);
        Shape expanded = grouped;
        expanded[expanded.size() - 2] = group;
        wide.back() = C;
        return expand(w.reshape(grouped), expanded).reshape(wide);
      };
      const auto group_sum = [&](const Tensor& g) {
        Shape grouped = g.shape(), narrow = g.shape();
        grouped.back() = H_kv;
        grouped.push_back(group);
        grouped.push_back(d_h);
        narrow.back() = H_kv * d_h;
        return sum(g.reshape(grouped), static_cast<int64_t>(grouped.size()) - 2).reshape(narrow);
      };
      std::vector<NamedTensor> state;
      for (const NamedTensor& p : gqa.named_parameters()) {
        const bool kv = p.name.starts_with("w_k.") || p.name.starts_with("w_v.");
        state.push_back({p.name, kv ? repeat(p.tensor.detach()) : p.tensor.detach().clone()});
      }
      mha.load_state(state);
      gqa.to(device);
      mha.to(device);
      const Tensor x = on(device, random({B, T, C}, 30)), upstream = on(device, random({B, T, C}, 31, DType::Float64, false));
      const Tensor y_gqa = gqa.forward(x), y_mha = mha.forward(x);
      CHECK_CLOSE(host(y_gqa), host(y_mha), 1e-13);
      y_gqa.backward(upstream);
      y_mha.backward(upstream);
      const std::vector<NamedTensor> g_params = gqa.named_parameters(), m_params = mha.named_parameters();
      for (size_t i = 0; i < g_params.size(); ++i) {
        CAPTURE(g_params[i].name);
        if (g_params[i].name == "w_k.bias") continue;  // exactly 0 up to rounding on both sides (softmax is shift-invariant)
        const bool kv = g_params[i].name.starts_with("w_k.") || g_params[i].name.starts_with("w_v.");
        const Tensor expected = kv ? group_sum(host(m_params[i].tensor.grad())) : host(m_params[i].tensor.grad());
        CHECK_CLOSE(host(g_params[i].tensor.grad()), expected, 1e-12);
      }
    }
}

GPTConfig tiny_gpt(int64_t H_kv) {
  return {.vocab_size = 13, .block_size = 12, .n_layer = 2, .n_head = 4, .n_kv_head = H_kv, .n_embd = 16};
}

std::vector<int64_t> tokens(int64_t n, uint64_t seed, int64_t V) {
  Generator gen(seed);
  std::vector<int64_t> t(n);
  for (int64_t& x : t) x = static_cast<int64_t>(gen.integer(V));
  return t;
}

// Prefill with a prompt, then decode one token at a time up to block_size: the
// logits of every step equal the last rows of a full forward of the same prefix,
// on the device and (on a device) on the CPU, from the same weights.
void check_cached_logits_equal_full_forward(Device device) {
  constexpr int64_t B = 2, prompt = 3;
  for (DType dtype : {DType::Float64, DType::Float32})
    for (int64_t H_kv : {4, 2, 1})
      for (AttentionImpl impl : attention_impls()) {
        CAPTURE(dtype);
        CAPTURE(H_kv);
        CAPTURE(name_of(impl));
        const double tolerance = dtype == DType::Float64 ? 1e-12 : 1e-5;
        GPTConfig config = tiny_gpt(H_kv);
        config.attn_impl = impl;
        Generator gen(40), reference_gen(40);
        GPT model(config, gen), reference(config, reference_gen);
        model.to(dtype);
        model.to(device);
        model.eval();
        reference.to(dtype);
        reference.eval();
        NoGradGuard no_grad;
        const int64_t T = config.block_size;
        const std::vector<int64_t> ids = tokens(B * T, 41, config.vocab_size);  // [B, T]
        // idx [B, to − from]: columns from … to − 1
        const auto prefix = [&](int64_t from, int64_t to, Device where) {
          std::vector<int64_t> cols;
          for (int64_t b = 0; b < B; ++b)
            for (int64_t j = from; j < to; ++j) cols.push_back(ids[b * T + j]);
          return Tensor::from_indices(cols, {B, to - from}).to(where);
        };
        KVCache cache = model.make_kv_cache(B);
        const Tensor prefill = model.forward_cached(prefix(0, prompt, device), cache);  // allocates K, V for block_size positions
        CHECK(cache.bytes_per_token() ==
              2 * config.n_layer * H_kv * (config.n_embd / config.n_head) * static_cast<int64_t>(dtype_size(dtype)));
        CHECK(cache.bytes() == cache.bytes_per_token() * B * T);
        CHECK_CLOSE(host(prefill), host(model.forward(prefix(0, prompt, device))), tolerance);
        for (int64_t t = prompt; t < T; ++t) {
          CAPTURE(t);
          const Tensor step = model.forward_cached(prefix(t, t + 1, device), cache);  // [B, 1, V]
          const Tensor full = model.forward(prefix(0, t + 1, device));                // [B, t + 1, V]
          CHECK(cache.length() == t + 1);
          CHECK_CLOSE(host(step), slice(host(full), 1, t, t + 1), tolerance);
          if (device != Device::CPU)
            CHECK_CLOSE(host(step), slice(reference.forward(prefix(0, t + 1, Device::CPU)), 1, t, t + 1), tolerance);
        }
      }
}
}  // namespace

TEST_CASE_EVERY_DEVICE("kv cache: the attention op reads the first kv_length rows in place — the rest get zero gradient") {
  check_kv_length_reads_a_prefix(device);
}

// On a device: the output and gradients in float64 within 1e-10 of the CPU's.
TEST_CASE_EVERY_DEVICE("kv cache: gradcheck of attention over a longer cache, every implementation") {
  const std::vector<Tensor> qkv = {random({1, 2, 2, 3}, 5), random({1, 7, 1, 3}, 6), random({1, 7, 1, 3}, 7)};
  for (AttentionImpl impl : attention_impls()) {
    CAPTURE(name_of(impl));
    const AttentionSpec spec{.function = SoftmaxAttention{.impl = impl, .kv_length = 5}, .causal = true, .layout = AttentionLayout::BTHD};
    const GradcheckFn f = [spec](const std::vector<Tensor>& x) { return attention(x[0], x[1], x[2], spec); };
    if (device == Device::CPU) CHECK_GRADCHECK(f, qkv);
    else ag::test::check_device_matches_cpu(device, f, qkv, 1e-10, DType::Float64);
  }
}

// The rows read are k's and v's first kv_length: one past them, or a negative count, is refused
// by every implementation with the count and the rows there are (core/ops/attention.cpp, describe_problem).
TEST_CASE("kv cache: a kv_length outside [0, the rows of k and v] is refused, naming it and the range") {
  const Tensor q = random({1, 2, 2, 3}, 5), k = random({1, 7, 1, 3}, 6), v = random({1, 7, 1, 3}, 7);
  for (AttentionImpl impl : attention_impls()) {
    CAPTURE(name_of(impl));
    for (const int64_t kv_length : {int64_t{8}, int64_t{-1}}) {
      const AttentionSpec spec{.function = SoftmaxAttention{.impl = impl, .kv_length = kv_length},
                               .causal = true, .layout = AttentionLayout::BTHD};
      const std::string error = ag::test::error_of([&] { attention(q, k, v, spec); });
      CHECK(ag::test::contains(error, "kv_length " + std::to_string(kv_length) + " is outside [0, 7]"));
    }
    const AttentionSpec all_rows{.function = SoftmaxAttention{.impl = impl, .kv_length = 7}, .causal = true,
                                 .layout = AttentionLayout::BTHD};
    CHECK(ag::test::error_of([&] { attention(q, k, v, all_rows); }).empty());
  }
}

TEST_CASE_EVERY_DEVICE("gqa: H_kv ∈ {1, 2, 3} of 6 heads equals MHA with repeated W_K, W_V, gradients summed per group") {
  check_gqa_equals_repeated_mha(device);
}

TEST_CASE("gqa: gradcheck of the module with H_kv ∈ {1, 2}, every implementation") {
  for (int64_t H_kv : {1, 2})
    for (AttentionImpl impl : attention_impls()) {
      CAPTURE(H_kv);
      CAPTURE(name_of(impl));
      Generator gen(50);
      MultiHeadSelfAttention attn({.C = 8, .H = 4, .H_kv = H_kv}, {.impl = impl}, &gen);
      ag::test::check_module_gradients(attn, random({2, 5, 8}, 51), [&](const Tensor& x) { return attn.forward(x); });
    }
}

TEST_CASE("gqa: a model's W_K, W_V are [C, H_kv·d_h] and H must be a multiple of H_kv") {
  Generator gen(1);
  GPT model(tiny_gpt(2), gen);
  CHECK(model.block(0).attn().named_parameters()[2].tensor.shape() == Shape{16, 8});  // w_k.weight, d_h = 4
  CHECK(tiny_gpt(0).kv_heads() == 4);
  CHECK_THROWS_WITH_AS(GPT(tiny_gpt(3), gen), doctest::Contains("--n-head 4 is not a multiple of --n-kv-head 3"),
                       Error);
}

TEST_CASE_EVERY_DEVICE("kv cache: at every decode step the cached logits equal a full forward of the prefix") {
  check_cached_logits_equal_full_forward(device);
}

TEST_CASE("kv cache: positions past block_size and forwards that record gradients are errors") {
  Generator gen(60);
  GPT model(tiny_gpt(2), gen);
  KVCache cache = model.make_kv_cache(1);
  CHECK_THROWS_WITH_AS(model.forward_cached(Tensor::from_indices({1}, {1, 1}), cache),
                       doctest::Contains("run it under NoGradGuard"), Error);
  NoGradGuard no_grad;
  model.forward_cached(Tensor::from_indices(tokens(12, 61, 13), {1, 12}), cache);
  CHECK(cache.length() == 12);
  CHECK_THROWS_WITH_AS(model.forward_cached(Tensor::from_indices({1}, {1, 1}), cache),
                       doctest::Contains("reach past block_size = 12"), Error);
  cache.clear();
  CHECK(model.forward_cached(Tensor::from_indices({1}, {1, 1}), cache).shape() == Shape{1, 1, 13});
}

TEST_CASE("mixers: each layer's state_floats is what its KV cache holds, for every function and a rolling window") {
  struct Case {
    const char* name;
    GPTConfig config;
  };
  std::vector<Case> cases;
  const auto with = [](const auto& change) {
    GPTConfig c = tiny_gpt(2);
    c.position = PositionEncoding::None;  // positions that never end, so that a window's cache rolls
    change(c);
    return c;
  };
  cases.push_back({"softmax", with([](GPTConfig&) {})});
  cases.push_back({"softmax window 3, dilation 2, 1 global (rolls)", with([](GPTConfig& c) {
                     c.attn_window = 3, c.attn_dilation = 2, c.attn_global = 1;
                   })});
  cases.push_back({"linear elu1", with([](GPTConfig& c) { c.attention = AttentionFunction::Linear; })});
  cases.push_back({"linear favor", with([](GPTConfig& c) {
                     c.attention = AttentionFunction::Linear, c.feature_map = FeatureMap::Favor, c.n_features = 6;
                   })});
  cases.push_back({"ssd", with([](GPTConfig& c) { c.attention = AttentionFunction::Ssd; })});
  cases.push_back({"ssd without convolution", with([](GPTConfig& c) { c.attention = AttentionFunction::Ssd, c.ssd_conv = 0; })});
  for (const Case& test : cases) {
    CAPTURE(test.name);
    Generator gen(7);
    GPT model(test.config, gen);
    NoGradGuard no_grad;
    const int64_t T = test.config.block_size;
    KVCache cache = model.make_kv_cache(1, model.kv_cache_rolls() ? model.rolling_kv_cache_capacity(1) : T);
    for (int64_t t = 0; t < T; ++t) model.forward_cached(Tensor::from_indices({t % 13}, {1, 1}), cache);
    int64_t floats = 0;
    for (int64_t l = 0; l < test.config.n_layer; ++l) floats += model.block(l).attn().state_floats(T);
    CHECK(floats > 0);
    CHECK(floats * static_cast<int64_t>(sizeof(float)) == cache.bytes());
  }
}

}  // namespace kv_cache_test
