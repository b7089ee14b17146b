// The fused scaled_dot_product_attention against gradcheck and against the
// composed reference built from core ops.
#include <cmath>

#include "tests/helpers.h"

using namespace ag;
using ag::test::random;

namespace {
using Inputs = std::vector<Tensor>;

// The reference: S = QKᵀ/√d_h, A = softmax(S + M), Z = AV from separate ops.
Tensor composed_attention(const Tensor& q, const Tensor& k, const Tensor& v, bool causal) {
  const int64_t T = q.size(-2), d = q.size(-1);
  Tensor s = matmul(q, transpose(k, -2, -1)) * (1.0 / std::sqrt(static_cast<double>(d)));
  if (causal) s = s + causal_mask(T, q.dtype());
  return matmul(softmax(s), v);
}

GradcheckFn fused(bool causal) {
  return [causal](const Inputs& x) { return scaled_dot_product_attention(x[0], x[1], x[2], causal); };
}
}  // namespace

TEST_CASE("attention op: gradcheck, causal and not, T from 1 to 33, d_h from 1 to 16") {
  const std::vector<std::pair<int64_t, int64_t>> sizes = {{1, 1}, {1, 4}, {2, 3}, {5, 1}, {7, 16}, {33, 2}, {16, 8}};
  for (const std::pair<int64_t, int64_t>& size : sizes)
    for (bool causal : {true, false}) {
      const int64_t T = size.first, d = size.second;
      CAPTURE(T);
      CAPTURE(d);
      CAPTURE(causal);
      const Inputs in = {random({2, 2, T, d}, 100 + T), random({2, 2, T, d}, 200 + d), random({2, 2, T, d}, 300)};
      CHECK_GRADCHECK(fused(causal), in);
      ag::test::check_float32_matches_float64(fused(causal), in);
    }
}

TEST_CASE("attention op: fused and composed agree to 1e-10 in output and gradients") {
  for (bool causal : {true, false}) {
    CAPTURE(causal);
    const Shape shape = {3, 2, 9, 5};
    Inputs a = {random(shape, 1), random(shape, 2), random(shape, 3)};
    Inputs b = {a[0].detach().clone().requires_grad_(), a[1].detach().clone().requires_grad_(),
                a[2].detach().clone().requires_grad_()};
    const Tensor upstream = random(shape, 4, DType::Float64, false);
    const Tensor z_fused = scaled_dot_product_attention(a[0], a[1], a[2], causal);
    const Tensor z_composed = composed_attention(b[0], b[1], b[2], causal);
    z_fused.backward(upstream);
    z_composed.backward(upstream);
    CHECK_CLOSE(z_fused, z_composed, 1e-10);
    for (int i = 0; i < 3; ++i) CHECK_CLOSE(a[i].grad(), b[i].grad(), 1e-10);
  }
}

TEST_CASE("attention op: A has rows summing to 1 and an exactly zero upper triangle") {
  const Shape shape = {1, 2, 6, 4};
  Tensor A;
  scaled_dot_product_attention(random(shape, 5), random(shape, 6), random(shape, 7), true, &A);
  REQUIRE(A.shape() == Shape{1, 2, 6, 6});
  const std::vector<double> a = A.to_vector();
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

TEST_CASE("attention op: scores around ±1e4 give finite outputs and gradients") {
  for (DType dtype : {DType::Float32, DType::Float64}) {
    // q·k ≈ ±1e4·√d_h so that S ≈ ±1e4 after scaling.
    const Shape shape = {1, 2, 8, 4};
    Tensor q = (random(shape, 8, dtype, false) * 100.0).requires_grad_();
    Tensor k = (random(shape, 9, dtype, false) * 100.0).requires_grad_();
    Tensor v = random(shape, 10, dtype);
    for (bool causal : {true, false}) {
      const Tensor z = scaled_dot_product_attention(q, k, v, causal);
      sum(z * z).backward();
      for (const Tensor& t : {z, q.grad(), k.grad(), v.grad()})
        for (double x : t.to_vector()) REQUIRE(std::isfinite(x));
      q.zero_grad();
      k.zero_grad();
      v.zero_grad();
    }
  }
  // And softmax itself on rows of ±1e4.
  const Tensor x = Tensor::from_vector({1e4, -1e4, 1e4 - 1, 0}, {1, 4}).requires_grad_();
  const Tensor y = softmax(x);
  sum(y * y).backward();
  for (double v : y.to_vector()) CHECK(std::isfinite(v));
  for (double v : x.grad().to_vector()) CHECK(std::isfinite(v));
}

TEST_CASE("attention op: shape errors") {
  CHECK_THROWS_WITH_AS(scaled_dot_product_attention(Tensor::zeros({2, 3, 4}), Tensor::zeros({2, 3, 4}),
                                                    Tensor::zeros({2, 3, 5}), true),
                       doctest::Contains("scaled_dot_product_attention: q [2,3,4], k [2,3,4], v [2,3,5]"), Error);
}
