// Bad input raises ag::Error naming the op and the shapes.
#include <limits>

#include "tests/helpers.h"

// The file's names and using-directives stay its own in a unity build, where the test
// files compile as one translation unit (CMakeLists.txt).
namespace errors_test {

using namespace ag;

TEST_CASE("errors: matmul inner dims") {
  CHECK_THROWS_WITH_AS(matmul(Tensor::zeros({3, 4}), Tensor::zeros({5, 6})),
                       "matmul: [3,4] x [5,6]: inner dims differ (4 vs 5)", Error);
  CHECK_THROWS_WITH_AS(matmul(Tensor::zeros({2, 3, 4}), Tensor::zeros({3, 4, 2})),
                       doctest::Contains("do not broadcast"), Error);
}

TEST_CASE("errors: broadcast mismatch names both shapes") {
  CHECK_THROWS_WITH_AS(add(Tensor::zeros({2, 3}), Tensor::zeros({4})),
                       doctest::Contains("add: [2,3] and [4]: shapes do not broadcast"), Error);
}

TEST_CASE("errors: mixed dtypes") {
  CHECK_THROWS_WITH_AS(mul(Tensor::zeros({2}), Tensor::zeros({2}, DType::Float64)),
                       doctest::Contains("mul: [2] float32, [2] float64: mixed dtypes"), Error);
  CHECK_THROWS_WITH_AS(exp(Tensor::from_indices({1}, {1})), doctest::Contains("expected float32 or float64"), Error);
}

TEST_CASE("errors: cross_entropy target out of range") {
  CHECK_THROWS_WITH_AS(cross_entropy(Tensor::zeros({2, 5}), Tensor::from_indices({1, 5}, {2})),
                       doctest::Contains("cross_entropy: target 5 at position 1 out of range [0, 5)"), Error);
  CHECK_THROWS_WITH_AS(cross_entropy(Tensor::zeros({2, 5}), Tensor::from_indices({1, 2, 3}, {3})),
                       doctest::Contains("cross_entropy: logits [2,5], targets [3]"), Error);
}

TEST_CASE("errors: embedding index out of range") {
  CHECK_THROWS_WITH_AS(embedding(Tensor::zeros({4, 3}), Tensor::from_indices({0, -1}, {2})),
                       doctest::Contains("embedding: index -1 at position 1 out of range for a table of 4 rows"),
                       Error);
}

TEST_CASE("errors: backward through a freed graph") {
  Tensor x = Tensor::ones({2}).requires_grad_();
  const Tensor y = x * 2.0;
  sum(y).backward();
  CHECK_THROWS_WITH_AS(sum(y * 3.0).backward(), doctest::Contains("backward: through a freed graph (op 'mul_scalar')"),
                       Error);
}

TEST_CASE("errors: shape op arguments") {
  const Tensor x = Tensor::zeros({2, 3});
  CHECK_THROWS_WITH_AS(slice(x, 1, 2, 5), doctest::Contains("slice: [2,3]: range [2, 5) out of bounds"), Error);
  CHECK_THROWS_WITH_AS(sum(x, 2), doctest::Contains("sum: dim 2 out of range"), Error);
  CHECK_THROWS_WITH_AS(layer_norm(x, Tensor::ones({2}), Tensor::zeros({2})), doctest::Contains("layer_norm: x [2,3]"),
                       Error);
}

TEST_CASE("errors: CUDA without a device or without CUDA is a clear error") {
  if (cuda::available()) return;  // the device case is covered by the cuda tests
  // In the user's terms: not the runtime's "CUDA driver version is insufficient".
  const std::string why = cuda::describe_device();
  CHECK(why.rfind("no ", 0) == 0);
  CHECK(why.find("insufficient") == std::string::npos);
  CHECK_THROWS_WITH_AS(Tensor::zeros({2}, DType::Float32, Device::CUDA), doctest::Contains(why.c_str()), Error);
}

TEST_CASE("errors: the fused ops name themselves and the shapes") {
  CHECK_THROWS_WITH_AS(linear(Tensor::zeros({3, 4}), Tensor::zeros({5, 6}), Tensor::zeros({6})),
                       doctest::Contains("linear: x [3,4], weight [5,6], bias [6]: weight must be [in, out]"), Error);
  CHECK_THROWS_WITH_AS(linear(Tensor::zeros({3, 4}), Tensor::zeros({4, 6}), Tensor::zeros({5})),
                       doctest::Contains("linear: x [3,4], weight [4,6], bias [5]"), Error);
  CHECK_THROWS_WITH_AS(bias_gelu(Tensor::zeros({3, 4}), Tensor::zeros({3})),
                       doctest::Contains("bias_gelu: x [3,4], bias [3]: bias must be [C]"), Error);
  const Tensor x = Tensor::zeros({3, 4});
  CHECK_THROWS_WITH_AS(add_layer_norm(x, Tensor::zeros({2, 4}), Tensor::ones({4}), Tensor::zeros({4})),
                       doctest::Contains("add_layer_norm: x [3,4] and residual [2,4] differ in shape"), Error);
  CHECK_THROWS_WITH_AS(add_layer_norm(x, x, Tensor::ones({3}), Tensor::zeros({4})),
                       doctest::Contains("add_layer_norm: x [3,4], weight [3], bias [4]"), Error);
}

TEST_CASE("errors: sizes that overflow int64 are errors, never wrapped around") {
  constexpr int64_t max = std::numeric_limits<int64_t>::max();
  constexpr int64_t big = int64_t(1) << 62;
  CHECK(numel({max}) == max);
  CHECK(numel({0, max}) == 0);
  CHECK(numel({}) == 1);
  CHECK(byte_size({2, 3}, 8) == 48);
  CHECK_THROWS_WITH_AS(numel({max, 2}), "numel: shape [9223372036854775807,2] is too large: its size overflows int64",
                       Error);
  CHECK_THROWS_WITH_AS(numel({3, -1}), "numel: negative dim in shape [3,-1]", Error);
  // A zero dim makes no elements, but the other dims' product must still fit:
  // strides and row counts are computed from it.
  CHECK_THROWS_WITH_AS(numel({big, big, 0}), doctest::Contains("overflows int64"), Error);
  CHECK_THROWS_WITH_AS(byte_size({big}, 4), doctest::Contains("of 4-byte elements is too large"), Error);
  CHECK(byte_size({big - 1}, 2) == 2 * (big - 1));

  // Creating, reshaping and viewing tensors of such sizes: ag::Error, not UB or bad_alloc.
  CHECK_THROWS_WITH_AS(Tensor::empty({max}), doctest::Contains("overflows int64"), Error);
  CHECK_THROWS_WITH_AS(Tensor::zeros({big, big}, DType::Float64), doctest::Contains("overflows int64"), Error);
  CHECK_THROWS_WITH_AS(add(Tensor::zeros({1 << 20, 1}), Tensor::zeros({1, big})), doctest::Contains("overflows int64"),
                       Error);
  const Tensor x = Tensor::zeros({4});
  CHECK_THROWS_WITH_AS(x.reshape({big, big, -1}), doctest::Contains("reshape: [4] to"), Error);
  CHECK_THROWS_WITH_AS(x.view(max, {2}), doctest::Contains("does not fit"), Error);
  CHECK_THROWS_WITH_AS(x.view(2, {max}), doctest::Contains("does not fit"), Error);
}

}  // namespace errors_test
