// Every op of core/ops.h, on every device (TEST_CASE_EVERY_DEVICE). On the
// CPU: gradcheck in float64 (≤ 1e-6 relative) on odd sizes (1, 3, 7, 65) and
// broadcasting, and float32 forward/backward within 1e-5 of float64. On a
// device: the float32 output and every input gradient within 1e-5 of the CPU's
// (normwise relative; 1e-4 where a reduction adds 4096 or more terms, as the
// devices add in different orders), also at sizes that span many thread blocks
// and grid limits, too large for gradcheck's full Jacobian.
#include <limits>

#include "core/threads.h"
#include "tests/helpers.h"

// The file's names and using-directives stay its own in a unity build, where the test
// files compile as one translation unit (CMakeLists.txt).
namespace ops_gradcheck_test {

using namespace ag;
using ag::test::random;

namespace {
using Inputs = std::vector<Tensor>;

constexpr double kTol = 1e-5;
constexpr double kLongReduction = 1e-4;  // a device against the CPU, sums over >= 4096 terms

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

// On the CPU, gradcheck and float32 against float64; on a device, float32
// against the CPU to `device_rtol`. `inputs` are float64 CPU tensors.
void check_op(Device device, const GradcheckFn& f, const Inputs& inputs, double device_rtol = kTol) {
  if (device == Device::CPU) {
    CHECK_GRADCHECK(f, inputs);
    ag::test::check_float32_matches_float64(f, inputs);
  } else {
    ag::test::check_device_matches_cpu(device, f, inputs, device_rtol);
  }
}
}  // namespace

TEST_CASE_EVERY_DEVICE("ops: add, sub, mul, div with broadcasting") {
  std::vector<std::pair<Shape, Shape>> shapes = {{{3, 7}, {3, 7}},       {{3, 7}, {7}}, {{1}, {3, 7}},
                                                 {{3, 1, 7}, {65, 1}},   {{2, 3, 1}, {1, 1, 7}},
                                                 {{}, {7}},              {{2, 1, 3, 1, 5}, {4, 1, 6, 1}}};
  if (device != Device::CPU) shapes.push_back({{64, 1000}, {1000}});  // many blocks
  for (const auto& [sa, sb] : shapes) {
    const std::string operand_shapes = to_string(sa) + " and " + to_string(sb);
    CAPTURE(operand_shapes);
    const Inputs in = {random(sa, 1), random(sb, 2)};
    check_op(device, [](const Inputs& x) { return add(x[0], x[1]); }, in);
    check_op(device, [](const Inputs& x) { return sub(x[0], x[1]); }, in);
    check_op(device, [](const Inputs& x) { return mul(x[0], x[1]); }, in);
    check_op(device, [](const Inputs& x) { return div(x[0], x[1]); }, {random(sa, 3), positive(sb, 4)});
  }
}

TEST_CASE_EVERY_DEVICE("ops: a tensor used twice gets the sum of both gradients") {
  const Tensor x = random({3, 7}, 5);
  check_op(device, [](const Inputs& in) { return mul(in[0], in[0]) + in[0]; }, {x});
}

TEST_CASE_EVERY_DEVICE("ops: unary and scalar ops") {
  std::vector<Shape> shapes = {{1}, {3, 7}, {65}};
  if (device != Device::CPU) shapes.push_back({70001});  // many blocks
  for (const Shape& shape : shapes) {
    CAPTURE(to_string(shape));
    check_op(device, [](const Inputs& x) { return neg(x[0]); }, {random(shape, 6)});
    check_op(device, [](const Inputs& x) { return x[0] * 2.5 + 1.5; }, {random(shape, 7)});
    check_op(device, [](const Inputs& x) { return 3.0 - x[0] / 4.0; }, {random(shape, 8)});
    check_op(device, [](const Inputs& x) { return pow(x[0], 3.0); }, {random(shape, 9)});
    check_op(device, [](const Inputs& x) { return pow(x[0], -1.5); }, {positive(shape, 10)});
    check_op(device, [](const Inputs& x) { return exp(x[0]); }, {random(shape, 11)});
    check_op(device, [](const Inputs& x) { return log(x[0]); }, {positive(shape, 12)});
    check_op(device, [](const Inputs& x) { return tanh(x[0]); }, {random(shape, 13)});
    // relu's kink at 0 is never hit by continuous random inputs (±ε apart).
    check_op(device, [](const Inputs& x) { return relu(x[0]); }, {random(shape, 14)});
    check_op(device, [](const Inputs& x) { return gelu(x[0], GeluApprox::Erf); }, {random(shape, 15)});
    check_op(device, [](const Inputs& x) { return gelu(x[0], GeluApprox::Tanh); }, {random(shape, 16)});
  }
}

// The gradchecks below see only whether backward agrees with forward: a forward scaled wrongly
// (mean's 1/n as 1.1/n, a mutant that survived them) needs its values checked as well.
TEST_CASE("ops: sum, mean and max give the values worked by hand, over all and over each dim") {
  const Tensor x = Tensor::from_vector({1, 2, 3, 4, 5, 6}, {2, 3}, DType::Float64);
  CHECK(sum(x).item() == 21.0);
  CHECK(mean(x).item() == 3.5);
  CHECK(sum(x, 0).to_vector() == std::vector<double>{5, 7, 9});
  CHECK(sum(x, 1).to_vector() == std::vector<double>{6, 15});
  CHECK(mean(x, 0).to_vector() == std::vector<double>{2.5, 3.5, 4.5});
  CHECK(mean(x, -1).to_vector() == std::vector<double>{2, 5});
  CHECK(max(x, 0).to_vector() == std::vector<double>{4, 5, 6});
  CHECK(max(x, 1).to_vector() == std::vector<double>{3, 6});
  CHECK(mean(x, 1, true).shape() == Shape{2, 1});
  CHECK(max(x, 0, true).shape() == Shape{1, 3});
}

TEST_CASE_EVERY_DEVICE("ops: sum, mean and max, over all and over a dim") {
  const Tensor x = random({3, 7, 5}, 20);
  check_op(device, [](const Inputs& in) { return sum(in[0]); }, {x});
  check_op(device, [](const Inputs& in) { return mean(in[0]); }, {x});
  for (int64_t dim : {0, 1, -1}) {
    CAPTURE(dim);
    check_op(device, [dim](const Inputs& in) { return sum(in[0], dim); }, {x});
    check_op(device, [dim](const Inputs& in) { return sum(in[0], dim, true); }, {x});
    check_op(device, [dim](const Inputs& in) { return mean(in[0], dim); }, {x});
    check_op(device, [dim](const Inputs& in) { return max(in[0], dim); }, {x});
  }
  check_op(device, [](const Inputs& in) { return sum(in[0], 0); }, {random({65}, 21)});
  check_op(device, [](const Inputs& in) { return max(in[0], 0, true); }, {random({65, 1}, 22)});
  if (device == Device::CPU) return;
  // Long reductions on a device: the full sum spans many blocks; [4096, 33] ->
  // [33] is the bias-gradient shape (one block per output); [33, 4096] sums
  // rows; [70000, 3] takes the thread-per-output path.
  check_op(device, [](const Inputs& in) { return sum(in[0]); }, {random({1 << 20}, 25)}, kLongReduction);
  check_op(device, [](const Inputs& in) { return sum(in[0], 0); }, {random({4096, 33}, 26)}, kLongReduction);
  check_op(device, [](const Inputs& in) { return sum(in[0], 1); }, {random({33, 4096}, 27)}, kLongReduction);
  check_op(device, [](const Inputs& in) { return sum(in[0], 1); }, {random({70000, 3}, 28)});
  check_op(device, [](const Inputs& in) { return max(in[0], 1); }, {random({3, 5000}, 29)});
}

TEST_CASE_EVERY_DEVICE("ops: reduce_to_shape and expand") {
  check_op(device, [](const Inputs& in) { return reduce_to_shape(in[0], {7, 1}); }, {random({3, 7, 5}, 23)});
  check_op(device, [](const Inputs& in) { return reduce_to_shape(in[0], {3, 1, 5}); }, {random({2, 3, 4, 5}, 25)});
  check_op(device, [](const Inputs& in) { return expand(in[0], {3, 7, 5}); }, {random({7, 1}, 24)});
}

TEST_CASE_EVERY_DEVICE("ops: reshape, transpose, permute, slice, concat, split") {
  const Tensor x = random({3, 7, 5}, 30);
  check_op(device, [](const Inputs& in) { return in[0].reshape({7, -1}) * 1.0; }, {x});
  check_op(device, [](const Inputs& in) { return transpose(in[0], 0, 2); }, {x});
  check_op(device, [](const Inputs& in) { return permute(in[0], {1, 2, 0}); }, {x});
  check_op(device, [](const Inputs& in) { return permute(in[0], {0, 2, 1, 3}); }, {random({2, 9, 4, 6}, 32)});
  check_op(device, [](const Inputs& in) { return slice(in[0], 1, 2, 6); }, {x});
  check_op(device, [](const Inputs& in) { return concat({in[0], in[1]}, 1); }, {x, random({3, 1, 5}, 31)});
  check_op(device, [](const Inputs& in) { return concat({in[0], in[1]}, 0); }, {x, random({2, 7, 5}, 33)});
  check_op(device,
      [](const Inputs& in) {
        const std::vector<Tensor> parts = split(in[0], {1, 4, 2}, 1);  // [3,1,5], [3,4,5], [3,2,5]
        return parts[0] * 2.0 + sum(parts[1], 1, true) - sum(parts[2] * parts[2], 1, true);
      },
      {x});
}

TEST_CASE_EVERY_DEVICE("ops: matmul 2-D, batched, and broadcast batch dims") {
  std::vector<std::pair<Shape, Shape>> shapes = {
      {{3, 7}, {7, 5}},       {{1, 65}, {65, 3}},     {{2, 3, 7}, {7, 5}},   {{2, 3, 7}, {2, 7, 5}},
      {{2, 1, 3, 7}, {4, 7, 1}}, {{3, 7}, {2, 7, 5}}, {{65, 3}, {3, 1}}};
  if (device != Device::CPU) shapes.insert(shapes.end(), {{{0, 3}, {3, 4}}, {{2, 0}, {0, 3}}});  // no rows, K = 0
  for (const auto& [sa, sb] : shapes) {
    const std::string operand_shapes = to_string(sa) + " and " + to_string(sb);
    CAPTURE(operand_shapes);
    check_op(device, [](const Inputs& x) { return matmul(x[0], x[1]); }, {random(sa, 40), random(sb, 41)});
  }
  if (device == Device::CPU) return;
  // K = 4096 terms per output, and a batch above cuBLAS's 65535 grid limit (chunked).
  check_op(device, [](const Inputs& x) { return matmul(x[0], x[1]); }, {random({33, 4096}, 42), random({4096, 17}, 43)},
           kLongReduction);
  check_op(device, [](const Inputs& x) { return matmul(x[0], x[1]); },
           {random({70000, 2, 3}, 44), random({70000, 3, 2}, 45)});
}

TEST_CASE_EVERY_DEVICE("ops: cumsum and reverse_cumsum along each dim") {
  const Tensor x = random({3, 7, 5}, 30);
  for (int64_t dim : {0, 1, -1}) {
    CAPTURE(dim);
    check_op(device, [dim](const Inputs& in) { return cumsum(in[0], dim); }, {x});
    check_op(device, [dim](const Inputs& in) { return reverse_cumsum(in[0], dim); }, {x});
  }
  if (device == Device::CPU) {
    const Tensor ramp = cumsum(Tensor::ones({2, 4}, DType::Float64), 1);
    CHECK(ramp.to_vector() == std::vector<double>{1, 2, 3, 4, 1, 2, 3, 4});
    const Tensor down = reverse_cumsum(Tensor::ones({2, 4}, DType::Float64), 1);
    CHECK(down.to_vector() == std::vector<double>{4, 3, 2, 1, 4, 3, 2, 1});
    return;
  }
  check_op(device, [](const Inputs& in) { return cumsum(in[0], 1); }, {random({3, 5000}, 31)}, kLongReduction);
  check_op(device, [](const Inputs& in) { return cumsum(in[0], 0); }, {random({300, 700}, 32)});
  check_op(device, [](const Inputs& in) { return reverse_cumsum(in[0], 1); }, {random({3, 5000}, 31)}, kLongReduction);
}

TEST_CASE_EVERY_DEVICE("ops: softmax and log_softmax over the last dim") {
  std::vector<Shape> shapes = {{1}, {3, 7}, {2, 3, 65}, {7, 1}};
  // On a device also rows longer than a block, and many rows.
  if (device != Device::CPU) shapes.insert(shapes.end(), {{5, 1000}, {70000, 3}});
  for (const Shape& shape : shapes) {
    CAPTURE(to_string(shape));
    check_op(device, [](const Inputs& x) { return softmax(x[0]); }, {random(shape, 50)});
    check_op(device, [](const Inputs& x) { return log_softmax(x[0]); }, {random(shape, 51)});
  }
  if (device == Device::CPU) return;
  check_op(device, [](const Inputs& x) { return softmax(x[0]); }, {random({2, 5000}, 52)}, kLongReduction);
  check_op(device, [](const Inputs& x) { return log_softmax(x[0]); }, {random({2, 5000}, 53)}, kLongReduction);
}

TEST_CASE_EVERY_DEVICE("ops: softmax of a fully masked row is zeros, with zero gradient") {
  const double inf = std::numeric_limits<double>::infinity();
  const Tensor x =
      Tensor::from_vector({1, 2, 3, -inf, -inf, -inf, 0, -inf, 5}, {3, 3}, DType::Float64).requires_grad_();
  if (device != Device::CPU) check_op(device, [](const Inputs& in) { return softmax(in[0]); }, {x});
  const Tensor on_device = x.detach().to(device).requires_grad_();
  const Tensor y = softmax(on_device);
  y.backward(ag::test::random({3, 3}, 54, DType::Float64, false).to(device));
  const std::vector<double> values = y.to_vector(), grad = on_device.grad().to_vector();
  for (int j = 3; j < 6; ++j) {
    CHECK(values[j] == 0.0);
    CHECK(grad[j] == 0.0);
  }
  CHECK(values[7] == 0.0);
  CHECK(grad[7] == 0.0);
}

// The targets are inputs (int64, needing no gradient), so they follow the logits to the device.
TEST_CASE_EVERY_DEVICE("ops: cross_entropy, with and without ignored targets") {
  const Tensor logits = random({7, 65}, 60);
  const Tensor targets = int_targets({7}, 65, 61);
  check_op(device, [](const Inputs& x) { return cross_entropy(x[0], x[1]); }, {logits, targets});
  std::vector<int64_t> t = targets.to_indices();
  t[1] = t[4] = -100;
  const Tensor some_ignored = Tensor::from_indices(t, {7});
  check_op(device, [](const Inputs& x) { return cross_entropy(x[0], x[1]); }, {logits, some_ignored});
  const Tensor targets3 = int_targets({2, 3}, 7, 62);
  check_op(device, [](const Inputs& x) { return cross_entropy(x[0], x[1]) * 3.0; }, {random({2, 3, 7}, 63), targets3});
  check_op(
      device,
      [](const Inputs& x) {
        const int64_t ignore_index = 3;
        return cross_entropy(x[0], x[1], ignore_index);
      },
      {random({2, 3, 7}, 66), targets3});
  if (device == Device::CPU) return;
  // A GPT-2-sized vocabulary: rows far longer than a block.
  check_op(device, [](const Inputs& x) { return cross_entropy(x[0], x[1]); },
           {random({4, 50257}, 64), int_targets({4}, 50257, 65)}, kLongReduction);
}

TEST_CASE("ops: cross_entropy equals the composed -log_softmax at the target") {
  const Tensor logits = random({3, 7}, 64, DType::Float64, false);
  const Tensor targets = Tensor::from_indices({0, 6, 3}, {3});
  const std::vector<double> ls = log_softmax(logits).to_vector();
  const double expected = -(ls[0 * 7 + 0] + ls[1 * 7 + 6] + ls[2 * 7 + 3]) / 3.0;
  CHECK(cross_entropy(logits, targets).item() == doctest::Approx(expected).epsilon(1e-14));
}

TEST_CASE_EVERY_DEVICE("ops: layer_norm") {
  std::vector<Shape> shapes = {{3, 7}, {2, 3, 65}, {1, 3}};
  // Rows longer than a block; dWeight and dBias sum over 70000 and 5000 rows (the two-pass column sums).
  if (device != Device::CPU) shapes.insert(shapes.end(), {{4, 300}, {70000, 4}, {5000, 16}});
  for (const Shape& shape : shapes) {
    CAPTURE(to_string(shape));
    const int64_t C = shape.back();
    check_op(device, [](const Inputs& x) { return layer_norm(x[0], x[1], x[2]); },
             {random(shape, 70), random({C}, 71), random({C}, 72)}, numel(shape) / C >= 4096 ? kLongReduction : kTol);
  }
}

// The indices are inputs (int64, needing no gradient), so they follow the table to the device.
TEST_CASE_EVERY_DEVICE("ops: embedding, with repeated indices") {
  const auto f = [](const Inputs& x) { return embedding(x[0], x[1]); };
  check_op(device, f, {random({7, 5}, 80), Tensor::from_indices({0, 2, 2, 6, 0, 3}, {2, 3})});
  check_op(device, f, {random({65, 3}, 81), Tensor::from_indices({64}, {1})});
  // V = 70 spans three groups of 32 rows; 1000 indices span four tiles of 256.
  check_op(device, f, {random({70, 9}, 82), int_targets({4, 250}, 70, 83)});
}

TEST_CASE_EVERY_DEVICE("ops: embedding's backward sums each row within the float bound, whatever the rows' lengths") {
  // CUDA (cuda/embedding.cu) sorts the positions by row and sums runs of at most 32
  // sorted positions, then each row's runs; the CPU adds a row's positions in one
  // chain. Row 5 takes most positions (a space in a character model) and so spans
  // many runs; only even rows are drawn (the odd ones stay exactly zero); N ends inside
  // a run, or is one position; the last case is the loss head's gather, every index
  // once in a large table. Against the exact sums (double on the host: the float32
  // inputs and their sums of at most 1000 terms are exact to 2^-40 there): a row of m
  // positions is a float sum of m terms, so |error| <= (m - 1)·u·Σ|g| (u = 2^-24, or
  // 2^-53 in float64) whatever the order of the adds.
  struct Case {
    int64_t V, C, N;
  };
  for (const Case k : {Case{70, 33, 1000}, Case{70, 33, 1}, Case{70, 33, 31}, Case{70, 33, 33}, Case{20000, 8, 5000}}) {
    CAPTURE(k.V);
    CAPTURE(k.N);
    Generator gen(static_cast<uint64_t>(k.N));
    std::vector<int64_t> idx(static_cast<size_t>(k.N));
    for (int64_t n = 0; n < k.N; ++n)
      idx[static_cast<size_t>(n)] = k.V > 1000 ? n * 7919 % k.V  // 7919 is prime to 20000: all distinct
                                               : (gen.uniform() < 0.6 ? 5 : 2 * static_cast<int64_t>(gen.integer(k.V / 2)));
    const Tensor indices = Tensor::from_indices(idx, {k.N});
    const Tensor upstream = random({k.N, k.C}, 85, DType::Float32, false);
    const std::vector<double> g = upstream.to_vector();
    std::vector<double> exact(static_cast<size_t>(k.V * k.C), 0.0), magnitude(exact.size(), 0.0);
    std::vector<int64_t> count(static_cast<size_t>(k.V), 0);
    for (int64_t n = 0; n < k.N; ++n) {
      const int64_t v = idx[static_cast<size_t>(n)];
      ++count[static_cast<size_t>(v)];
      for (int64_t c = 0; c < k.C; ++c) {
        exact[static_cast<size_t>(v * k.C + c)] += g[static_cast<size_t>(n * k.C + c)];
        magnitude[static_cast<size_t>(v * k.C + c)] += std::fabs(g[static_cast<size_t>(n * k.C + c)]);
      }
    }
    for (const DType dtype : {DType::Float32, DType::Float64}) {
      CAPTURE(dtype_name(dtype));
      const double u = dtype == DType::Float32 ? 0x1p-24 : 0x1p-53;
      Tensor weight = Tensor::zeros({k.V, k.C}, dtype, device).requires_grad_();
      embedding(weight, indices.to(device)).backward(upstream.to(dtype).to(device));
      const std::vector<double> got = weight.grad().to_vector();
      int64_t outside = 0, nonzero_unnamed = 0;
      for (int64_t v = 0; v < k.V; ++v)
        for (int64_t c = 0; c < k.C; ++c) {
          const auto at = static_cast<size_t>(v * k.C + c);
          const int64_t m = count[static_cast<size_t>(v)];
          if (m == 0) nonzero_unnamed += got[at] != 0.0;
          const double bound = static_cast<double>(m > 1 ? m - 1 : 0) * u * magnitude[at] + 0x1p-40 * magnitude[at];
          outside += std::fabs(got[at] - exact[at]) > bound;
        }
      CHECK(outside == 0);
      CHECK(nonzero_unnamed == 0);
    }
  }
}

TEST_CASE_EVERY_DEVICE("ops: dropout") {
  // Reseeding inside f gives every evaluation the same mask; a device draws the
  // CPU's ("cuda: dropout draws the CPU's mask from the same seed").
  const auto f = [](const Inputs& in) {
    Generator gen(7);
    return dropout(in[0], 0.3, true, &gen);
  };
  check_op(device, f, {random({7, 65}, 90)});
  if (device != Device::CPU) check_op(device, f, {random({7, 6500}, 91)});
}

TEST_CASE("ops: dropout off is the identity, and keeps 1 − p") {
  const Tensor x = random({7, 65}, 90);
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

// --- fused ops against the composed ops they replace -----------------------------------

namespace {
// fused and composed from the same float64 inputs and upstream gradient: equal
// outputs and input gradients up to rounding (they add in other orders).
void check_fused_matches_composed(const GradcheckFn& fused, const GradcheckFn& composed, const Inputs& inputs) {
  auto run = [&](const GradcheckFn& f, std::vector<Tensor>& grads) {
    Inputs xs;
    for (const Tensor& x : inputs) {
      Tensor c = x.detach().clone();
      if (x.requires_grad()) c.requires_grad_();
      xs.push_back(c);
    }
    const Tensor y = f(xs);
    Generator gen(777);
    y.backward(Tensor::randn(y.shape(), y.dtype(), &gen));
    for (const Tensor& x : xs) grads.push_back(x.grad());
    return y;
  };
  std::vector<Tensor> fused_grads, composed_grads;
  CHECK_CLOSE(run(fused, fused_grads), run(composed, composed_grads), 1e-13);
  for (size_t i = 0; i < inputs.size(); ++i) {
    INFO("gradient of input " << i);
    CHECK_CLOSE(fused_grads[i], composed_grads[i], 1e-13);
  }
}
}  // namespace

// The fused ops against the composed ones they replace on the CPU; a device's
// fused kernels against the CPU's.
TEST_CASE_EVERY_DEVICE("ops: linear, with the bias folded into the GEMM, equals matmul + add") {
  for (const Shape& x_shape : {Shape{1, 3}, Shape{7, 3}, Shape{2, 5, 3}, Shape{3}}) {
    CAPTURE(to_string(x_shape));
    const Inputs in = {random(x_shape, 100), random({3, 65}, 101), random({65}, 102)};
    check_op(device, [](const Inputs& x) { return linear(x[0], x[1], x[2]); }, in);
    check_op(device, [](const Inputs& x) { return linear(x[0], x[1], Tensor()); }, {in[0], in[1]});
    if (device == Device::CPU && x_shape.size() >= 2)  // matmul wants 2 dims
      check_fused_matches_composed([](const Inputs& x) { return linear(x[0], x[1], x[2]); },
                                   [](const Inputs& x) { return matmul(x[0], x[1]) + x[2]; }, in);
  }
}

TEST_CASE_EVERY_DEVICE("ops: bias_gelu equals gelu(x + bias), both approximations") {
  // C = 65 and 130: one and several column blocks in the bias gradient's sums;
  // [300, 130] is large enough for them to run in parallel. On a device also
  // [5000, 16]: the bias gradient adds 5000 rows.
  std::vector<Shape> shapes = {{1, 3}, {7, 65}, {2, 3, 130}, {300, 130}};
  if (device != Device::CPU) shapes.push_back({5000, 16});
  for (const Shape& shape : shapes) {
    CAPTURE(to_string(shape));
    const int64_t C = shape.back();
    for (GeluApprox approx : {GeluApprox::Erf, GeluApprox::Tanh}) {
      const Inputs in = {random(shape, 110), random({C}, 111)};
      if (device != Device::CPU) {
        ag::test::check_device_matches_cpu(device, [approx](const Inputs& x) { return bias_gelu(x[0], x[1], approx); },
                                           in, numel(shape) / C >= 4096 ? kLongReduction : kTol);
        continue;
      }
      if (numel(shape) < 1000) CHECK_GRADCHECK([approx](const Inputs& x) { return bias_gelu(x[0], x[1], approx); }, in);
      ag::test::check_float32_matches_float64([approx](const Inputs& x) { return bias_gelu(x[0], x[1], approx); }, in);
      check_fused_matches_composed([approx](const Inputs& x) { return bias_gelu(x[0], x[1], approx); },
                                   [approx](const Inputs& x) { return gelu(x[0] + x[1], approx); }, in);
    }
  }
}

TEST_CASE("ops: bias_gelu's backward runs twice through a retained graph with the same result") {
  // Without retain_graph the closure writes dX into the f'(U) it saved (it runs once);
  // with it, f'(U) must survive for the next backward.
  Tensor x = random({5, 7}, 112), b = random({7}, 113);
  const Tensor loss = sum(bias_gelu(x, b) * bias_gelu(x, b));
  loss.backward(true);
  const std::vector<double> dx = x.grad().to_vector(), db = b.grad().to_vector();
  x.zero_grad();
  b.zero_grad();
  loss.backward(true);
  CHECK(x.grad().to_vector() == dx);
  CHECK(b.grad().to_vector() == db);
  x.zero_grad();
  b.zero_grad();
  loss.backward();  // the last one may reuse the saved memory
  CHECK(x.grad().to_vector() == dx);
  CHECK(b.grad().to_vector() == db);
}

TEST_CASE_EVERY_DEVICE("ops: add_layer_norm gives x + residual and its layer norm, both differentiable") {
  std::vector<Shape> shapes = {{1, 3}, {3, 7}, {2, 3, 65}};
  if (device != Device::CPU) shapes.insert(shapes.end(), {{2, 3, 130}, {5000, 16}});  // dWeight, dBias add 5000 rows
  for (const Shape& shape : shapes) {
    CAPTURE(to_string(shape));
    const int64_t C = shape.back();
    // Both outputs feed the result, as in a block (the stream goes on from the sum).
    const auto fused = [](const Inputs& x) {
      const AddLayerNorm out = add_layer_norm(x[0], x[1], x[2], x[3]);
      return concat({out.sum, out.normed * 2.0}, -1);
    };
    const auto composed = [](const Inputs& x) {
      const Tensor sum = x[0] + x[1];
      return concat({sum, layer_norm(sum, x[2], x[3]) * 2.0}, -1);
    };
    const Inputs in = {random(shape, 120), random(shape, 121), random({C}, 122), random({C}, 123)};
    check_op(device, fused, in, numel(shape) / C >= 4096 ? kLongReduction : kTol);
    if (device == Device::CPU) check_fused_matches_composed(fused, composed, in);
  }
}

TEST_CASE("ops: the column sums of bias gradients give the same bits for any thread count") {
  const Tensor x = random({300, 130}, 130), bias = random({130}, 131), w = random({130}, 132);
  auto gradients = [&](int threads) {
    set_num_threads(threads);
    std::vector<std::vector<double>> out;
    for (Tensor t : {x, bias, w}) t.zero_grad();  // copies share the gradient slot
    sum(bias_gelu(x, bias) * x).backward();
    out.push_back(bias.grad().to_vector());
    out.push_back(reduce_to_shape(x, {130}).to_vector());
    sum(layer_norm(x, w, bias) * x).backward();
    out.push_back(w.grad().to_vector());
    out.push_back(bias.grad().to_vector());
    return out;
  };
  const int before = num_threads();
  const auto one = gradients(1), two = gradients(2), three = gradients(3);
  set_num_threads(before);
  CHECK(one == two);
  CHECK(one == three);
}

TEST_CASE("ops: strided copies walk every row, split over threads and at any rank") {
  // [7, 65, 3, 33]: above the parallel grain, so the rows are split over the
  // threads; every element of the permute is checked against its index formula.
  const Tensor x = random({7, 65, 3, 33}, 140, DType::Float64, false);
  const std::vector<double> in = x.to_vector();
  const int before = num_threads();
  for (int threads : {1, 2, 3}) {
    CAPTURE(threads);
    set_num_threads(threads);
    const std::vector<double> out = permute(x, {2, 0, 3, 1}).to_vector();  // [3, 7, 33, 65]
    bool all_match = true;
    for (int64_t a = 0; a < 3; ++a)
      for (int64_t b = 0; b < 7; ++b)
        for (int64_t c = 0; c < 33; ++c)
          for (int64_t d = 0; d < 65; ++d)
            all_match &= out[((a * 7 + b) * 33 + c) * 65 + d] == in[((b * 65 + d) * 3 + a) * 33 + c];
    CHECK(all_match);
  }
  set_num_threads(before);
  // Rank 19: more row dims than the walk keeps on the stack.
  Shape small(19, 1), big(19, 2);
  small.back() = big.back() = 3;
  const Tensor row = Tensor::from_vector({1, 2, 3}, small, DType::Float64);
  const Tensor expanded = expand(row, big);
  CHECK(sum(expanded).item() == 6.0 * static_cast<double>(numel(big) / 3));
  CHECK(sum(expanded * expanded).item() == 14.0 * static_cast<double>(numel(big) / 3));
}

TEST_CASE("ops: float32 exact GELU and its derivative stay within 4e-7 of float64's erf") {
  // The CPU's float32 GELU takes Φ from Abramowitz & Stegun 7.1.26
  // (core/cpu/vector_math.h): the bound over [-12, 12], through gelu and bias_gelu.
  std::vector<double> grid;
  for (double v = -12.0; v <= 12.0; v += 1.0 / 512) grid.push_back(v);
  const Shape shape{static_cast<int64_t>(grid.size())};
  for (bool fused : {false, true}) {
    CAPTURE(fused);
    const Tensor x32 = Tensor::from_vector(grid, shape, DType::Float32).requires_grad_();
    const Tensor zero_bias = Tensor::zeros({1}).requires_grad_();
    const Tensor y32 = fused ? bias_gelu(x32.reshape({-1, 1}), zero_bias).reshape(shape) : gelu(x32);
    y32.backward(Tensor::ones(shape));
    const std::vector<double> y = y32.to_vector(), dy = x32.grad().to_vector();
    double worst_y = 0, worst_dy = 0;
    for (size_t i = 0; i < grid.size(); ++i) {
      const double v = static_cast<float>(grid[i]);  // the float32 input exactly
      const double cdf = 0.5 * (1 + std::erf(v / std::sqrt(2.0)));
      const double scale = std::max(1.0, std::abs(v));
      worst_y = std::max(worst_y, std::abs(y[i] - v * cdf) / scale);
      worst_dy = std::max(worst_dy, std::abs(dy[i] - (cdf + v * std::exp(-0.5 * v * v) / std::sqrt(2 * M_PI))) / scale);
    }
    CHECK(worst_y <= 4e-7);
    CHECK(worst_dy <= 4e-7);
  }
}

TEST_CASE_EVERY_DEVICE("ops: zero-size tensors") {
  check_op(device, [](const Inputs& in) { return add(in[0], in[1]); }, {random({0, 3}, 121), random({3}, 122)});
  check_op(device, [](const Inputs& in) { return sum(in[0]); }, {random({0, 3}, 123)});
  check_op(device, [](const Inputs& in) { return sum(in[0], 0); }, {random({0, 3}, 124)});
  check_op(device, [](const Inputs& in) { return softmax(in[0]); }, {random({0, 5}, 125)});
  check_op(device, [](const Inputs& in) { return layer_norm(in[0], in[1], in[2]); },
           {random({0, 4}, 126), random({4}, 127), random({4}, 128)});
  check_op(device, [](const Inputs& in) { return embedding(in[0], in[1]); },
           {random({4, 3}, 129), Tensor::from_indices({}, {0})});
}

TEST_CASE("ops: linear with no input features is the bias on every row") {
  const Tensor x = Tensor::zeros({3, 0}, DType::Float64), w = Tensor::zeros({0, 2}, DType::Float64);
  const Tensor b = Tensor::from_vector({1.5, -2.0}, {2}, DType::Float64);
  CHECK(linear(x, w, b).to_vector() == std::vector<double>{1.5, -2.0, 1.5, -2.0, 1.5, -2.0});
}

TEST_CASE("ops: GEMMs split over threads (by rows, or over a batch) give the one-thread products") {
  // [97, 70] x [70, 66]: the forward, dA = dC Bᵀ and dB = Aᵀ dC (A read
  // transposed) are all cut into row blocks at 2 and 3 threads; a batch of 6
  // small products is spread over the threads.
  const Tensor a = random({97, 70}, 150), b = random({70, 66}, 151);
  const Tensor batched_a = random({6, 5, 7}, 152), batched_b = random({6, 7, 4}, 153);
  auto run = [&](int threads) {
    set_num_threads(threads);
    for (Tensor t : {a, b, batched_a, batched_b}) t.zero_grad();
    const Tensor y = matmul(a, b), z = matmul(batched_a, batched_b);
    (sum(y * y) + sum(z * z)).backward();
    return std::vector<Tensor>{y.detach(), a.grad(), b.grad(), z.detach(), batched_a.grad(), batched_b.grad()};
  };
  const int before = num_threads();
  const std::vector<Tensor> one = run(1);
  for (int threads : {2, 3}) {
    CAPTURE(threads);
    const std::vector<Tensor> many = run(threads);
    for (size_t i = 0; i < one.size(); ++i) CHECK_CLOSE(many[i], one[i], 1e-14);
  }
  set_num_threads(before);
}

}  // namespace ops_gradcheck_test
