// The engine: accumulation, topological order, no-grad, freeing, and its errors.
#include "core/profiler.h"
#include "tests/helpers.h"

// The file's names and using-directives stay its own in a unity build, where the test
// files compile as one translation unit (CMakeLists.txt).
namespace autograd_test {

using namespace ag;
using ag::test::random;

TEST_CASE("autograd: gradients accumulate into .grad until zeroed") {
  Tensor x = Tensor::from_vector({1, 2, 3}, {3}, DType::Float64).requires_grad_();
  sum(x * x).backward();
  CHECK(x.grad().to_vector() == std::vector<double>{2, 4, 6});
  sum(x * 3.0).backward();
  CHECK(x.grad().to_vector() == std::vector<double>{5, 7, 9});
  x.zero_grad();
  CHECK_FALSE(x.grad().defined());
}

TEST_CASE("autograd: a diamond graph sums both paths, each node run once") {
  // y = a*b + a*c with b = 2a, c = a²  ⇒  y = 2a² + a³,  dy/da = 4a + 3a².
  Tensor a = Tensor::from_vector({0.5, -2}, {2}, DType::Float64).requires_grad_();
  const Tensor b = a * 2.0;
  const Tensor c = a * a;
  sum(a * b + a * c).backward();
  CHECK(a.grad().to_vector()[0] == doctest::Approx(4 * 0.5 + 3 * 0.25));
  CHECK(a.grad().to_vector()[1] == doctest::Approx(-8 + 12));
}

TEST_CASE("autograd: a gradient shared by two paths is summed into a new tensor, never in place") {
  // add's backward hands its one upstream tensor to both inputs. Here both are
  // interior nodes (u = 3x, v = 5x) that also get a second gradient each (from
  // w = u·v), so each pending sum must leave the shared tensor alone:
  // s = u + v + u·v  ⇒  ds/du = 1 + v,  ds/dv = 1 + u,  ds/dx = 3(1 + 5x) + 5(1 + 3x) = 8 + 30x.
  Tensor x = Tensor::from_vector({0.5, -2}, {2}, DType::Float64).requires_grad_();
  const Tensor u = x * 3.0, v = x * 5.0;
  sum((u + v) + u * v).backward();
  CHECK(x.grad().to_vector()[0] == doctest::Approx(8 + 30 * 0.5));
  CHECK(x.grad().to_vector()[1] == doctest::Approx(8 - 60));
  // The same graph with the product first: the pending sums then start from the product's gradients.
  Tensor y = Tensor::from_vector({0.5, -2}, {2}, DType::Float64).requires_grad_();
  const Tensor p = y * 3.0, q = y * 5.0;
  sum(p * q + (p + q)).backward();
  CHECK(y.grad().to_vector() == x.grad().to_vector());
}

TEST_CASE("autograd: products reading one tensor add their input gradients onto the one pending, in place") {
  // h = 2x is read by three products, as the attention's input is by W_Q, W_K and
  // W_V. The first product's dH is pending when the next two run backward, and
  // they add theirs onto it (a GEMM with beta 1): backward adds no [4, 5] tensors.
  Tensor x = random({4, 5}, 150), w1 = random({5, 3}, 151), w2 = random({5, 3}, 152), w3 = random({5, 3}, 153);
  const Tensor b1 = random({3}, 154), b2 = random({3}, 155), c = random({4, 3}, 156, DType::Float64, false);
  const auto loss = [&](const std::vector<Tensor>& in) {
    const Tensor h = in[0] * 2.0;
    return sum(linear(h, in[1], b1) * c) + sum(linear(h, in[2], b2) * c) + sum(matmul(h, in[3]) * c);
  };
  const GradcheckResult check = gradcheck(loss, {x, w1, w2, w3});
  CHECK_MESSAGE(check.passed, check.summary());

  const Tensor l = loss({x, w1, w2, w3});
  profiler::start();
  l.backward();
  int adds = 0, accumulating_products = 0;
  for (const profiler::KernelRecord& r : profiler::stop()) {
    adds += std::string(r.kernel) == "binary" && r.shapes[0] == Shape{4, 5};
    accumulating_products += r.is_gemm && r.gemm.beta == 1.0 && r.gemm.M == 4 && r.gemm.N == 5;
  }
  CHECK(adds == 0);
  CHECK(accumulating_products == 2);
}

TEST_CASE("autograd: the graph keeps an op's inputs as edges, not their memory") {
  // y = 2u reads u, and its backward needs none of u's values: once the caller
  // drops u, its memory goes, though backward still passes through u's node.
  Tensor x = random({16, 8}, 160), w = random({8, 32}, 161);
  Tensor u = matmul(x, w);
  const std::weak_ptr<Storage> u_memory = u.impl()->storage;
  const Tensor y = u * 2.0;
  u = Tensor();
  CHECK(u_memory.expired());
  sum(y).backward();
  // d sum(2 x w) / dx = 2 · (row sums of w) in every row.
  const std::vector<double> dx = x.grad().to_vector(), wv = w.to_vector();
  bool all_match = true;
  for (int64_t i = 0; i < 16; ++i)
    for (int64_t k = 0; k < 8; ++k) {
      double row_sum = 0;
      for (int64_t j = 0; j < 32; ++j) row_sum += wv[k * 32 + j];
      all_match &= std::abs(dx[i * 8 + k] - 2 * row_sum) < 1e-12;
    }
  CHECK(all_match);
}

TEST_CASE("autograd: explicit upstream gradient for a non-scalar output") {
  Tensor x = Tensor::from_vector({1, 2}, {2}, DType::Float64).requires_grad_();
  (x * x).backward(Tensor::from_vector({10, 100}, {2}, DType::Float64));
  CHECK(x.grad().to_vector() == std::vector<double>{20, 400});
}

TEST_CASE("autograd: no-grad guard records nothing") {
  Tensor x = Tensor::ones({2}).requires_grad_();
  {
    NoGradGuard no_grad;
    const Tensor y = x * 2.0;
    CHECK_FALSE(y.requires_grad());
    CHECK(y.grad_fn() == nullptr);
  }
  CHECK((x * 2.0).requires_grad());
}

TEST_CASE("autograd: a deep chain does not overflow the stack") {
  Tensor x = Tensor::ones({1}, DType::Float64).requires_grad_();
  Tensor y = x;
  for (int i = 0; i < 100000; ++i) y = y * 1.0;
  sum(y).backward();
  CHECK(x.grad().item() == 1.0);
}

TEST_CASE("autograd: the graph is freed after backward, and retained on request") {
  Tensor x = Tensor::ones({2}, DType::Float64).requires_grad_();
  const Tensor loss = sum(x * x);
  constexpr bool retain_graph = true;
  loss.backward(retain_graph);
  loss.backward();
  CHECK(x.grad().to_vector() == std::vector<double>{4, 4});
  CHECK_THROWS_WITH_AS(loss.backward(), doctest::Contains("freed graph"), Error);
}

TEST_CASE("autograd: errors for non-scalar backward and tensors without grad") {
  Tensor x = Tensor::ones({2, 3}).requires_grad_();
  CHECK_THROWS_WITH_AS((x * 2.0).backward(), doctest::Contains("[2,3]"), Error);
  CHECK_THROWS_WITH_AS(Tensor::ones({1}).backward(), doctest::Contains("does not require grad"), Error);
  CHECK_THROWS_AS(Tensor::from_indices({1}, {1}).requires_grad_(), Error);
}

TEST_CASE("autograd: gradcheck reports a wrong gradient with its location") {
  // A deliberately wrong backward (d/dx x² claimed to be x) must fail, naming the worst entry.
  const GradcheckFn f = [](const std::vector<Tensor>& in) {
    const Tensor y = in[0].detach() * in[0].detach();
    return record("wrong_square", {in[0]}, y, [X = in[0].detach()](const Tensor& dY) -> Gradients { return {dY * X}; });
  };
  const GradcheckResult r = gradcheck(f, {Tensor::from_vector({1, 2, 3}, {3}, DType::Float64).requires_grad_()});
  CHECK_FALSE(r.passed);
  REQUIRE(r.inputs.size() == 1);
  CHECK(r.inputs[0].max_rel_error == doctest::Approx(0.5));
  CHECK(r.summary().find("FAILED") != std::string::npos);
}

}  // namespace autograd_test
