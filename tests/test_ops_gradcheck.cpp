// Every op of core/ops.h: gradcheck in float64 (≤ 1e-6 relative) on odd sizes
// (1, 3, 7, 65) and broadcasting, and float32 forward/backward within 1e-5 of
// float64.
#include "tests/helpers.h"

using namespace ag;
using ag::test::random;

namespace {
using Inputs = std::vector<Tensor>;

// Positive inputs for log, pow and div denominators.
Tensor positive(const Shape& shape, uint64_t seed) {
  Generator gen(seed);
  return Tensor::uniform(shape, 0.5, 2.0, DType::Float64, &gen).requires_grad_();
}

Tensor int_targets(const Shape& shape, int64_t V, uint64_t seed) {
  Generator gen(seed);
  std::vector<int64_t> t(numel(shape));
  for (auto& v : t) v = static_cast<int64_t>(gen.integer(V));
  return Tensor::from_indices(t, shape);
}

void check_op(const GradcheckFn& f, const Inputs& inputs) {
  CHECK_GRADCHECK(f, inputs);
  ag::test::check_float32_matches_float64(f, inputs);
}
}  // namespace

TEST_CASE("ops: add, sub, mul, div with broadcasting") {
  const std::vector<std::pair<Shape, Shape>> shapes = {
      {{3, 7}, {3, 7}}, {{3, 7}, {7}}, {{1}, {3, 7}}, {{3, 1, 7}, {65, 1}}, {{2, 3, 1}, {1, 1, 7}}, {{}, {7}}};
  for (const auto& [sa, sb] : shapes) {
    const std::string operand_shapes = to_string(sa) + " and " + to_string(sb);
    CAPTURE(operand_shapes);
    const Inputs in = {random(sa, 1), random(sb, 2)};
    check_op([](const Inputs& x) { return add(x[0], x[1]); }, in);
    check_op([](const Inputs& x) { return sub(x[0], x[1]); }, in);
    check_op([](const Inputs& x) { return mul(x[0], x[1]); }, in);
    check_op([](const Inputs& x) { return div(x[0], x[1]); }, {random(sa, 3), positive(sb, 4)});
  }
}

TEST_CASE("ops: a tensor used twice gets the sum of both gradients") {
  const Tensor x = random({3, 7}, 5);
  check_op([](const Inputs& in) { return mul(in[0], in[0]) + in[0]; }, {x});
}

TEST_CASE("ops: unary and scalar ops") {
  for (const Shape& shape : {Shape{1}, Shape{3, 7}, Shape{65}}) {
    CAPTURE(to_string(shape));
    check_op([](const Inputs& x) { return neg(x[0]); }, {random(shape, 6)});
    check_op([](const Inputs& x) { return x[0] * 2.5 + 1.5; }, {random(shape, 7)});
    check_op([](const Inputs& x) { return 3.0 - x[0] / 4.0; }, {random(shape, 8)});
    check_op([](const Inputs& x) { return pow(x[0], 3.0); }, {random(shape, 9)});
    check_op([](const Inputs& x) { return pow(x[0], -1.5); }, {positive(shape, 10)});
    check_op([](const Inputs& x) { return exp(x[0]); }, {random(shape, 11)});
    check_op([](const Inputs& x) { return log(x[0]); }, {positive(shape, 12)});
    check_op([](const Inputs& x) { return tanh(x[0]); }, {random(shape, 13)});
    // relu's kink at 0 is never hit by continuous random inputs (±ε apart).
    check_op([](const Inputs& x) { return relu(x[0]); }, {random(shape, 14)});
    check_op([](const Inputs& x) { return gelu(x[0], GeluApprox::Erf); }, {random(shape, 15)});
    check_op([](const Inputs& x) { return gelu(x[0], GeluApprox::Tanh); }, {random(shape, 16)});
  }
}

TEST_CASE("ops: sum, mean and max, over all and over a dim") {
  const Tensor x = random({3, 7, 5}, 20);
  check_op([](const Inputs& in) { return sum(in[0]); }, {x});
  check_op([](const Inputs& in) { return mean(in[0]); }, {x});
  for (int64_t dim : {0, 1, -1}) {
    CAPTURE(dim);
    check_op([dim](const Inputs& in) { return sum(in[0], dim); }, {x});
    check_op([dim](const Inputs& in) { return sum(in[0], dim, true); }, {x});
    check_op([dim](const Inputs& in) { return mean(in[0], dim); }, {x});
    check_op([dim](const Inputs& in) { return max(in[0], dim); }, {x});
  }
  check_op([](const Inputs& in) { return sum(in[0], 0); }, {random({65}, 21)});
  check_op([](const Inputs& in) { return max(in[0], 0, true); }, {random({65, 1}, 22)});
}

TEST_CASE("ops: reduce_to_shape and expand") {
  check_op([](const Inputs& in) { return reduce_to_shape(in[0], {7, 1}); }, {random({3, 7, 5}, 23)});
  check_op([](const Inputs& in) { return expand(in[0], {3, 7, 5}); }, {random({7, 1}, 24)});
}

TEST_CASE("ops: reshape, transpose, permute, slice, concat, split") {
  const Tensor x = random({3, 7, 5}, 30);
  check_op([](const Inputs& in) { return in[0].reshape({7, -1}) * 1.0; }, {x});
  check_op([](const Inputs& in) { return transpose(in[0], 0, 2); }, {x});
  check_op([](const Inputs& in) { return permute(in[0], {1, 2, 0}); }, {x});
  check_op([](const Inputs& in) { return slice(in[0], 1, 2, 6); }, {x});
  check_op([](const Inputs& in) { return concat({in[0], in[1]}, 1); }, {x, random({3, 1, 5}, 31)});
  check_op(
      [](const Inputs& in) {
        const std::vector<Tensor> parts = split(in[0], {1, 4, 2}, 1);  // [3,1,5], [3,4,5], [3,2,5]
        return parts[0] * 2.0 + sum(parts[1], 1, true) - sum(parts[2] * parts[2], 1, true);
      },
      {x});
}

TEST_CASE("ops: matmul 2-D, batched, and broadcast batch dims") {
  const std::vector<std::pair<Shape, Shape>> shapes = {
      {{3, 7}, {7, 5}},       {{1, 65}, {65, 3}},     {{2, 3, 7}, {7, 5}},   {{2, 3, 7}, {2, 7, 5}},
      {{2, 1, 3, 7}, {4, 7, 1}}, {{3, 7}, {2, 7, 5}}, {{65, 3}, {3, 1}}};
  for (const auto& [sa, sb] : shapes) {
    const std::string operand_shapes = to_string(sa) + " and " + to_string(sb);
    CAPTURE(operand_shapes);
    check_op([](const Inputs& x) { return matmul(x[0], x[1]); }, {random(sa, 40), random(sb, 41)});
  }
}

TEST_CASE("ops: softmax and log_softmax over the last dim") {
  for (const Shape& shape : {Shape{1}, Shape{3, 7}, Shape{2, 3, 65}, Shape{7, 1}}) {
    CAPTURE(to_string(shape));
    check_op([](const Inputs& x) { return softmax(x[0]); }, {random(shape, 50)});
    check_op([](const Inputs& x) { return log_softmax(x[0]); }, {random(shape, 51)});
  }
}

TEST_CASE("ops: cross_entropy, with and without ignored targets") {
  const Tensor logits = random({7, 65}, 60);
  const Tensor targets = int_targets({7}, 65, 61);
  check_op([&](const Inputs& x) { return cross_entropy(x[0], targets); }, {logits});
  std::vector<int64_t> t = targets.to_indices();
  t[1] = t[4] = -100;
  const Tensor some_ignored = Tensor::from_indices(t, {7});
  check_op([&](const Inputs& x) { return cross_entropy(x[0], some_ignored); }, {logits});
  const Tensor targets3 = int_targets({2, 3}, 7, 62);
  check_op([&](const Inputs& x) { return cross_entropy(x[0], targets3) * 3.0; }, {random({2, 3, 7}, 63)});
}

TEST_CASE("ops: cross_entropy equals the composed -log_softmax at the target") {
  const Tensor logits = random({3, 7}, 64, DType::Float64, false);
  const Tensor targets = Tensor::from_indices({0, 6, 3}, {3});
  const std::vector<double> ls = log_softmax(logits).to_vector();
  const double expected = -(ls[0 * 7 + 0] + ls[1 * 7 + 6] + ls[2 * 7 + 3]) / 3.0;
  CHECK(cross_entropy(logits, targets).item() == doctest::Approx(expected).epsilon(1e-14));
}

TEST_CASE("ops: layer_norm") {
  for (const Shape& shape : {Shape{3, 7}, Shape{2, 3, 65}, Shape{1, 3}}) {
    CAPTURE(to_string(shape));
    const int64_t C = shape.back();
    check_op([](const Inputs& x) { return layer_norm(x[0], x[1], x[2]); },
             {random(shape, 70), random({C}, 71), random({C}, 72)});
  }
}

TEST_CASE("ops: embedding, with repeated indices") {
  const Tensor indices = Tensor::from_indices({0, 2, 2, 6, 0, 3}, {2, 3});
  check_op([&](const Inputs& x) { return embedding(x[0], indices); }, {random({7, 5}, 80)});
  check_op([&](const Inputs& x) { return embedding(x[0], Tensor::from_indices({64}, {1})); }, {random({65, 3}, 81)});
}

TEST_CASE("ops: dropout") {
  const Tensor x = random({7, 65}, 90);
  // Reseeding inside f gives every evaluation the same mask.
  check_op(
      [](const Inputs& in) {
        Generator gen(7);
        return dropout(in[0], 0.3, true, &gen);
      },
      {x});
  const Tensor off = dropout(x, 0.0, true);
  CHECK(off.same(x));
  CHECK(dropout(x, 0.5, false).same(x));

  Generator gen(11);
  const std::vector<double> y = dropout(Tensor::ones({10000}, DType::Float64), 0.25, true, &gen).to_vector();
  int64_t kept = 0;
  for (double v : y) {
    CHECK((v == 0.0 || v == doctest::Approx(1.0 / 0.75)));
    kept += v != 0.0;
  }
  CHECK(kept > 7300);
  CHECK(kept < 7700);
}
