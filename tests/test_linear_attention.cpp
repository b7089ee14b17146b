// Linear attention through the attention contract (attention() with
// AttentionFunction::Linear; core/ops/linear_attention.cpp): the op against the
// masked quadratic form it abbreviates, chunked against unchunked, gradients,
// grouped kv heads and the BTHD layout read in place, FAVOR+'s features and how
// well they approximate softmax, decoding through a LayerKVCache, and CPU
// against CUDA.
#include <cmath>

#include "core/autograd.h"
#include "core/gradcheck.h"
#include "core/ops.h"
#include "core/safetensors.h"
#include "examples/common/checkpoint.h"
#include "examples/common/sample.h"
#include "examples/common/train.h"
#include "nn/gpt.h"
#include "nn/linear_attention.h"
#include "tests/char_lm_helpers.h"
#include "tests/helpers.h"

// The file's names and using-directives stay its own in a unity build, where the test
// files compile as one translation unit (CMakeLists.txt).
namespace linear_attention_test {

using namespace ag;
using ag::test::random;
using ag::test::linear_of;

namespace {

// φ by composed ops: elu(x) + 1 = relu(x) + exp(−relu(−x)); FAVOR+ as its formula.
Tensor reference_features(const Tensor& x, FeatureMap map, const Tensor& omega) {
  if (map == FeatureMap::Elu1) return relu(x) + exp(-relu(-x));
  const double s = 1.0 / std::pow(static_cast<double>(x.size(-1)), 0.25);
  const Tensor xs = x * s;
  const Tensor projection = matmul(xs, transpose(omega, 0, 1));  // [..., m]
  const Tensor half_norm_sq = sum(xs * xs, -1, true) * 0.5;
  return exp(projection - half_norm_sq) * (1.0 / std::sqrt(static_cast<double>(omega.size(0))));
}

// The masked quadratic form: A = φ(Q) φ(K)ᵀ ∘ M (M lower-triangular ones, or all ones),
// Z = A V / (rowsum(A) + 1e-6).
Tensor quadratic_form(const Tensor& q, const Tensor& k, const Tensor& v, const AttentionSpec& spec) {
  const int64_t T = q.size(2);
  Tensor A = matmul(reference_features(q, linear_of(spec).feature_map, linear_of(spec).omega),
                    transpose(reference_features(k, linear_of(spec).feature_map, linear_of(spec).omega), 2, 3));  // [B, H, T, T]
  if (spec.causal) {
    std::vector<double> lower(T * T);
    for (int64_t i = 0; i < T; ++i)
      for (int64_t j = 0; j <= i; ++j) lower[i * T + j] = 1;
    A = A * Tensor::from_vector(lower, {T, T}, q.dtype());
  }
  return matmul(A, v) / (sum(A, -1, true) + 1e-6);
}

struct Case {
  FeatureMap map;
  bool causal;
};
const Case kCases[] = {{FeatureMap::Elu1, true}, {FeatureMap::Elu1, false}, {FeatureMap::Favor, true},
                       {FeatureMap::Favor, false}};

AttentionSpec spec_for(const Case& c, int64_t d, int64_t m = 8, DType dtype = DType::Float64) {
  return {.function = LinearAttention{.feature_map = c.map, .omega = c.map == FeatureMap::Favor ? favor_projection(m, d, 7).to(dtype) : Tensor()}, .causal = c.causal};
}

using ag::test::repeat_kv;
using ag::test::swap_heads_and_positions;

// The output and the inputs' gradients of f(q, k, v) under one upstream gradient.
std::vector<Tensor> output_and_gradients(const std::function<Tensor(const Tensor&, const Tensor&, const Tensor&)>& f,
                                         const Tensor& q, const Tensor& k, const Tensor& v, uint64_t seed) {
  const Tensor z = f(q, k, v);
  z.backward(random(z.shape(), seed, z.dtype(), false).to(z.device()));
  return {z, q.grad(), k.grad(), v.grad()};
}

// A fresh leaf copy of t on `device`, requiring grad.
Tensor leaf_on(const Tensor& t, Device device) { return t.detach().to(device).clone().requires_grad_(); }

}  // namespace

TEST_CASE("linear attention: equals the masked quadratic form (float64, ≤ 1e-12)") {
  for (const Case& c : kCases)
    for (int64_t T : {1, 5, 64, 130}) {
      CAPTURE(std::string(name_of(c.map)));
      CAPTURE(c.causal);
      CAPTURE(T);
      const Tensor q = random({2, 3, T, 4}, 1), k = random({2, 3, T, 4}, 2), v = random({2, 3, T, 4}, 3);
      const AttentionSpec spec = spec_for(c, 4);
      CHECK_CLOSE(attention(q, k, v, spec), quadratic_form(q, k, v, spec), 1e-12);
    }
}

TEST_CASE("linear attention: the weights it implies reproduce its output (A V = Z, float64, ≤ 1e-12)") {
  for (const Case& c : kCases)
    for (int64_t T : {1, 5, 70}) {
      CAPTURE(std::string(name_of(c.map)));
      CAPTURE(c.causal);
      CAPTURE(T);
      const Tensor q = random({2, 3, T, 4}, 4), k = random({2, 3, T, 4}, 5), v = random({2, 3, T, 4}, 6);
      const AttentionSpec spec = spec_for(c, 4);
      AttentionInternals internals;
      const Tensor Z = attention(q, k, v, spec, &internals);
      const Tensor A = internals.probabilities;
      REQUIRE(A.shape() == Shape{2, 3, T, T});
      CHECK_CLOSE(matmul(A, v), Z, 1e-12);
      const std::vector<double> a = A.to_vector();
      for (int64_t row = 0; row < 2 * 3 * T; ++row)
        for (int64_t j = 0; j < T; ++j) {
          const double w = a[row * T + j];
          if (c.causal && j > row % T) CHECK(w == 0.0);  // the future gets no weight
          else CHECK(w > 0.0);                            // φ(q)·φ(k) > 0 for both maps
        }
    }
}

TEST_CASE("linear attention: chunked equals unchunked, output and gradients (T = 1, 63, 64, 65, 200)") {
  for (const Case& c : kCases) {
    if (!c.causal) continue;  // one φ(K)ᵀV: no chunks
    for (int64_t T : {1, 63, 64, 65, 200}) {
      CAPTURE(std::string(name_of(c.map)));
      CAPTURE(T);
      const auto run = [&](int64_t chunk, std::vector<Tensor>& grads) {
        const Tensor q = random({1, 2, T, 5}, 4), k = random({1, 2, T, 5}, 5), v = random({1, 2, T, 5}, 6);
        AttentionSpec spec = spec_for(c, 5);
        linear_of(spec).chunk = chunk;
        const Tensor z = attention(q, k, v, spec);
        z.backward(random(z.shape(), 8, DType::Float64, false));
        grads = {q.grad(), k.grad(), v.grad()};
        return z;
      };
      std::vector<Tensor> g_whole, g64, g1;
      const Tensor whole = run(T, g_whole);  // one chunk: the masked quadratic form alone
      const Tensor chunked = run(64, g64);   // the default
      const Tensor recurrent = run(1, g1);   // the running state alone
      CHECK_CLOSE(chunked, whole, 1e-12);
      CHECK_CLOSE(recurrent, whole, 1e-12);
      for (size_t i = 0; i < 3; ++i) {
        CAPTURE(i);
        CHECK_CLOSE(g64[i], g_whole[i], 1e-12);
        CHECK_CLOSE(g1[i], g_whole[i], 1e-12);
      }
    }
  }
}

TEST_CASE("linear attention: float64 gradcheck of q, k, v (elu1 and favor, causal and not, across chunks)") {
  for (const Case& c : kCases)
    for (int64_t T : {2, 7}) {  // at T = 1, o = v·a/(a + ε): the q, k gradients are O(ε), below what differences resolve
      CAPTURE(std::string(name_of(c.map)));
      CAPTURE(c.causal);
      CAPTURE(T);
      AttentionSpec spec = spec_for(c, 3, 6);
      linear_of(spec).chunk = 3;  // T = 7 crosses two chunk boundaries
      const std::vector<Tensor> inputs = {random({2, 2, T, 3}, 11), random({2, 2, T, 3}, 12),
                                          random({2, 2, T, 3}, 13)};
      CHECK_GRADCHECK([&](const std::vector<Tensor>& x) { return attention(x[0], x[1], x[2], spec); }, inputs);
      // Grouped kv heads in BTHD: q [2, T, 4, 3] over k, v [2, T, 2, 3], read in place.
      spec.layout = AttentionLayout::BTHD;
      const std::vector<Tensor> grouped = {random({2, T, 4, 3}, 14), random({2, T, 2, 3}, 15), random({2, T, 2, 3}, 16)};
      CHECK_GRADCHECK([&](const std::vector<Tensor>& x) { return attention(x[0], x[1], x[2], spec); }, grouped);
    }
}

TEST_CASE("linear attention: float32 agrees with float64") {
  for (const Case& c : kCases) {
    CAPTURE(std::string(name_of(c.map)));
    CAPTURE(c.causal);
    const std::vector<Tensor> inputs = {random({2, 2, 70, 8}, 21), random({2, 2, 70, 8}, 22),
                                        random({2, 2, 70, 8}, 23)};
    ag::test::check_float32_matches_float64(
        [&](const std::vector<Tensor>& x) {
          return attention(x[0], x[1], x[2], spec_for(c, 8, 16, x[0].dtype()));
        },
        inputs);
  }
}

// On a device also: the output and gradients against the CPU's (float64 ≤ 1e-12, float32 ≤ 1e-5).
TEST_CASE_EVERY_DEVICE("linear attention: decoding through a LayerKVCache gives the causal op's rows (GQA, BTHD)") {
  for (FeatureMap map : {FeatureMap::Elu1, FeatureMap::Favor})
    for (int64_t Hkv : {4, 2, 1})
      for (DType dtype : {DType::Float64, DType::Float32}) {
        CAPTURE(std::string(name_of(map)));
        CAPTURE(Hkv);
        CAPTURE(std::string(dtype_name(dtype)));
        const double tolerance = dtype == DType::Float64 ? 1e-12 : 1e-5;
        const int64_t T = 70;
        const Tensor q = random({2, T, 4, 4}, 31, dtype), k = random({2, T, Hkv, 4}, 32, dtype),
                     v = random({2, T, Hkv, 4}, 33, dtype);
        AttentionSpec spec = spec_for({map, true}, 4, 8, dtype);
        spec.layout = AttentionLayout::BTHD;
        const auto f = [&spec](const Tensor& a, const Tensor& b, const Tensor& cv) { return attention(a, b, cv, spec); };
        const std::vector<Tensor> cpu =
            output_and_gradients(f, leaf_on(q, Device::CPU), leaf_on(k, Device::CPU), leaf_on(v, Device::CPU), 34);
        if (linear_of(spec).omega.defined()) linear_of(spec).omega = linear_of(spec).omega.to(device);
        if (device != Device::CPU) {
          const std::vector<Tensor> here = output_and_gradients(f, leaf_on(q, device), leaf_on(k, device), leaf_on(v, device), 34);
          for (size_t i = 0; i < 4; ++i) {
            CAPTURE(i);  // 0: Z, then dQ, dK, dV
            CHECK_CLOSE(here[i].to(Device::CPU), cpu[i], tolerance);
          }
        }
        NoGradGuard no_grad;
        LayerKVCache cache{.capacity = T};
        spec.cache = &cache;
        const Tensor qd = q.detach().to(device), kd = k.detach().to(device), vd = v.detach().to(device);
        std::vector<Tensor> rows = {attention(slice(qd, 1, 0, 5), slice(kd, 1, 0, 5), slice(vd, 1, 0, 5), spec)};  // a prefill
        for (int64_t t = 5; t < T; ++t)
          rows.push_back(attention(slice(qd, 1, t, t + 1), slice(kd, 1, t, t + 1), slice(vd, 1, t, t + 1), spec));
        CHECK_CLOSE(concat(rows, 1).to(Device::CPU), cpu[0], tolerance);
        CHECK(cache.length == T);
        CHECK(!cache.k.defined());  // no keys or values kept
        CHECK(cache.state.shape() == Shape{2, Hkv, linear_of(spec).omega.defined() ? 8 : 4, 5});  // r × (d + 1) per kv head, whatever T is
        CHECK_THROWS_AS(attention(slice(qd, 1, 0, 1), slice(kd, 1, 0, 1), slice(vd, 1, 0, 1), spec), Error);  // full
      }
}

// Sizes the kernels handle differently (less than a chunk, a chunk and one, several chunks), both
// layouts. Not T = 1: there o = v·a/(a + ε), so the q and k gradients are O(ε), rounding noise in
// float32 with nothing to compare (the gradcheck above says the same).
TEST_CASE_EVERY_DEVICE("linear attention: elu1 and favor, causal and not, on every device as on the CPU (features, products, backward)") {
  for (const Case& c : kCases)
    for (int64_t T : {2, 65, 200})
      for (AttentionLayout layout : {AttentionLayout::BHTD, AttentionLayout::BTHD}) {
        CAPTURE(std::string(name_of(c.map)));
        CAPTURE(c.causal);
        CAPTURE(T);
        CAPTURE(layout == AttentionLayout::BTHD);
        const Tensor omega = favor_projection(24, 16, 9);
        const bool bthd = layout == AttentionLayout::BTHD;
        const GradcheckFn f = [&](const std::vector<Tensor>& x) {
          const AttentionSpec spec{.function = LinearAttention{.feature_map = c.map, .omega = c.map == FeatureMap::Favor ? omega.to(x[0].dtype()).to(x[0].device()) : Tensor()}, .causal = c.causal, .layout = layout};
          return attention(x[0], x[1], x[2], spec);
        };
        const std::vector<Tensor> inputs = {random(bthd ? Shape{2, T, 4, 16} : Shape{2, 4, T, 16}, 401),
                                            random(bthd ? Shape{2, T, 2, 16} : Shape{2, 2, T, 16}, 402),
                                            random(bthd ? Shape{2, T, 2, 16} : Shape{2, 2, T, 16}, 403)};
        if (device == Device::CPU) ag::test::check_float32_matches_float64(f, inputs);
        else ag::test::check_device_matches_cpu(device, f, inputs);
      }
}

// The shapes the CUDA kernels tile differently (cuda/chunked_kernels.cuh), as ssd's: chunks of 1, 16
// and 64 positions with T = 1, below a chunk, a multiple of one and not; head widths 32, 64 and 128
// (the products' r and e are d and d + 1: one column past a 64-wide tile); grouped kv heads (a kv
// head's gradients sum its query heads inside the kernel); causal and not; float32 and float64. On
// the CPU the chunked op equals one chunk of all T (float64); on a device it equals the CPU. At T = 1
// the q and k gradients are O(ε) (above), so a device compares the output and dv there.
TEST_CASE_EVERY_DEVICE("linear attention: chunks of 1, 16, 64 positions, head widths 32, 64, 128 and T from 1 to 130 on every device as on the CPU") {
  struct ChunkCase {
    int64_t T, chunk, d, Hkv;
  };
  for (const ChunkCase s : {ChunkCase{1, 64, 32, 2}, ChunkCase{17, 16, 64, 1}, ChunkCase{100, 16, 32, 2},
                            ChunkCase{130, 64, 128, 1}, ChunkCase{40, 1, 32, 4}, ChunkCase{64, 64, 64, 2},
                            ChunkCase{63, 64, 128, 4}, ChunkCase{129, 16, 64, 2}})
    for (bool causal : {true, false})
      for (DType dtype : {DType::Float64, DType::Float32}) {
        if (device == Device::CPU && dtype == DType::Float32) continue;  // "float32 agrees with float64", above
        CAPTURE(s.T);
        CAPTURE(s.chunk);
        CAPTURE(s.d);
        CAPTURE(s.Hkv);
        CAPTURE(causal);
        CAPTURE(std::string(dtype_name(dtype)));
        const auto f_at = [causal](int64_t chunk) -> GradcheckFn {
          return [causal, chunk](const std::vector<Tensor>& x) {
            return attention(x[0], x[1], x[2], {.function = LinearAttention{.chunk = chunk}, .causal = causal});
          };
        };
        std::vector<Tensor> x = {random({2, 4, s.T, s.d}, 411), random({2, s.Hkv, s.T, s.d}, 412),
                                 random({2, s.Hkv, s.T, s.d}, 413)};
        if (device == Device::CPU) {
          const auto upstream = [](const Tensor& z) { return random(z.shape(), 414, z.dtype(), false); };
          const std::vector<Tensor> got = ag::test::output_and_gradients(f_at(s.chunk), x, upstream),
                                    want = ag::test::output_and_gradients(f_at(s.T), x, upstream);
          for (size_t i = 0; i < got.size(); ++i) {
            CAPTURE(i);  // 0: Z, then dQ, dK, dV
            CHECK_CLOSE(got[i], want[i], 1e-12);
          }
          continue;
        }
        if (s.T == 1) x = {x[0].detach(), x[1].detach(), x[2]};
        ag::test::check_device_matches_cpu(device, f_at(s.chunk), x, dtype == DType::Float64 ? 1e-12 : 1e-5, dtype);
      }
}

// Many problems at a length a device trains at: 2 batch entries × 16 query heads (over 4 kv heads)
// × 4096 positions, 64 chunks each, causal (float32; sums over 4096 positions: 1e-4, as
// tests/helpers.h says), then the same bits when run again. On the CPU the same-bits check alone,
// at T = 300.
TEST_CASE_EVERY_DEVICE("linear attention: T = 4096 over 32 problems on every device as on the CPU, the same bits when run again") {
  const bool cpu = device == Device::CPU;
  const int64_t T = cpu ? 300 : 4096, Hq = cpu ? 4 : 16, Hkv = cpu ? 2 : 4;
  const std::vector<Tensor> x = {random({2, T, Hq, 64}, 421), random({2, T, Hkv, 64}, 422),
                                 random({2, T, Hkv, 64}, 423)};
  const GradcheckFn f = [](const std::vector<Tensor>& in) {
    return attention(in[0], in[1], in[2], {.function = LinearAttention{}, .causal = true, .layout = AttentionLayout::BTHD});
  };
  if (!cpu) ag::test::check_device_matches_cpu(device, f, x, 1e-4);
  ag::test::check_same_bits_again(device, [&] {
    std::vector<Tensor> in;
    for (const Tensor& t : x) in.push_back(ag::test::copy_to(device, t, DType::Float32));
    return ag::test::output_and_gradients(
        f, in, [](const Tensor& z) { return random(z.shape(), 424, z.dtype(), false).to(z.device()); });
  });
}

TEST_CASE("linear attention: grouped kv heads equal each kv head repeated, BTHD equals BHTD (output and gradients)") {
  for (const Case& c : kCases)
    for (int64_t Hkv : {1, 2}) {
      CAPTURE(std::string(name_of(c.map)));
      CAPTURE(c.causal);
      CAPTURE(Hkv);
      const int64_t Hq = 4, T = 67;
      const AttentionSpec spec = spec_for(c, 5);
      const auto f = [&spec](const Tensor& a, const Tensor& b, const Tensor& cv) { return attention(a, b, cv, spec); };
      const Tensor q = random({2, Hq, T, 5}, 41), k = random({2, Hkv, T, 5}, 42), v = random({2, Hkv, T, 5}, 43);
      const std::vector<Tensor> grouped = output_and_gradients(f, q, k, v, 44);
      const std::vector<Tensor> repeated = output_and_gradients(
          [&](const Tensor& a, const Tensor& b, const Tensor& cv) { return f(a, repeat_kv(b, Hq), repeat_kv(cv, Hq)); },
          leaf_on(q, Device::CPU), leaf_on(k, Device::CPU), leaf_on(v, Device::CPU), 44);  // expand's backward sums the group
      AttentionSpec bthd = spec;
      bthd.layout = AttentionLayout::BTHD;
      const std::vector<Tensor> in_bthd = output_and_gradients(
          [&](const Tensor& a, const Tensor& b, const Tensor& cv) {
            return swap_heads_and_positions(attention(swap_heads_and_positions(a), swap_heads_and_positions(b),
                                                      swap_heads_and_positions(cv), bthd));
          },
          leaf_on(q, Device::CPU), leaf_on(k, Device::CPU), leaf_on(v, Device::CPU), 44);
      for (size_t i = 0; i < 4; ++i) {
        CAPTURE(i);  // 0: Z, then dQ, dK, dV
        CHECK_CLOSE(grouped[i], repeated[i], 1e-12);
        CHECK_CLOSE(in_bthd[i], grouped[i], 1e-12);
      }
    }
}

TEST_CASE("linear attention: FAVOR+ features are a pure function of the seed, orthogonal within a block") {
  const Tensor a = favor_projection(40, 16, 5, 2), b = favor_projection(40, 16, 5, 2);
  CHECK(a.to_vector() == b.to_vector());
  CHECK(a.to_vector() != favor_projection(40, 16, 5, 3).to_vector());  // another layer
  CHECK(a.to_vector() != favor_projection(40, 16, 6, 2).to_vector());  // another seed
  const std::vector<double> w = a.to_vector();
  double worst = 0;  // |cos| between rows of one block of d = 16
  for (int64_t block : {0, 16})
    for (int64_t i = block; i < block + 16; ++i)
      for (int64_t j = block; j < i; ++j) {
        double dot = 0, ni = 0, nj = 0;
        for (int64_t c = 0; c < 16; ++c) {
          dot += w[i * 16 + c] * w[j * 16 + c];
          ni += w[i * 16 + c] * w[i * 16 + c];
          nj += w[j * 16 + c] * w[j * 16 + c];
        }
        worst = std::max(worst, std::abs(dot) / std::sqrt(ni * nj));
      }
  CHECK(worst < 1e-12);
}

TEST_CASE("linear attention: FAVOR+ approaches softmax attention as m grows (16 → 64 → 256, over seeds)") {
  // softmax(QKᵀ/√d)V against FAVOR+ with m features, causal, T = 64, d = 16;
  // q and k scaled by 0.5 so the scores stay in the range the estimator handles well.
  const int64_t T = 64, d = 16;
  std::vector<double> errors;
  for (int64_t m : {16, 64, 256}) {
    double total = 0;
    for (uint64_t seed = 0; seed < 8; ++seed) {
      const Tensor q = random({1, 2, T, d}, 100 + seed, DType::Float64, false) * 0.5;
      const Tensor k = random({1, 2, T, d}, 200 + seed, DType::Float64, false) * 0.5;
      const Tensor v = random({1, 2, T, d}, 300 + seed, DType::Float64, false);
      const Tensor exact = attention(q, k, v, {.causal = true});
      const AttentionSpec spec{.function = LinearAttention{.feature_map = FeatureMap::Favor, .omega = favor_projection(m, d, seed)}, .causal = true};
      total += ag::test::relative_error(attention(q, k, v, spec), exact);
    }
    errors.push_back(total / 8);
    MESSAGE("FAVOR+ m = " << m << ": mean normwise relative error against softmax attention " << total / 8);
  }
  CHECK(errors[1] < errors[0]);
  CHECK(errors[2] < errors[1]);
}

TEST_CASE("linear attention: a GPT generating token by token from its state (in its KV cache) gives the full forward's logits") {
  for (FeatureMap map : {FeatureMap::Elu1, FeatureMap::Favor}) {
    CAPTURE(std::string(name_of(map)));
    nn::GPTConfig config = test::gpt_sizes(11, 20, 2, 2, 16);
    config.attention = AttentionFunction::Linear;
    config.feature_map = map;
    config.n_features = 12;
    config.attn_seed = 3;
    Generator gen(1);
    nn::GPT model(config, gen);
    NoGradGuard no_grad;
    std::vector<int64_t> ids;
    for (int64_t t = 0; t < 20; ++t) ids.push_back((t * 7 + 3) % 11);
    const Tensor whole = model.forward(Tensor::from_indices(ids, {1, 20}));  // [1, 20, V]
    nn::KVCache cache = model.make_kv_cache(1);
    CHECK(cache.bytes_per_token() == 0);  // the state does not grow with the positions
    const Tensor prompt = model.forward_cached(Tensor::from_indices({ids.begin(), ids.begin() + 5}, {1, 5}), cache);
    const int64_t state_bytes = cache.bytes();  // per layer S and z side by side, [1, H, r, d_h + 1]
    CHECK(state_bytes > 0);
    std::vector<Tensor> steps = {prompt};
    for (int64_t t = 5; t < 20; ++t) steps.push_back(model.forward_cached(Tensor::from_indices({ids[t]}, {1, 1}), cache));
    CHECK(cache.length() == 20);
    CHECK(cache.bytes() == state_bytes);
    CHECK_CLOSE(concat(steps, 1), whole, 1e-5);
    CHECK_THROWS_AS(model.forward_cached(Tensor::from_indices({0}, {1, 1}), cache), Error);  // past block_size
    cache.clear();  // a refill restarts the state: the first 5 positions again give the prompt's logits
    CHECK_CLOSE(model.forward_cached(Tensor::from_indices({ids.begin(), ids.begin() + 5}, {1, 5}), cache), prompt, 1e-12);
  }
}

TEST_CASE("linear attention: char_lm trains a linear model — greedy text is the same from the state as recomputed") {
  for (FeatureMap map : {FeatureMap::Elu1, FeatureMap::Favor}) {
    CAPTURE(std::string(name_of(map)));
    const ag::test::TempDir dir("linear_attention_char_lm");
    char_lm::TrainConfig c = ag::test::tiny_run(dir.path());
    c.model.attention = AttentionFunction::Linear;
    c.model.feature_map = map;
    c.model.n_features = 8;
    c.model.attn_seed = 42;
    c.run.max_iters = 4;
    char_lm::train(c);
    const std::string path = char_lm::model_path(char_lm::find_checkpoint(dir.path()));
    const SafetensorsFile file = load_safetensors(path);
    CHECK(file.metadata.at("attention") == "linear");
    CHECK(file.metadata.at("feature_map") == name_of(map));
    CHECK(file.metadata.at("attn_seed") == "42");
    CHECK(!file.contains("blocks.0.attn.omega"));  // the features are recomputed from the seed, not saved
    char_lm::LoadedModel loaded = char_lm::load_model(path);
    if (map == FeatureMap::Favor)
      CHECK(loaded.model->block(0).attn_as<nn::LinearSelfAttention>().favor_features().to_vector() == favor_projection(8, 16, 42, 0).to_vector());
    char_lm::SampleOptions greedy;
    greedy.top_k = 1;
    greedy.tokens = 15;  // with the start token, the 16 positions of block_size
    const std::string recurrent = char_lm::generate(*loaded.model, loaded.tokenizer, "", greedy);
    greedy.no_kv_cache = true;
    const std::string recomputed = char_lm::generate(*loaded.model, loaded.tokenizer, "", greedy);
    CHECK(recurrent.size() >= 15);
    CHECK(recurrent == recomputed);
    greedy.tokens = 60;  // past block_size: the state restarts from the last half block, and generation goes on
    greedy.no_kv_cache = false;
    const std::string long_recurrent = char_lm::generate(*loaded.model, loaded.tokenizer, "", greedy);
    CHECK(long_recurrent.size() >= 60);
    greedy.no_kv_cache = true;  // recomputing follows the same windows (char_lm::ContextWindow)
    CHECK(long_recurrent == char_lm::generate(*loaded.model, loaded.tokenizer, "", greedy));
    // The attention maps draw the weights the model's output implies (AttentionInternals::probabilities).
    int status = 0;
    std::string output;
    std::tie(status, output) =
        ag::test::run_char_lm("attention --ckpt '" + dir.path() + "' --prompt 'the king' --out '" + dir.file("maps") + "'");
    INFO(output);
    REQUIRE(status == 0);
    const int T = 8, H = static_cast<int>(c.model.n_head);  // "the king"
    std::map<std::string, int> counts = ag::test::count_svg_elements(dir.file("maps/layer-0.svg"));
    CHECK(counts["rect.cell"] == H * T * (T + 1) / 2);
    CHECK(counts["rect.masked"] == H * T * (T - 1) / 2);
  }
}

TEST_CASE("linear attention: head gates apply as under softmax (a closed head adds nothing, full and cached alike)") {
  Generator gen(5);
  nn::LinearSelfAttention attn({.C = 8, .H = 2}, {.feature_map = FeatureMap::Elu1}, &gen);
  attn.to(DType::Float64);
  const Tensor x = random({1, 6, 8}, 9);
  const Tensor open = attn.forward(x);
  attn.set_head_gates(Tensor::from_vector({1.0, 1.0}, {2}, DType::Float64));
  CHECK_CLOSE(attn.forward(x), open, 1e-15);
  attn.set_head_gates(Tensor::from_vector({0.0, 0.0}, {2}, DType::Float64));
  const Tensor closed = attn.forward(x);  // every head closed: O is W_O's bias in every row
  const Tensor bias = attn.named_parameters().back().tensor;  // w_o.bias [C]
  CHECK_CLOSE(closed, bias.reshape({1, 1, 8}) + Tensor::zeros({1, 6, 8}, DType::Float64), 1e-15);
  NoGradGuard no_grad;
  LayerKVCache cache{.capacity = 6};
  CHECK_CLOSE(attn.forward_cached(x, cache), closed, 1e-15);
}

}  // namespace linear_attention_test
