// State-space attention through the attention contract (attention() with
// AttentionFunction::Ssd; core/ops/ssd.cpp): the chunked op against the masked
// quadratic form it computes, over chunk sizes and chunk boundaries, gradients
// (float64 gradcheck of q, k, v, Δ, a_log, D), grouped kv heads and both
// layouts, the decay's extremes, the weights it implies, decoding through a
// LayerKVCache, the errors, and CPU against CUDA; then the module and the
// model around it (convolution, step projection, gate): their gradients, their
// initialisation, generation from the recurrent state, checkpoints and char_lm.
#include <cmath>

#include "core/autograd.h"
#include "core/gradcheck.h"
#include "core/ops.h"
#include "core/safetensors.h"
#include "examples/common/checkpoint.h"
#include "examples/common/sample.h"
#include "examples/common/train.h"
#include "nn/gpt.h"
#include "nn/ssd.h"
#include "tests/char_lm_helpers.h"
#include "tests/helpers.h"

// The file's names and using-directives stay its own in a unity build, where the test
// files compile as one translation unit (CMakeLists.txt).
namespace ssd_test {

using namespace ag;
using ag::test::random;

namespace {

// The inputs {q, k, v, Δ, a_log, D} of one problem: q [B, Hq, T, d] and k, v [B, Hkv, T, d] (or
// BTHD), Δ ∈ [0.05, 0.35), a_log around −2 (decays near 0.97 per step, so the state matters across
// 200 positions), D ∈ [0.5, 1.5).
struct SsdProblem {
  int64_t B = 2, Hq = 2, Hkv = 2, T = 5, d = 4;
  AttentionLayout layout = AttentionLayout::BHTD;
};
std::vector<Tensor> inputs_for(const SsdProblem& p, uint64_t seed, DType dtype = DType::Float64) {
  const bool bthd = p.layout == AttentionLayout::BTHD;
  const auto rows = [&](int64_t H) { return bthd ? Shape{p.B, p.T, H, p.d} : Shape{p.B, H, p.T, p.d}; };
  Generator gen(seed + 1000);
  Tensor dt = Tensor::uniform(bthd ? Shape{p.B, p.T, p.Hq} : Shape{p.B, p.Hq, p.T}, 0.05, 0.35, dtype, &gen);
  const Tensor a_log = random({p.Hq}, seed + 4, dtype, false) * 0.5 - 2.0;
  Tensor d_skip = Tensor::uniform({p.Hq}, 0.5, 1.5, dtype, &gen);
  return {random(rows(p.Hq), seed + 1, dtype), random(rows(p.Hkv), seed + 2, dtype),
          random(rows(p.Hkv), seed + 3, dtype), dt.requires_grad_(), a_log.detach().requires_grad_(),
          d_skip.requires_grad_()};
}

AttentionSpec ssd_spec(const std::vector<Tensor>& x, AttentionLayout layout, int64_t chunk = kDefaultAttentionChunk) {
  return {.function = SsdAttention{.dt = x[3], .a_log = x[4], .d_skip = x[5], .chunk = chunk}, .causal = true, .layout = layout};
}
Tensor ssd(const std::vector<Tensor>& x, AttentionLayout layout, int64_t chunk = kDefaultAttentionChunk) {
  return attention(x[0], x[1], x[2], ssd_spec(x, layout, chunk));
}

using ag::test::repeat_kv;
using ag::test::swap_heads_and_positions;  // and Δ [B, H, T] <-> [B, T, H]
// A 0/1 matrix [T, T] with ones where keep(i, j).
template <class Keep> Tensor indicator(int64_t T, Keep keep) {
  std::vector<double> m(T * T);
  for (int64_t i = 0; i < T; ++i)
    for (int64_t j = 0; j < T; ++j) m[i * T + j] = keep(i, j) ? 1 : 0;
  return Tensor::from_vector(m, {T, T}, DType::Float64);
}

// The formula as composed ops (BHTD), differentiable in every input:
//   σ(i, j) = Σ_r [j < r ≤ i] λ_r  (one product of 0/1 matrices: no difference of long sums),
//   z_i = Σ_{j≤i} exp(σ(i, j)) (q_i·k_j) Δ_j v_j + D v_i,  λ = −exp(a_log)·Δ.
Tensor quadratic_form(const std::vector<Tensor>& x) {
  const Tensor &q = x[0], &dt = x[3], &a_log = x[4], &d_skip = x[5];
  const int64_t B = q.size(0), H = q.size(1), T = q.size(2);
  const Tensor k = repeat_kv(x[1], H), v = repeat_kv(x[2], H);
  const Tensor log_a = -(exp(a_log.reshape({1, H, 1})) * dt);                        // [B, H, T]
  const Tensor up_to_i = indicator(T, [](int64_t i, int64_t r) { return r <= i; });  // [i, r]
  const Tensor after_j = indicator(T, [](int64_t r, int64_t j) { return r > j; });   // [r, j]
  const Tensor sigma = matmul(up_to_i * log_a.reshape({B, H, 1, T}), after_j);       // [B, H, T, T]
  const Tensor decay = exp(sigma) * indicator(T, [](int64_t i, int64_t j) { return j <= i; });
  const Tensor weights = matmul(q, transpose(k, 2, 3)) * decay * dt.reshape({B, H, 1, T});
  return matmul(weights, v) + v * d_skip.reshape({1, H, 1, 1});
}

// The output and every input's gradient under one upstream gradient, drawn from `seed`.
std::vector<Tensor> output_and_gradients(const GradcheckFn& f, const std::vector<Tensor>& inputs, uint64_t seed) {
  return ag::test::output_and_gradients(
      f, inputs, [seed](const Tensor& z) { return random(z.shape(), seed, z.dtype(), false).to(z.device()); });
}
const char* const kNames[] = {"z", "dq", "dk", "dv", "ddt", "da_log", "dd_skip"};

}  // namespace

TEST_CASE("ssd attention: the chunked op equals the quadratic form, output and every gradient (float64, ≤ 1e-12)") {
  // T ∈ {1, Q − 1, Q, Q + 1, 200} for the chunk sizes Q = 64 (the default) and 16, grouped kv heads.
  for (int64_t chunk : {int64_t{64}, int64_t{16}})
    for (int64_t T : {int64_t{1}, chunk - 1, chunk, chunk + 1, int64_t{200}})
      for (int64_t Hkv : {2, 1}) {
        CAPTURE(chunk);
        CAPTURE(T);
        CAPTURE(Hkv);
        const std::vector<Tensor> x = inputs_for({.Hq = 2, .Hkv = Hkv, .T = T}, 10 + T);
        const std::vector<Tensor> got = output_and_gradients(
            [&](const std::vector<Tensor>& in) { return ssd(in, AttentionLayout::BHTD, chunk); }, x, 7);
        const std::vector<Tensor> want = output_and_gradients(quadratic_form, x, 7);
        for (size_t i = 0; i < got.size(); ++i) {
          CAPTURE(kNames[i]);
          CHECK_CLOSE(got[i], want[i], 1e-12);
        }
      }
}

TEST_CASE("ssd attention: float64 gradcheck of q, k, v, dt, a_log and d_skip (across chunks, grouped kv heads, BTHD)") {
  for (AttentionLayout layout : {AttentionLayout::BHTD, AttentionLayout::BTHD})
    for (int64_t Hkv : {2, 1}) {
      CAPTURE(layout == AttentionLayout::BTHD);
      CAPTURE(Hkv);
      const std::vector<Tensor> x = inputs_for({.Hq = 2, .Hkv = Hkv, .T = 7, .d = 3, .layout = layout}, 20);
      CHECK_GRADCHECK([&](const std::vector<Tensor>& in) { return ssd(in, layout, 3); }, x);  // 7 crosses two chunk ends
    }
}

TEST_CASE("ssd attention: BTHD equals BHTD, and grouped kv heads equal each repeated (output and gradients)") {
  const std::vector<Tensor> x = inputs_for({.Hq = 4, .Hkv = 2, .T = 70}, 30);
  const auto bhtd = output_and_gradients([](const std::vector<Tensor>& in) { return ssd(in, AttentionLayout::BHTD); },
                                         x, 8);
  const auto repeated = output_and_gradients(
      [](const std::vector<Tensor>& in) {
        return ssd({in[0], repeat_kv(in[1], 4), repeat_kv(in[2], 4), in[3], in[4], in[5]}, AttentionLayout::BHTD);
      },
      x, 8);
  const auto bthd = output_and_gradients(
      [](const std::vector<Tensor>& in) {
        return swap_heads_and_positions(ssd({swap_heads_and_positions(in[0]), swap_heads_and_positions(in[1]),
                                             swap_heads_and_positions(in[2]), swap_heads_and_positions(in[3]), in[4],
                                             in[5]},
                                            AttentionLayout::BTHD));
      },
      x, 8);
  for (size_t i = 0; i < bhtd.size(); ++i) {
    CAPTURE(kNames[i]);
    CHECK_CLOSE(repeated[i], bhtd[i], 1e-12);
    CHECK_CLOSE(bthd[i], bhtd[i], 1e-12);
  }
}

TEST_CASE("ssd attention: the decay's extremes stay finite and correct") {
  const int64_t T = 150;  // three chunks
  std::vector<Tensor> x = inputs_for({.T = T}, 40);
  const auto finite = [](const std::vector<Tensor>& ts) {
    for (const Tensor& t : ts)
      for (double value : t.to_vector())
        if (!std::isfinite(value)) return false;
    return true;
  };
  const auto causal_sum = [&](const std::vector<Tensor>& in) {  // Σ_{j≤i} (q_i·k_j) Δ_j v_j: no decay, no normaliser
    const Tensor lower = indicator(T, [](int64_t i, int64_t j) { return j <= i; });
    const Tensor weights = matmul(in[0], transpose(in[1], 2, 3)) * lower * in[3].reshape({2, 2, 1, T});
    return matmul(weights, in[2]);
  };
  const Tensor skip = x[2] * x[5].reshape({1, 2, 1, 1});
  SUBCASE("exp(a_log)·Δ → 0: a = 1, plain causal linear attention without a normaliser") {
    x[4] = Tensor::full({2}, -60.0, DType::Float64).requires_grad_();  // λ ≈ −1e-27: a rounds to 1
    const auto got = output_and_gradients([](const std::vector<Tensor>& in) { return ssd(in, AttentionLayout::BHTD); }, x, 9);
    CHECK(finite(got));
    CHECK_CLOSE(got[0], causal_sum(x) + skip, 1e-12);
  }
  SUBCASE("Δ → 0: a → 1 and every term vanishes with Δ; the output tends to D·v at the rate Δ") {
    const double small = 1e-9;
    Tensor tiny_dt = (x[3] * small).detach().requires_grad_();
    x[3] = tiny_dt;
    const auto got = output_and_gradients([](const std::vector<Tensor>& in) { return ssd(in, AttentionLayout::BHTD); }, x, 9);
    CHECK(finite(got));
    CHECK_CLOSE((got[0] - skip) / small, causal_sum(x) / small, 1e-6);  // a = 1 − O(Δ)
  }
  SUBCASE("large Δ: a → 0, each position sees only itself") {
    x[3] = (x[3] * 1e4).detach().requires_grad_();  // λ ≈ −exp(−2)·2000: a = exp(λ) underflows to 0
    for (DType dtype : {DType::Float64, DType::Float32}) {
      CAPTURE(std::string(dtype_name(dtype)));
      std::vector<Tensor> in;
      for (const Tensor& t : x) in.push_back(t.detach().to(dtype).requires_grad_());
      const auto got = output_and_gradients([](const std::vector<Tensor>& i) { return ssd(i, AttentionLayout::BHTD); }, in, 9);
      CHECK(finite(got));
      const Tensor self = sum(in[0] * in[1], 3, true) * in[3].reshape({2, 2, T, 1}) * in[2];  // (q_i·k_i) Δ_i v_i
      CHECK_CLOSE(got[0], self + in[2] * in[5].reshape({1, 2, 1, 1}), dtype == DType::Float64 ? 1e-12 : 1e-6);
    }
  }
}

TEST_CASE("ssd attention: the weights it implies reproduce its output (A V = Z), zero above the diagonal") {
  for (int64_t T : {1, 5, 70}) {
    CAPTURE(T);
    const std::vector<Tensor> x = inputs_for({.Hq = 4, .Hkv = 2, .T = T}, 50);
    AttentionInternals internals;
    const Tensor Z = attention(x[0], x[1], x[2], ssd_spec(x, AttentionLayout::BHTD), &internals);
    const Tensor A = internals.probabilities;
    REQUIRE(A.shape() == Shape{2, 4, T, T});
    CHECK_CLOSE(matmul(A, repeat_kv(x[2], 4)), Z, 1e-12);
    const std::vector<double> a = A.to_vector();
    for (int64_t row = 0; row < 2 * 4 * T; ++row)
      for (int64_t j = row % T + 1; j < T; ++j) CHECK(a[row * T + j] == 0.0);
  }
}

TEST_CASE("ssd attention: float32 agrees with float64") {
  const std::vector<Tensor> x = inputs_for({.Hq = 4, .Hkv = 2, .T = 130, .d = 8}, 60);
  ag::test::check_float32_matches_float64(
      [](const std::vector<Tensor>& in) { return ssd(in, AttentionLayout::BHTD); }, x);
}

// Not T = 1: one position has no decay to learn, a_log's gradient is 0, and both sides are rounding noise.
TEST_CASE_EVERY_DEVICE("ssd attention: on every device as on the CPU, output and every gradient (both layouts, GQA)") {
  for (int64_t T : {2, 65, 200})
    for (AttentionLayout layout : {AttentionLayout::BHTD, AttentionLayout::BTHD}) {
      CAPTURE(T);
      CAPTURE(layout == AttentionLayout::BTHD);
      const std::vector<Tensor> x = inputs_for({.Hq = 4, .Hkv = 2, .T = T, .d = 16, .layout = layout}, 70);
      const GradcheckFn f = [&](const std::vector<Tensor>& in) { return ssd(in, layout); };
      if (device == Device::CPU) ag::test::check_float32_matches_float64(f, x);
      else ag::test::check_device_matches_cpu(device, f, x);
    }
}

// Head width 4 in one chunk of 64, and 64 in chunks of 16: after a prefill of 5 rows, 35 rows at
// once (three chunks on top of a state), then one row at a time.
TEST_CASE_EVERY_DEVICE("ssd attention: decoding from the state in a LayerKVCache gives the causal op's rows (GQA, BTHD)") {
  struct Width {
    int64_t d, chunk;
  };
  for (const Width w : {Width{4, 64}, Width{64, 16}})
    for (int64_t Hkv : {4, 2, 1})
      for (DType dtype : {DType::Float64, DType::Float32}) {
        CAPTURE(w.d);
        CAPTURE(w.chunk);
        CAPTURE(Hkv);
        CAPTURE(std::string(dtype_name(dtype)));
        const double tolerance = dtype == DType::Float64 ? 1e-12 : 1e-5;
        const int64_t T = 70;
        std::vector<Tensor> x =
            inputs_for({.Hq = 4, .Hkv = Hkv, .T = T, .d = w.d, .layout = AttentionLayout::BTHD}, 80, dtype);
        for (Tensor& t : x) t = t.detach().to(device);
        const Tensor full = ssd(x, AttentionLayout::BTHD, w.chunk).to(Device::CPU);
        NoGradGuard no_grad;
        LayerKVCache cache{.capacity = T};
        const auto rows = [&](int64_t first, int64_t end) {
          std::vector<Tensor> in = {slice(x[0], 1, first, end), slice(x[1], 1, first, end),
                                    slice(x[2], 1, first, end), slice(x[3], 1, first, end), x[4], x[5]};
          AttentionSpec spec = ssd_spec(in, AttentionLayout::BTHD, w.chunk);
          spec.cache = &cache;
          return attention(in[0], in[1], in[2], spec);
        };
        std::vector<Tensor> out = {rows(0, 5), rows(5, 40)};  // a prefill, then a block of rows
        for (int64_t t = 40; t < T; ++t) out.push_back(rows(t, t + 1));
        CHECK_CLOSE(concat(out, 1).to(Device::CPU), full, tolerance);
        CHECK(cache.length == T);
        CHECK(!cache.k.defined());                            // no keys or values kept
        CHECK(cache.state.shape() == Shape{2, 4, w.d, w.d});  // d × d per query head, whatever T is
        CHECK_THROWS_AS(rows(0, 1), Error);                   // full
      }
}

// The shapes the CUDA kernels tile differently (cuda/chunked_kernels.cuh): chunks of 1, 16 and 64
// positions with T = 1, below a chunk, a multiple of one and not; head widths 32, 64 and 128 (r and e
// past one 32-wide slice of the contraction and one 64-wide output tile); grouped kv heads; float32
// and float64. Each backward runs two anticausal products, so both directions are in every case. On
// the CPU the chunked op equals one chunk of all T (the masked form alone, float64); on a device it
// equals the CPU. At T = 1 nothing decays and a_log's gradient is rounding noise on both sides, so a
// device holds a_log fixed there.
struct ChunkCase {
  int64_t T, chunk, d, Hkv;
};
const ChunkCase kChunkCases[] = {{1, 64, 32, 2},  {17, 16, 64, 1}, {100, 16, 32, 2}, {130, 64, 128, 1},
                                 {40, 1, 32, 4},  {64, 64, 64, 2}, {63, 64, 128, 4}, {129, 16, 64, 2}};

TEST_CASE_EVERY_DEVICE("ssd attention: chunks of 1, 16, 64 positions, head widths 32, 64, 128 and T from 1 to 130 on every device as on the CPU") {
  for (const ChunkCase& s : kChunkCases)
    for (DType dtype : {DType::Float64, DType::Float32}) {
      if (device == Device::CPU && dtype == DType::Float32) continue;  // "float32 agrees with float64", above
      CAPTURE(s.T);
      CAPTURE(s.chunk);
      CAPTURE(s.d);
      CAPTURE(s.Hkv);
      CAPTURE(std::string(dtype_name(dtype)));
      std::vector<Tensor> x = inputs_for({.Hq = 4, .Hkv = s.Hkv, .T = s.T, .d = s.d}, 100 + s.T);
      const GradcheckFn f = [&](const std::vector<Tensor>& in) { return ssd(in, AttentionLayout::BHTD, s.chunk); };
      if (device == Device::CPU) {
        const GradcheckFn whole = [&](const std::vector<Tensor>& in) { return ssd(in, AttentionLayout::BHTD, s.T); };
        const std::vector<Tensor> got = output_and_gradients(f, x, 7), want = output_and_gradients(whole, x, 7);
        for (size_t i = 0; i < got.size(); ++i) {
          CAPTURE(kNames[i]);
          CHECK_CLOSE(got[i], want[i], 1e-12);
        }
        continue;
      }
      if (s.T == 1) x[4] = x[4].detach();
      ag::test::check_device_matches_cpu(device, f, x, dtype == DType::Float64 ? 1e-12 : 1e-5, dtype);
    }
}

// Many problems at a length a device trains at: 2 batch entries × 16 query heads (over 4 kv heads)
// × 4096 positions, 64 chunks each (float32; sums over 4096 positions: 1e-4, as tests/helpers.h
// says), then the same bits when run again. On the CPU the same-bits check alone, at T = 300.
TEST_CASE_EVERY_DEVICE("ssd attention: T = 4096 over 32 problems on every device as on the CPU, the same bits when run again") {
  const bool cpu = device == Device::CPU;
  const std::vector<Tensor> x =
      inputs_for({.B = 2, .Hq = cpu ? 4 : 16, .Hkv = cpu ? 2 : 4, .T = cpu ? 300 : 4096, .d = 64,
                  .layout = AttentionLayout::BTHD},
                 110);
  const GradcheckFn f = [](const std::vector<Tensor>& in) { return ssd(in, AttentionLayout::BTHD); };
  if (!cpu) ag::test::check_device_matches_cpu(device, f, x, 1e-4);
  ag::test::check_same_bits_again(device, [&] {
    std::vector<Tensor> in;
    for (const Tensor& t : x) in.push_back(ag::test::copy_to(device, t, DType::Float32));
    return output_and_gradients(f, in, 9);
  });
}

// Whether a function's parameter type holds softmax's own parameters, or ssd's decay inputs.
template <class P>
constexpr bool has_softmax_parameters = requires(P p) { p.pattern; } || requires(P p) { p.scale; } ||
                                        requires(P p) { p.q_offset; } || requires(P p) { p.kv_length; };
template <class P>
constexpr bool has_decay = requires(P p) { p.dt; } || requires(P p) { p.a_log; } || requires(P p) { p.d_skip; };

TEST_CASE("ssd attention: bad input is a clear error naming it") {
  const std::vector<Tensor> x = inputs_for({.T = 6}, 90);
  const auto message = [&](AttentionSpec spec) {
    try {
      attention(x[0], x[1], x[2], spec);
    } catch (const Error& e) {
      return std::string(e.what());
    }
    return std::string("no error");
  };
  const AttentionSpec good = ssd_spec(x, AttentionLayout::BHTD);
  AttentionSpec spec = good;
  spec.causal = false;
  CHECK(message(spec).find("causal") != std::string::npos);
  // A sparse pattern (and softmax's scale, offset and rows) is SoftmaxAttention's: an ssd spec has none to give.
  static_assert(has_softmax_parameters<SoftmaxAttention> && !has_softmax_parameters<SsdAttention>);
  spec = good;
  spec.position = PositionEncoding::Alibi;
  CHECK(message(spec).find("alibi") != std::string::npos);
  spec = good;
  std::get<SsdAttention>(spec.function).a_log = {};
  CHECK(message(spec).find("a_log [2] is missing") != std::string::npos);
  spec = good;
  std::get<SsdAttention>(spec.function).dt = slice(x[3], 2, 0, 5);
  CHECK(message(spec).find("dt") != std::string::npos);
  spec = good;
  std::get<SsdAttention>(spec.function).d_skip = Tensor::ones({3}, DType::Float64);
  CHECK(message(spec).find("d_skip") != std::string::npos);
  // Δ and friends are ssd's alone: the other functions' parameters have no place for them.
  static_assert(has_decay<SsdAttention> && !has_decay<SoftmaxAttention> && !has_decay<LinearAttention>);
  CHECK(message(good) == "no error");
}

// --- the ops around it: SiLU, softplus, the causal depthwise convolution --------------------------

TEST_CASE("ssd layers: silu and softplus match their formulas, stay finite at ±800, and pass gradcheck") {
  const std::vector<double> xs = {-800, -50, -20, -3, -0.5, 0, 0.25, 2, 20, 50, 800};
  for (DType dtype : {DType::Float64, DType::Float32}) {
    CAPTURE(std::string(dtype_name(dtype)));
    const Tensor x = Tensor::from_vector(xs, {static_cast<int64_t>(xs.size())}, dtype).requires_grad_();
    const Tensor s = silu(x), p = softplus(x);
    (s + p).backward(Tensor::ones(x.shape(), dtype));
    const std::vector<double> sv = s.to_vector(), pv = p.to_vector(), g = x.grad().to_vector();
    const double tol = dtype == DType::Float64 ? 1e-15 : 1e-6;
    for (size_t i = 0; i < xs.size(); ++i) {
      CAPTURE(xs[i]);
      const long double v = xs[i], sigma = 1.0L / (1.0L + std::exp(-v));
      const long double silu_exact = v * sigma, softplus_exact = v > 0 ? v + std::log1p(std::exp(-v)) : std::log1p(std::exp(v));
      const long double grad_exact = sigma * (1 + v * (1 - sigma)) + sigma;
      CHECK(std::isfinite(sv[i]));
      CHECK(std::isfinite(pv[i]));
      CHECK(std::isfinite(g[i]));
      CHECK(std::fabs(sv[i] - static_cast<double>(silu_exact)) <= tol * std::max(1.0, std::fabs(static_cast<double>(silu_exact))));
      CHECK(std::fabs(pv[i] - static_cast<double>(softplus_exact)) <= tol * std::max(1.0, static_cast<double>(softplus_exact)));
      CHECK(std::fabs(g[i] - static_cast<double>(grad_exact)) <= tol * std::max(1.0, std::fabs(static_cast<double>(grad_exact))));
    }
  }
  CHECK_GRADCHECK([](const std::vector<Tensor>& in) { return silu(in[0]) * softplus(in[0]); },
                  std::vector<Tensor>{(random({3, 5}, 1, DType::Float64, false) * 3.0).requires_grad_()});
}

// y_{b,t,c} = bias_c + Σ_s w[s, c] x_{b, t−W+1+s, c}, by loops.
Tensor conv_reference(const Tensor& x, const Tensor& w, const Tensor& bias) {
  const int64_t B = x.size(0), T = x.size(1), C = x.size(2), W = w.size(0);
  const std::vector<double> xv = x.to_vector(), wv = w.to_vector(), bv = bias.defined() ? bias.to_vector() : std::vector<double>(C);
  std::vector<double> y(B * T * C);
  for (int64_t b = 0; b < B; ++b)
    for (int64_t t = 0; t < T; ++t)
      for (int64_t c = 0; c < C; ++c) {
        double acc = bv[c];
        for (int64_t s = 0; s < W; ++s)
          if (t - W + 1 + s >= 0) acc += wv[s * C + c] * xv[(b * T + t - W + 1 + s) * C + c];
        y[(b * T + t) * C + c] = acc;
      }
  return Tensor::from_vector(y, x.shape(), DType::Float64);
}

TEST_CASE("ssd layers: the causal depthwise convolution equals its loops and passes gradcheck (W 1, 3, 4 — T < W and T ≥ W)") {
  for (int64_t W : {1, 3, 4})
    for (int64_t T : {2, 9})
      for (bool with_bias : {true, false}) {
        CAPTURE(W);
        CAPTURE(T);
        CAPTURE(with_bias);
        const Tensor x = random({2, T, 5}, 10 + W), w = random({W, 5}, 20 + W), b = with_bias ? random({5}, 30) : Tensor();
        CHECK_CLOSE(causal_conv1d(x, w, b), conv_reference(x, w, b), 1e-15);
        std::vector<Tensor> inputs = {x, w};
        if (with_bias) inputs.push_back(b);
        CHECK_GRADCHECK([&](const std::vector<Tensor>& in) { return causal_conv1d(in[0], in[1], with_bias ? in[2] : Tensor()); },
                        inputs);
      }
  CHECK_THROWS_WITH_AS(causal_conv1d(random({2, 4, 5}, 1), random({3, 6}, 2)), doctest::Contains("weight [W, C]"), Error);
  CHECK_THROWS_WITH_AS(causal_conv1d(random({2, 4, 5}, 1), random({3, 5}, 2), random({4}, 3)), doctest::Contains("bias must be [C]"), Error);
}

TEST_CASE_EVERY_DEVICE("ssd layers: silu, softplus and the convolution on every device as on the CPU") {
  const std::vector<Tensor> x = {random({3, 7, 6}, 41) * 4.0, random({4, 6}, 42), random({6}, 43)};
  const GradcheckFn f = [](const std::vector<Tensor>& in) {
    return silu(causal_conv1d(in[0], in[1], in[2])) + softplus(in[0]);
  };
  if (device == Device::CPU) ag::test::check_float32_matches_float64(f, x);
  else ag::test::check_device_matches_cpu(device, f, x);
}

namespace {

// The small ssd models the model-level tests try: the defaults (convolution of 4, gated), neither
// part, and a convolution of 3 with grouped kv heads and no positions.
struct ModelCase {
  int64_t conv;
  bool gate;
  int64_t kv_heads;
  PositionEncoding position;
};
const ModelCase kModels[] = {{4, true, 0, PositionEncoding::Learned},
                             {0, false, 0, PositionEncoding::Learned},
                             {3, true, 1, PositionEncoding::None}};

nn::GPTConfig ssd_model(const ModelCase& m) {
  nn::GPTConfig config = test::gpt_sizes(11, 20, 2, 2, 16);
  config.n_kv_head = m.kv_heads;
  config.attention = AttentionFunction::Ssd;
  config.ssd_conv = m.conv;
  config.ssd_gate = m.gate;
  config.position = m.position;
  return config;
}

}  // namespace

TEST_CASE("ssd attention: the module's float64 gradcheck over the input and every parameter (conv, dt, a_log, d_skip, gate)") {
  for (const ModelCase& m : kModels) {
    CAPTURE(m.conv);
    CAPTURE(m.gate);
    Generator gen(3);
    nn::SsdSelfAttention attn({.C = 8, .H = 2, .H_kv = m.kv_heads}, {.conv = m.conv, .gate = m.gate}, &gen);
    std::vector<std::string> names;
    for (const NamedTensor& p : attn.named_parameters()) names.push_back(p.name);
    CHECK((std::find(names.begin(), names.end(), "conv.weight") != names.end()) == (m.conv > 0));
    CHECK((std::find(names.begin(), names.end(), "w_g.weight") != names.end()) == m.gate);
    for (const char* name : {"w_dt.weight", "w_dt.bias", "a_log", "d_skip"})
      CHECK(std::find(names.begin(), names.end(), name) != names.end());
    // Δ's bias 0 (Δ near 0.7, not Mamba's 1e-3 … 0.1): the paths through q and k then weigh about as
    // much as the skip's, and their gradients stand well above the differences' rounding.
    std::vector<NamedTensor> state = attn.named_parameters();
    for (NamedTensor& p : state)
      if (p.name == "w_dt.bias") p.tensor = Tensor::zeros(p.tensor.shape());
    attn.load_state(state);
    ag::test::check_module_gradients(attn, random({2, 7, 8}, 5), [&](const Tensor& x) { return attn.forward(x); });
  }
}

TEST_CASE("ssd attention: initialised as Mamba (a_log = log U[1, 16], Δ(0) in [1e-3, 0.1], d_skip = 1), kept by the GPT's init") {
  Generator gen(1);
  nn::GPT model(ssd_model(kModels[0]), gen);
  std::map<std::string, Tensor> p;
  for (const NamedTensor& t : model.named_parameters()) p[t.name] = t.tensor;
  for (int64_t l = 0; l < 2; ++l) {
    const std::string attn = "blocks." + std::to_string(l) + ".attn.";
    for (double a : p.at(attn + "a_log").to_vector()) {
      CHECK(a >= 0.0);
      CHECK(a <= std::log(16.0) + 1e-6);
    }
    for (double b : p.at(attn + "w_dt.bias").to_vector()) {
      const double dt = std::log1p(std::exp(b));  // softplus
      CHECK(dt >= 1e-3 * (1 - 1e-5));
      CHECK(dt <= 0.1 * (1 + 1e-5));
    }
    for (double d : p.at(attn + "d_skip").to_vector()) CHECK(d == 1.0);
    const std::vector<double> conv = p.at(attn + "conv.weight").to_vector();  // U(±1/√W), not the 0.02 of the GPT's init
    CHECK(*std::max_element(conv.begin(), conv.end()) > 0.1);
    CHECK(*std::max_element(conv.begin(), conv.end()) <= 0.5);
  }
}

TEST_CASE("ssd attention: a GPT generating token by token from its state (in its KV cache) gives the full forward's logits") {
  for (const ModelCase& m : kModels) {
    CAPTURE(m.conv);
    CAPTURE(m.gate);
    CAPTURE(m.kv_heads);
    Generator gen(1);
    nn::GPT model(ssd_model(m), gen);
    NoGradGuard no_grad;
    std::vector<int64_t> ids;
    for (int64_t t = 0; t < 20; ++t) ids.push_back((t * 7 + 3) % 11);
    const Tensor whole = model.forward(Tensor::from_indices(ids, {1, 20}));  // [1, 20, V]
    nn::KVCache cache = model.make_kv_cache(1);
    const Tensor prompt = model.forward_cached(Tensor::from_indices({ids.begin(), ids.begin() + 5}, {1, 5}), cache);
    const int64_t state_bytes = cache.bytes();  // per layer S [1, H, d_h, d_h] and the convolution's last W − 1 inputs
    const int64_t conv_bytes = m.conv > 0 ? (m.conv - 1) * (16 + 2 * 8 * (m.kv_heads == 0 ? 2 : m.kv_heads)) * 4 : 0;
    CHECK(state_bytes == 2 * (2 * 8 * 8 * 4 + conv_bytes));
    CHECK(cache.bytes_per_token() == 0);  // nothing grows with the positions
    std::vector<Tensor> steps = {prompt};
    for (int64_t t = 5; t < 20; ++t) steps.push_back(model.forward_cached(Tensor::from_indices({ids[t]}, {1, 1}), cache));
    CHECK(cache.length() == 20);
    CHECK(cache.bytes() == state_bytes);
    CHECK_CLOSE(concat(steps, 1), whole, 1e-5);
    cache.clear();  // a refill restarts the state and the convolution's inputs
    CHECK_CLOSE(model.forward_cached(Tensor::from_indices({ids.begin(), ids.begin() + 5}, {1, 5}), cache), prompt, 1e-12);
  }
}

TEST_CASE("ssd attention: bad options and checkpoints are clear errors naming them") {
  nn::GPTConfig config = ssd_model(kModels[0]);
  Generator gen(1);
  const auto build_error = [&](const nn::GPTConfig& c) { return ag::test::error_of([&] { nn::GPT model(c, gen); }); };
  nn::GPTConfig bad = config;
  bad.ssd_conv = -1;
  CHECK(build_error(bad).find("--ssd-conv") != std::string::npos);
  bad = config;
  bad.position = PositionEncoding::Alibi;
  CHECK(build_error(bad).find("alibi") != std::string::npos);
  bad = config;
  bad.attn_window = 4;
  CHECK(build_error(bad).find("--attn-window 4 is an option of softmax attention") != std::string::npos);

  const ag::test::TempDir dir("ssd_checkpoints");
  nn::GPT model(config, gen);
  const std::string good = dir.file("good.safetensors");
  char_lm::save_model(good, model, text::Tokenizer::from_text("abcdefghijk"), 0);
  const SafetensorsFile file = load_safetensors(good);
  const auto load_error = [&](const std::function<bool(NamedTensor&)>& edit) {
    std::vector<NamedTensor> tensors;
    for (NamedTensor t : file.tensors)
      if (edit(t)) tensors.push_back(t);
    const std::string path = dir.file("edited.safetensors");
    save_safetensors(path, tensors, file.metadata);
    try {
      char_lm::load_model(path);
    } catch (const Error& e) {
      return std::string(e.what());
    }
    return std::string("no error");
  };
  CHECK(load_error([](NamedTensor&) { return true; }) == "no error");
  CHECK(load_error([](NamedTensor& t) { return t.name != "blocks.1.attn.a_log"; }).find("has no tensor 'blocks.1.attn.a_log'") !=
        std::string::npos);
  const std::string wrong_shape = load_error([](NamedTensor& t) {
    if (t.name == "blocks.0.attn.conv.weight") t.tensor = Tensor::zeros({3, 48});
    return true;
  });
  INFO(wrong_shape);
  CHECK(wrong_shape.find("'blocks.0.attn.conv.weight' is [3,48] but __metadata__ (ssd_conv") != std::string::npos);
}

TEST_CASE("ssd attention: char_lm trains an ssd model — greedy text is the same from the state as recomputed — maps") {
  const ag::test::TempDir dir("ssd_char_lm");
  char_lm::TrainConfig c = ag::test::tiny_run(dir.path());
  c.model.attention = AttentionFunction::Ssd;
  c.model.ssd_conv = 3;
  c.run.max_iters = 4;
  char_lm::train(c);
  const std::string path = char_lm::model_path(char_lm::find_checkpoint(dir.path()));
  const SafetensorsFile file = load_safetensors(path);
  CHECK(file.metadata.at("attention") == "ssd");
  CHECK(file.metadata.at("ssd_conv") == "3");
  CHECK(file.metadata.at("ssd_gate") == "true");
  char_lm::LoadedModel loaded = char_lm::load_model(path);
  char_lm::SampleOptions greedy;
  greedy.top_k = 1;
  greedy.tokens = 15;  // with the start token, the 16 positions of block_size
  const std::string recurrent = char_lm::generate(*loaded.model, loaded.tokenizer, "", greedy);
  greedy.no_kv_cache = true;
  const std::string recomputed = char_lm::generate(*loaded.model, loaded.tokenizer, "", greedy);
  CHECK(recurrent.size() >= 15);
  CHECK(recurrent == recomputed);
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
  CHECK(ag::test::read_file(dir.file("maps/layer-0.svg")).find("ssd implies") != std::string::npos);
  // --ssd-gate false on the command line turns the gate off (a switch that is on by default)
  std::tie(status, output) = ag::test::run_char_lm(
      "train --attention ssd --ssd-gate false --ssd-conv 0 --n-layer 1 --n-embd 16 --n-head 2 --block-size 8 "
      "--batch-size 2 --max-iters 1 --eval-interval 1 --eval-iters 1 --sample-tokens 0 --data '" +
      c.run.data + "' --out '" + dir.file("ungated") + "'");
  INFO(output);
  REQUIRE(status == 0);
  const SafetensorsFile ungated = load_safetensors(char_lm::model_path(char_lm::find_checkpoint(dir.file("ungated"))));
  CHECK(ungated.metadata.at("ssd_gate") == "false");
  CHECK(!ungated.contains("blocks.0.attn.w_g.weight"));
  CHECK(!ungated.contains("blocks.0.attn.conv.weight"));
}

}  // namespace ssd_test
