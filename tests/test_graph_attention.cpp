// GAT's pieces in the one attention op (docs/backprop.md §37): LeakyReLU and ELU as ops, the
// additive score S_ij = LeakyReLU(α_i + β_j) (SoftmaxAttention::score = Additive) and dropout
// on the attention coefficients (SoftmaxAttention::dropout). Each equals a reference composed
// here from other ops (float64, 1e-12, the output and every gradient), for the composed and
// dense implementations, with an adjacency mask, grouped kv heads and both layouts; float64
// gradcheck of every path, dropout included (a fixed seed: a fixed mask); CPU against CUDA;
// flash and bad settings refused with an error naming what is wrong.
#include <string>
#include <vector>

#include "tests/helpers.h"

// The file's names and using-directives stay its own in a unity build, where the test
// files compile as one translation unit (CMakeLists.txt).
namespace graph_attention_test {

using namespace ag;
using ag::test::random;
using Inputs = std::vector<Tensor>;

namespace {

// A deterministic graph on T nodes with self-loops (every row sees a key), as int64 [T, T].
Tensor graph_adjacency(int64_t T) {
  std::vector<int64_t> a(T * T, 0);
  for (int64_t i = 0; i < T; ++i)
    for (int64_t j = 0; j < T; ++j) a[i * T + j] = i == j || (i * 5 + j * 3) % 7 == 0 || (j * 5 + i * 3) % 7 == 0;
  return Tensor::from_indices(a, {T, T});
}

// M [T, T] from the adjacency: 0 where i sees j, −∞ elsewhere (float64 on the adjacency's device).
Tensor minus_inf_mask(const Tensor& adjacency) {
  std::vector<double> m;
  for (const double x : adjacency.to_vector()) m.push_back(x != 0 ? 0.0 : -std::numeric_limits<double>::infinity());
  return Tensor::from_vector(m, adjacency.shape(), DType::Float64).to(adjacency.device());
}

// GAT's layer written out from ops other than the op under test: BHTD, Hq = Hkv.
//   α = Σ_c Q, β = Σ_c K, S = relu(α + β) − a·relu(−(α + β)), A = softmax(S + M), Z = dropout(A) V
Tensor reference(const Tensor& q, const Tensor& k, const Tensor& v, const Tensor& adjacency, double slope,
                 double p = 0, uint64_t seed = 0) {
  const Tensor u = sum(q, 3, true) + transpose(sum(k, 3, true), 2, 3);
  const Tensor S = relu(u) - relu(neg(u)) * slope;
  Tensor A = softmax(S + minus_inf_mask(adjacency));
  if (p > 0) {
    Generator gen(seed);
    A = dropout(A, p, true, &gen);
  }
  return matmul(A, v);
}

AttentionSpec gat_spec(AttentionImpl impl, const Tensor& adjacency, double p = 0, Generator* gen = nullptr) {
  SoftmaxAttention s{.impl = impl, .score = AttentionScore::Additive, .leaky_slope = 0.2};
  s.masks.adjacency = adjacency;
  s.dropout = {.p = p, .training = true, .generator = gen};
  return {.function = s};
}

const std::vector<AttentionImpl> kGatImpls = {AttentionImpl::Composed, AttentionImpl::Dense};

// f and g give the same output and the same gradient of every input (from one random upstream
// gradient), normwise relative to rtol.
void check_same_function(const GradcheckFn& f, const GradcheckFn& g, const Inputs& inputs, double rtol) {
  const auto upstream = [](const Tensor& z) {
    Generator gen(99);
    return Tensor::randn(z.shape(), z.dtype(), &gen);
  };
  const std::vector<Tensor> a = ag::test::output_and_gradients(f, inputs, upstream),
                            b = ag::test::output_and_gradients(g, inputs, upstream);
  for (size_t n = 0; n < a.size(); ++n) {
    INFO((n == 0 ? std::string("output") : "gradient of input " + std::to_string(n - 1)));
    CHECK_CLOSE(a[n], b[n], rtol);
  }
}

void check_throws_with(const std::function<void()>& call, const std::string& words) {
  const std::string message = ag::test::error_of(call);
  INFO("message: " << message);
  CHECK(ag::test::contains(message, words));
}

}  // namespace

TEST_CASE("leaky_relu and elu — values and float64 gradcheck") {
  const Tensor x = random({3, 7}, 11);
  const std::vector<double> xs = x.to_vector(), l = leaky_relu(x, 0.2).to_vector(), e = elu(x).to_vector();
  for (size_t n = 0; n < xs.size(); ++n) {
    CHECK(l[n] == doctest::Approx(xs[n] > 0 ? xs[n] : 0.2 * xs[n]).epsilon(1e-15));
    CHECK(e[n] == doctest::Approx(xs[n] > 0 ? xs[n] : std::expm1(xs[n])).epsilon(1e-15));
  }
  CHECK_GRADCHECK([](const Inputs& in) { return leaky_relu(in[0], 0.2); }, Inputs{x});
  CHECK_GRADCHECK([](const Inputs& in) { return elu(in[0]); }, Inputs{x});
  CHECK_GRADCHECK([](const Inputs& in) { return leaky_relu(elu(in[0]) * 3.0, -0.5); }, Inputs{x});
}

TEST_CASE("additive scores — composed and dense equal the reference (float64, outputs and gradients)") {
  const int64_t T = 23, d = 4;
  const Tensor adjacency = graph_adjacency(T);
  for (const AttentionImpl impl : kGatImpls) {
    INFO("impl " << name_of(impl));
    const Inputs qkv = {random({2, 3, T, d}, 1), random({2, 3, T, d}, 2), random({2, 3, T, d}, 3)};
    const auto f = [&](const Inputs& x) { return attention(x[0], x[1], x[2], gat_spec(impl, adjacency)); };
    const auto r = [&](const Inputs& x) { return reference(x[0], x[1], x[2], adjacency, 0.2); };
    check_same_function(f, r, qkv, 1e-12);
  }
}

TEST_CASE("additive scores — grouped kv heads, BTHD and an indexed bias table equal composed") {
  const int64_t T = 19, d = 3;
  const Tensor adjacency = graph_adjacency(T);
  std::vector<int64_t> index(T * T);
  for (int64_t e = 0; e < T * T; ++e) index[e] = (e * 7) % 5;
  const Tensor index_t = Tensor::from_indices(index, {T, T});
  const Inputs in = {random({2, T, 4, d}, 4), random({2, T, 2, d}, 5), random({2, T, 2, d}, 6), random({4, 5}, 7)};
  const auto run = [&](AttentionImpl impl) {
    return [&, impl](const Inputs& x) {
      AttentionSpec spec = gat_spec(impl, adjacency);
      spec.layout = AttentionLayout::BTHD;
      std::get<SoftmaxAttention>(spec.function).mods.indexed = {.table = x[3], .index = index_t};
      return attention(x[0], x[1], x[2], spec);
    };
  };
  check_same_function(run(AttentionImpl::Dense), run(AttentionImpl::Composed), in, 1e-12);
  CHECK_GRADCHECK(run(AttentionImpl::Dense), in);
}

TEST_CASE("attention dropout — composed and dense drop the entries ag::dropout drops, eval is the identity") {
  const int64_t T = 21, d = 4;
  const Tensor adjacency = graph_adjacency(T);
  const Inputs qkv = {random({2, 2, T, d}, 8), random({2, 2, T, d}, 9), random({2, 2, T, d}, 10)};
  for (const AttentionImpl impl : kGatImpls) {
    INFO("impl " << name_of(impl));
    const auto f = [&](const Inputs& x) {
      Generator gen(77);
      return attention(x[0], x[1], x[2], gat_spec(impl, adjacency, 0.4, &gen));
    };
    const auto r = [&](const Inputs& x) { return reference(x[0], x[1], x[2], adjacency, 0.2, 0.4, 77); };
    check_same_function(f, r, qkv, 1e-12);
    CHECK_GRADCHECK(f, qkv);  // a fixed seed: a fixed mask
    // Off in eval: Z = AV whatever p is; and the generator moves on by B·Hq·T·T counters when on.
    Generator gen(77);
    SoftmaxAttention eval = std::get<SoftmaxAttention>(gat_spec(impl, adjacency, 0.4, &gen).function);
    eval.dropout.training = false;
    CHECK_CLOSE(attention(qkv[0], qkv[1], qkv[2], {.function = eval}), reference(qkv[0], qkv[1], qkv[2], adjacency, 0.2), 1e-12);
    CHECK(gen.offset() == 0);
    attention(qkv[0], qkv[1], qkv[2], gat_spec(impl, adjacency, 0.4, &gen));
    CHECK(gen.offset() == static_cast<uint64_t>(2 * 2 * T * T));
  }
}

TEST_CASE("additive scores — float64 gradcheck, composed and dense, with and without a mask") {
  const int64_t T = 9, d = 2;
  const Inputs qkv = {random({1, 2, T, d}, 12), random({1, 2, T, d}, 13), random({1, 2, T, d}, 14)};
  for (const AttentionImpl impl : kGatImpls) {
    INFO("impl " << name_of(impl));
    CHECK_GRADCHECK([&](const Inputs& x) { return attention(x[0], x[1], x[2], gat_spec(impl, graph_adjacency(T))); }, qkv);
    CHECK_GRADCHECK(
        [&](const Inputs& x) {
          return attention(x[0], x[1], x[2], {.function = SoftmaxAttention{.impl = impl, .score = AttentionScore::Additive}});
        },
        qkv);
  }
}

TEST_CASE("additive scores and attention dropout — refusals name what is wrong") {
  const Inputs qkv = {random({1, 1, 4, 2}, 1), random({1, 1, 4, 2}, 2), random({1, 1, 4, 2}, 3)};
  const auto refused = [&](SoftmaxAttention s, const std::string& words) {
    check_throws_with([&] { attention(qkv[0], qkv[1], qkv[2], {.function = s}); }, words);
  };
  refused({.impl = AttentionImpl::Flash, .score = AttentionScore::Additive}, "flash does not support them");
  refused({.impl = AttentionImpl::Flash, .dropout = {.p = 0.5}}, "flash does not support them");
  refused({.scale = 0.5, .score = AttentionScore::Additive}, "take no scale");
  refused({.dropout = {.p = 1.0}}, "outside [0, 1)");
  // Dropout alone (dot-product scores) is fine on composed and dense, and eval on flash.
  Generator gen(3);
  CHECK(attention(qkv[0], qkv[1], qkv[2], {.function = SoftmaxAttention{.dropout = {.p = 0.5, .generator = &gen}}}).defined());
  CHECK(attention(qkv[0], qkv[1], qkv[2],
                  {.function = SoftmaxAttention{.impl = AttentionImpl::Flash, .dropout = {.p = 0.5, .training = false}}})
            .defined());
}

TEST_CASE_EVERY_DEVICE("additive scores and attention dropout — every device equals the CPU") {
  if (device == Device::CPU) return;  // the CPU is the reference (the cases above)
  const int64_t T = 37, d = 8;
  const Inputs in = {random({2, 4, T, d}, 21), random({2, 2, T, d}, 22), random({2, 2, T, d}, 23), graph_adjacency(T)};
  for (const AttentionImpl impl : kGatImpls)
    for (const double p : {0.0, 0.3}) {
      INFO("impl " << name_of(impl) << ", p " << p);
      const GradcheckFn f = [impl, p](const Inputs& x) {
        Generator gen(5);
        return attention(x[0], x[1], x[2], gat_spec(impl, x[3], p, &gen));
      };
      ag::test::check_device_matches_cpu(device, f, in, 1e-10, DType::Float64);
    }
}

}  // namespace graph_attention_test
