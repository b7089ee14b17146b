// The CUDA kernels against their reference, the CPU kernels: every op of
// core/ops.h runs forward and backward on both devices from the same float32
// inputs and the same upstream gradient, and the outputs and every input
// gradient must agree to 1e-5 (normwise relative), 1e-4 where a reduction adds
// 4096 or more terms (the two devices add in different orders). Without a
// device each case prints [SKIP], which CTest reports as Skipped.
#include <cmath>
#include <cstring>
#include <fstream>
#include <limits>

#include "core/dispatch.h"
#include "tests/helpers.h"

using namespace ag;

namespace {
using Inputs = std::vector<Tensor>;

constexpr double kTol = 1e-5;
constexpr double kLongReduction = 1e-4;  // sums over >= 4096 terms

// float32 N(0, 1) inputs requiring grad; positive() for log, pow and divisors.
Tensor input(const Shape& shape, uint64_t seed) { return ag::test::random(shape, seed, DType::Float32); }
Tensor positive(const Shape& shape, uint64_t seed) {
  Generator gen(seed);
  return Tensor::uniform(shape, 0.5, 2.0, DType::Float32, &gen).requires_grad_();
}
Tensor int_targets(const Shape& shape, int64_t V, uint64_t seed) {
  Generator gen(seed);
  std::vector<int64_t> t(numel(shape));
  for (auto& v : t) v = static_cast<int64_t>(gen.integer(V));
  return Tensor::from_indices(t, shape);
}

// A copy of x of its own on `device`, requiring grad as x does.
Tensor copy_to(Device device, const Tensor& x) {
  Tensor c = x.device() == device ? x.detach().clone() : x.detach().to(device);
  if (x.requires_grad()) c.requires_grad_();
  return c;
}

struct Run {
  Tensor y;
  std::vector<Tensor> grads;  // undefined where the input needs none
};

// f on copies of `inputs` on `device`, then backward from a fixed random upstream gradient.
Run run_on(Device device, const GradcheckFn& f, const Inputs& inputs) {
  Inputs xs;
  for (const Tensor& x : inputs) xs.push_back(copy_to(device, x));
  Run run{f(xs), {}};
  if (run.y.requires_grad()) {
    Generator gen(12345);
    run.y.backward(Tensor::randn(run.y.shape(), run.y.dtype(), &gen).to(device));
  }
  for (const Tensor& x : xs) run.grads.push_back(x.requires_grad() ? x.grad() : Tensor());
  return run;
}

// The one comparison every test uses: f's output and every input gradient on
// CUDA against the CPU's, to rtol.
void check_cuda_matches_cpu(const GradcheckFn& f, const Inputs& inputs, double rtol = kTol) {
  const Run cpu = run_on(Device::CPU, f, inputs);
  const Run gpu = run_on(Device::CUDA, f, inputs);
  CHECK(gpu.y.device() == Device::CUDA);
  REQUIRE(gpu.y.shape() == cpu.y.shape());
  CHECK_CLOSE(gpu.y, cpu.y, rtol);
  for (size_t i = 0; i < cpu.grads.size(); ++i) {
    if (!cpu.grads[i].defined()) continue;
    INFO("gradient of input " << i);
    REQUIRE(gpu.grads[i].defined());
    CHECK(gpu.grads[i].device() == Device::CUDA);
    CHECK_CLOSE(gpu.grads[i], cpu.grads[i], rtol);
  }
}
}  // namespace

TEST_CASE("a process that uses no device never maps cuBLAS") {
  const auto maps_cublas = [] {
    std::ifstream maps("/proc/self/maps");
    std::string line;
    while (std::getline(maps, line))
      if (line.find("libcublas") != std::string::npos) return true;
    return false;
  };
  // CPU work, and the question whether a device exists, open nothing.
  const Tensor a = ag::test::random({8, 8}, 1, DType::Float32);
  CHECK(matmul(a, a).shape() == Shape{8, 8});
  const bool device = cuda::available();
  // Earlier cases of this run may have used a device; then cuBLAS is open and mapped.
  CHECK(maps_cublas() == cuda::cublas_loaded());
  if (!device) CHECK_FALSE(maps_cublas());
  if (device && ag::test::cuda_or_skip()) {
    (void)matmul(a.to(Device::CUDA), a.to(Device::CUDA)).to(Device::CPU);
    CHECK(cuda::cublas_loaded());
    CHECK(maps_cublas());
  }
}

TEST_CASE("cuda: add, sub, mul, div with broadcasting") {
  if (!ag::test::cuda_or_skip()) return;
  const std::vector<std::pair<Shape, Shape>> shapes = {
      {{3, 7}, {3, 7}},       {{3, 7}, {7}},           {{1}, {3, 7}},  {{3, 1, 7}, {65, 1}},
      {{2, 3, 1}, {1, 1, 7}}, {{}, {7}},               {{64, 1000}, {1000}}, {{2, 1, 3, 1, 5}, {4, 1, 6, 1}}};
  for (const auto& [sa, sb] : shapes) {
    const std::string operand_shapes = to_string(sa) + " and " + to_string(sb);
    CAPTURE(operand_shapes);
    const Inputs in = {input(sa, 1), input(sb, 2)};
    check_cuda_matches_cpu([](const Inputs& x) { return add(x[0], x[1]); }, in);
    check_cuda_matches_cpu([](const Inputs& x) { return sub(x[0], x[1]); }, in);
    check_cuda_matches_cpu([](const Inputs& x) { return mul(x[0], x[1]); }, in);
    check_cuda_matches_cpu([](const Inputs& x) { return div(x[0], x[1]); }, {input(sa, 3), positive(sb, 4)});
  }
}

TEST_CASE("cuda: unary and scalar ops") {
  if (!ag::test::cuda_or_skip()) return;
  for (const Shape& shape : {Shape{1}, Shape{3, 7}, Shape{70001}}) {
    CAPTURE(to_string(shape));
    check_cuda_matches_cpu([](const Inputs& x) { return neg(x[0]); }, {input(shape, 6)});
    check_cuda_matches_cpu([](const Inputs& x) { return x[0] * 2.5 + 1.5; }, {input(shape, 7)});
    check_cuda_matches_cpu([](const Inputs& x) { return 3.0 - x[0] / 4.0; }, {input(shape, 8)});
    check_cuda_matches_cpu([](const Inputs& x) { return pow(x[0], 3.0); }, {input(shape, 9)});
    check_cuda_matches_cpu([](const Inputs& x) { return pow(x[0], -1.5); }, {positive(shape, 10)});
    check_cuda_matches_cpu([](const Inputs& x) { return exp(x[0]); }, {input(shape, 11)});
    check_cuda_matches_cpu([](const Inputs& x) { return log(x[0]); }, {positive(shape, 12)});
    check_cuda_matches_cpu([](const Inputs& x) { return tanh(x[0]); }, {input(shape, 13)});
    check_cuda_matches_cpu([](const Inputs& x) { return relu(x[0]); }, {input(shape, 14)});
    check_cuda_matches_cpu([](const Inputs& x) { return gelu(x[0], GeluApprox::Erf); }, {input(shape, 15)});
    check_cuda_matches_cpu([](const Inputs& x) { return gelu(x[0], GeluApprox::Tanh); }, {input(shape, 16)});
  }
}

TEST_CASE("cuda: a flat kernel longer than the grid cap (grid-stride loop)") {
  if (!ag::test::cuda_or_skip()) return;
  // 2^24 + 3 elements: more than kMaxBlocks · kThreads = 2^16 · 256 threads.
  check_cuda_matches_cpu([](const Inputs& x) { return relu(x[0] * 2.0 + 0.5); }, {input({(1 << 24) + 3}, 17)});
}

TEST_CASE("cuda: sum, mean and max, over all and over a dim") {
  if (!ag::test::cuda_or_skip()) return;
  const Tensor x = input({3, 7, 5}, 20);
  check_cuda_matches_cpu([](const Inputs& in) { return sum(in[0]); }, {x});
  check_cuda_matches_cpu([](const Inputs& in) { return mean(in[0]); }, {x});
  for (int64_t dim : {0, 1, -1}) {
    CAPTURE(dim);
    check_cuda_matches_cpu([dim](const Inputs& in) { return sum(in[0], dim); }, {x});
    check_cuda_matches_cpu([dim](const Inputs& in) { return sum(in[0], dim, true); }, {x});
    check_cuda_matches_cpu([dim](const Inputs& in) { return mean(in[0], dim); }, {x});
    check_cuda_matches_cpu([dim](const Inputs& in) { return max(in[0], dim); }, {x});
  }
  check_cuda_matches_cpu([](const Inputs& in) { return max(in[0], 0, true); }, {input({65, 1}, 22)});
  check_cuda_matches_cpu([](const Inputs& in) { return reduce_to_shape(in[0], {3, 1, 5}); }, {input({2, 3, 4, 5}, 23)});
  check_cuda_matches_cpu([](const Inputs& in) { return expand(in[0], {3, 7, 5}); }, {input({7, 1}, 24)});
}

TEST_CASE("cuda: long reductions: one output, few outputs, many outputs") {
  if (!ag::test::cuda_or_skip()) return;
  // The full sum spans many blocks; [4096, 33] -> [33] is the bias-gradient
  // shape (one block per output); [33, 4096] sums rows; [70000, 3] takes the
  // thread-per-output path.
  check_cuda_matches_cpu([](const Inputs& in) { return sum(in[0]); }, {input({1 << 20}, 25)}, kLongReduction);
  check_cuda_matches_cpu([](const Inputs& in) { return sum(in[0], 0); }, {input({4096, 33}, 26)}, kLongReduction);
  check_cuda_matches_cpu([](const Inputs& in) { return sum(in[0], 1); }, {input({33, 4096}, 27)}, kLongReduction);
  check_cuda_matches_cpu([](const Inputs& in) { return sum(in[0], 1); }, {input({70000, 3}, 28)});
  check_cuda_matches_cpu([](const Inputs& in) { return max(in[0], 1); }, {input({3, 5000}, 29)});
}

TEST_CASE("cuda: reshape, transpose, permute, slice, concat, split") {
  if (!ag::test::cuda_or_skip()) return;
  const Tensor x = input({3, 7, 5}, 30);
  check_cuda_matches_cpu([](const Inputs& in) { return in[0].reshape({7, -1}) * 1.0; }, {x});
  check_cuda_matches_cpu([](const Inputs& in) { return transpose(in[0], 0, 2); }, {x});
  check_cuda_matches_cpu([](const Inputs& in) { return permute(in[0], {1, 2, 0}); }, {x});
  check_cuda_matches_cpu([](const Inputs& in) { return permute(in[0], {0, 2, 1, 3}); }, {input({2, 9, 4, 6}, 32)});
  check_cuda_matches_cpu([](const Inputs& in) { return slice(in[0], 1, 2, 6); }, {x});
  check_cuda_matches_cpu([](const Inputs& in) { return concat({in[0], in[1]}, 1); }, {x, input({3, 1, 5}, 31)});
  check_cuda_matches_cpu([](const Inputs& in) { return concat({in[0], in[1]}, 0); }, {x, input({2, 7, 5}, 33)});
  check_cuda_matches_cpu(
      [](const Inputs& in) {
        const std::vector<Tensor> parts = split(in[0], {1, 4, 2}, 1);  // [3,1,5], [3,4,5], [3,2,5]
        return parts[0] * 2.0 + sum(parts[1], 1, true) - sum(parts[2] * parts[2], 1, true);
      },
      {x});
}

TEST_CASE("cuda: matmul 2-D, batched, and broadcast batch dims") {
  if (!ag::test::cuda_or_skip()) return;
  const std::vector<std::pair<Shape, Shape>> shapes = {
      {{3, 7}, {7, 5}},          {{1, 65}, {65, 3}},  {{2, 3, 7}, {7, 5}}, {{2, 3, 7}, {2, 7, 5}},
      {{2, 1, 3, 7}, {4, 7, 1}}, {{3, 7}, {2, 7, 5}}, {{65, 3}, {3, 1}},   {{0, 3}, {3, 4}},
      {{2, 0}, {0, 3}}};
  for (const auto& [sa, sb] : shapes) {
    const std::string operand_shapes = to_string(sa) + " and " + to_string(sb);
    CAPTURE(operand_shapes);
    check_cuda_matches_cpu([](const Inputs& x) { return matmul(x[0], x[1]); }, {input(sa, 40), input(sb, 41)});
  }
  // K = 4096 terms per output, and a batch above cuBLAS's 65535 grid limit (chunked).
  check_cuda_matches_cpu([](const Inputs& x) { return matmul(x[0], x[1]); }, {input({33, 4096}, 42), input({4096, 17}, 43)},
                         kLongReduction);
  check_cuda_matches_cpu([](const Inputs& x) { return matmul(x[0], x[1]); },
                         {input({70000, 2, 3}, 44), input({70000, 3, 2}, 45)});
}

TEST_CASE("cuda: TF32 is off by default and can be switched") {
  if (!ag::test::cuda_or_skip()) return;
  CHECK_FALSE(cuda::allow_tf32());
  cuda::set_allow_tf32(true);
  CHECK(cuda::allow_tf32());
  const Tensor a = input({64, 256}, 46).detach().to(Device::CUDA), b = input({256, 64}, 47).detach().to(Device::CUDA);
  const Tensor fast = matmul(a, b);
  cuda::set_allow_tf32(false);
  const Tensor exact = matmul(a, b);
  CHECK_CLOSE(fast, exact, 1e-2);  // TF32 keeps 10 mantissa bits
  CHECK_CLOSE(exact, matmul(a.to(Device::CPU), b.to(Device::CPU)), kTol);
}

TEST_CASE("cuda: softmax and log_softmax, rows shorter and longer than a block") {
  if (!ag::test::cuda_or_skip()) return;
  for (const Shape& shape : {Shape{1}, Shape{3, 7}, Shape{2, 3, 65}, Shape{7, 1}, Shape{5, 1000}, Shape{70000, 3}}) {
    CAPTURE(to_string(shape));
    check_cuda_matches_cpu([](const Inputs& x) { return softmax(x[0]); }, {input(shape, 50)});
    check_cuda_matches_cpu([](const Inputs& x) { return log_softmax(x[0]); }, {input(shape, 51)});
  }
  check_cuda_matches_cpu([](const Inputs& x) { return softmax(x[0]); }, {input({2, 5000}, 52)}, kLongReduction);
  check_cuda_matches_cpu([](const Inputs& x) { return log_softmax(x[0]); }, {input({2, 5000}, 53)}, kLongReduction);
}

TEST_CASE("cuda: softmax of a fully masked row is zeros, with zero gradient") {
  if (!ag::test::cuda_or_skip()) return;
  const double inf = std::numeric_limits<double>::infinity();
  const Tensor x = Tensor::from_vector({1, 2, 3, -inf, -inf, -inf, 0, -inf, 5}, {3, 3}).requires_grad_();
  check_cuda_matches_cpu([](const Inputs& in) { return softmax(in[0]); }, {x});
  const std::vector<double> y = softmax(x.detach().to(Device::CUDA)).to_vector();
  for (int j = 3; j < 6; ++j) CHECK(y[j] == 0.0);
  CHECK(y[7] == 0.0);
}

TEST_CASE("cuda: cross_entropy, with and without ignored targets") {
  if (!ag::test::cuda_or_skip()) return;
  const Tensor logits = input({7, 65}, 60);
  const Tensor targets = int_targets({7}, 65, 61);
  check_cuda_matches_cpu([](const Inputs& x) { return cross_entropy(x[0], x[1]); }, {logits, targets});
  std::vector<int64_t> t = targets.to_indices();
  t[1] = t[4] = -100;
  check_cuda_matches_cpu([](const Inputs& x) { return cross_entropy(x[0], x[1]); },
                         {logits, Tensor::from_indices(t, {7})});
  check_cuda_matches_cpu([](const Inputs& x) { return cross_entropy(x[0], x[1], 3) * 3.0; },
                         {input({2, 3, 7}, 63), int_targets({2, 3}, 7, 62)});
  // A GPT-2-sized vocabulary: rows far longer than a block.
  check_cuda_matches_cpu([](const Inputs& x) { return cross_entropy(x[0], x[1]); },
                         {input({4, 50257}, 64), int_targets({4}, 50257, 65)}, kLongReduction);
}

TEST_CASE("cuda: out-of-range targets and indices throw the CPU's messages, at the next synchronisation") {
  if (!ag::test::cuda_or_skip()) return;
  // The checks run on the device without the host waiting; reading a result (item) synchronises and throws.
  const Tensor logits = Tensor::zeros({2, 5}, DType::Float32, Device::CUDA);
  CHECK_THROWS_WITH_AS(cross_entropy(logits, Tensor::from_indices({1, 5}, {2}).to(Device::CUDA)).item(),
                       doctest::Contains("cross_entropy: target 5 at position 1 out of range [0, 5)"), Error);
  CHECK_THROWS_WITH_AS(cross_entropy(logits, Tensor::from_indices({-3, -100}, {2}).to(Device::CUDA)).item(),
                       doctest::Contains("cross_entropy: target -3 at position 0 out of range [0, 5) (ignore_index -100)"),
                       Error);
  const Tensor table = Tensor::zeros({4, 3}, DType::Float32, Device::CUDA);
  const Tensor rows = embedding(table, Tensor::from_indices({0, -1, 9}, {3}).to(Device::CUDA));
  CHECK_THROWS_WITH_AS(cuda::synchronize(),
                       doctest::Contains("embedding: index -1 at position 1 out of range for a table of 4 rows"), Error);
  // Nothing was read outside the table meanwhile (the bad rows are NaN), and a
  // reported error is not reported again: the device is still usable.
  const std::vector<double> values = rows.to_vector();
  CHECK(values[0] == 0.0);
  CHECK(std::isnan(values[3]));
  CHECK(sum(logits).item() == 0.0);
  // In-range indices queue a check that passes.
  CHECK(cross_entropy(logits, Tensor::from_indices({1, -100}, {2}).to(Device::CUDA)).item() == doctest::Approx(std::log(5.0)));
}

TEST_CASE("cuda: layer_norm") {
  if (!ag::test::cuda_or_skip()) return;
  for (const Shape& shape : {Shape{3, 7}, Shape{2, 3, 65}, Shape{1, 3}, Shape{4, 300}, Shape{70000, 4}}) {
    CAPTURE(to_string(shape));
    const int64_t C = shape.back();
    // dWeight and dBias sum over all rows: 70000 of them is a long reduction.
    check_cuda_matches_cpu([](const Inputs& x) { return layer_norm(x[0], x[1], x[2]); },
                           {input(shape, 70), input({C}, 71), input({C}, 72)},
                           numel(shape) / C >= 4096 ? kLongReduction : kTol);
  }
  // dWeight and dBias add 5000 rows (the two-pass column sums).
  check_cuda_matches_cpu([](const Inputs& x) { return layer_norm(x[0], x[1], x[2]); },
                         {input({5000, 16}, 73), input({16}, 74), input({16}, 75)}, kLongReduction);
}

TEST_CASE("cuda: the fused ops: linear, bias_gelu, add_layer_norm") {
  if (!ag::test::cuda_or_skip()) return;
  for (const Shape& x_shape : {Shape{3, 7}, Shape{2, 3, 7}, Shape{1, 7}}) {
    CAPTURE(to_string(x_shape));
    check_cuda_matches_cpu([](const Inputs& x) { return linear(x[0], x[1], x[2]); },
                           {input(x_shape, 140), input({7, 65}, 141), input({65}, 142)});
    check_cuda_matches_cpu([](const Inputs& x) { return linear(x[0], x[1], Tensor()); },
                           {input(x_shape, 143), input({7, 65}, 144)});
  }
  // The bias gradient adds every row: 5000 of them is a long reduction.
  for (const Shape& shape : {Shape{3, 65}, Shape{2, 3, 130}, Shape{5000, 16}}) {
    CAPTURE(to_string(shape));
    const int64_t C = shape.back();
    const double rtol = numel(shape) / C >= 4096 ? kLongReduction : kTol;
    for (GeluApprox approx : {GeluApprox::Erf, GeluApprox::Tanh})
      check_cuda_matches_cpu([approx](const Inputs& x) { return bias_gelu(x[0], x[1], approx); },
                             {input(shape, 145), input({C}, 146)}, rtol);
    check_cuda_matches_cpu(
        [](const Inputs& x) {
          const AddLayerNorm out = add_layer_norm(x[0], x[1], x[2], x[3]);
          return concat({out.sum, out.normed}, -1);
        },
        {input(shape, 147), input(shape, 148), input({C}, 149), input({C}, 150)}, rtol);
  }
}

TEST_CASE("cuda: embedding with repeated indices, and a deterministic backward") {
  if (!ag::test::cuda_or_skip()) return;
  check_cuda_matches_cpu([](const Inputs& x) { return embedding(x[0], x[1]); },
                         {input({7, 5}, 80), Tensor::from_indices({0, 2, 2, 6, 0, 3}, {2, 3})});
  // V = 70 spans three groups of 32 rows; 1000 indices span four tiles of 256.
  const Tensor indices = int_targets({4, 250}, 70, 81);
  check_cuda_matches_cpu([](const Inputs& x) { return embedding(x[0], x[1]); }, {input({70, 9}, 82), indices});

  // Every index the same row: the worst case for a scatter-add with atomics.
  const Tensor same = Tensor::from_indices(std::vector<int64_t>(3000, 5), {3000}).to(Device::CUDA);
  Tensor weight = input({70, 300}, 83).detach().to(Device::CUDA).requires_grad_();
  const Tensor upstream = ag::test::random({3000, 300}, 84, DType::Float32, false).to(Device::CUDA);
  auto gradient_bits = [&] {
    weight.zero_grad();
    embedding(weight, same).backward(upstream);
    return weight.grad().to_vector();
  };
  const std::vector<double> first = gradient_bits(), second = gradient_bits();
  CHECK(std::memcmp(first.data(), second.data(), first.size() * sizeof(double)) == 0);
}

TEST_CASE("cuda: dropout draws the CPU's mask from the same seed") {
  if (!ag::test::cuda_or_skip()) return;
  const auto f = [](const Inputs& in) {
    Generator gen(7);
    return dropout(in[0], 0.3, true, &gen);
  };
  const Tensor x = input({7, 6500}, 90);
  check_cuda_matches_cpu(f, {x});
  const std::vector<double> cpu = f({x.detach()}).to_vector(), gpu = f({x.detach().to(Device::CUDA)}).to_vector();
  REQUIRE(cpu.size() == gpu.size());
  int64_t differing = 0;
  for (size_t i = 0; i < cpu.size(); ++i) differing += (cpu[i] == 0.0) != (gpu[i] == 0.0);
  CHECK(differing == 0);
}

TEST_CASE("cuda: optimizer kernels") {
  if (!ag::test::cuda_or_skip()) return;
  const Shape shape = {3, 1000};
  const Tensor param = input(shape, 110).detach(), grad = input(shape, 111).detach();
  const Tensor m0 = input(shape, 112).detach() * 0.1, v0 = positive(shape, 113).detach() * 0.01;
  for (bool decoupled : {false, true}) {
    CAPTURE(decoupled);
    kernel::AdamHyper hyper{1e-2, 0.9, 0.999, 1e-8, 0.1, 1, decoupled};
    auto adam = [&](Device device) {
      std::vector<Tensor> s = {copy_to(device, param), copy_to(device, m0), copy_to(device, v0)};
      const Tensor g = copy_to(device, grad);
      for (hyper.step = 1; hyper.step <= 3; ++hyper.step) kernel::adam_step(s[0], g, s[1], s[2], hyper);
      return s;
    };
    const std::vector<Tensor> cpu = adam(Device::CPU), gpu = adam(Device::CUDA);
    for (int i = 0; i < 3; ++i) CHECK_CLOSE(gpu[i], cpu[i], kTol);
  }
  for (const auto& setting : std::vector<std::pair<double, bool>>{{0.0, false}, {0.9, false}, {0.9, true}}) {
    const double momentum = setting.first;
    const bool nesterov = setting.second;
    CAPTURE(momentum);
    CAPTURE(nesterov);
    auto sgd = [&](Device device) {
      Tensor p = copy_to(device, param), b = copy_to(device, m0);
      const Tensor g = copy_to(device, grad);
      for (int step = 0; step < 3; ++step)
        kernel::sgd_step(p, g, momentum == 0.0 ? p : b, {0.1, momentum, 0.1, 0.01, nesterov, step == 0});
      return std::pair{p, b};
    };
    const auto [p_cpu, b_cpu] = sgd(Device::CPU);
    const auto [p_gpu, b_gpu] = sgd(Device::CUDA);
    CHECK_CLOSE(p_gpu, p_cpu, kTol);
    CHECK_CLOSE(b_gpu, b_cpu, kTol);
  }
  // Both devices add the squares in double: they agree far below float32's precision.
  const Tensor big = input({1 << 20}, 114).detach();
  const auto sum_of_squares = [](const Tensor& x) {
    Tensor total = Tensor::empty({}, DType::Float64, x.device());
    kernel::sum_of_squares(x, total);
    return total;
  };
  const Tensor cpu_total = sum_of_squares(big), gpu_total = sum_of_squares(big.to(Device::CUDA));
  CHECK(gpu_total.device() == Device::CUDA);
  CHECK(gpu_total.item() == doctest::Approx(cpu_total.item()).epsilon(1e-12));
  CHECK(sum_of_squares(Tensor::zeros({0}, DType::Float32, Device::CUDA)).item() == 0.0);
  // Clipping reads the sum where it lies: over the threshold it scales, under it leaves the bits.
  for (const double max_norm : {0.37 * std::sqrt(cpu_total.item()), 2.0 * std::sqrt(cpu_total.item())}) {
    Tensor clipped_cpu = big.clone(), clipped_gpu = big.to(Device::CUDA);
    kernel::clip_by_norm(clipped_cpu, cpu_total, max_norm);
    kernel::clip_by_norm(clipped_gpu, gpu_total, max_norm);
    CHECK_CLOSE(clipped_gpu, clipped_cpu, kTol);
  }
}

TEST_CASE("cuda: fill, cast, copies and zero-size tensors") {
  if (!ag::test::cuda_or_skip()) return;
  const Tensor full = Tensor::full({3, 4}, 2.5, DType::Float64, Device::CUDA);
  for (double v : full.to_vector()) CHECK(v == 2.5);
  const Tensor x = input({5, 6}, 120).detach();
  CHECK_CLOSE(x.to(Device::CUDA).to(DType::Float64).to(DType::Float32), x, 0.0);
  CHECK(Tensor::arange(5, DType::Int64, Device::CUDA).to(DType::Float32).to_vector() ==
        std::vector<double>{0, 1, 2, 3, 4});
  check_cuda_matches_cpu([](const Inputs& in) { return add(in[0], in[1]); }, {input({0, 3}, 121), input({3}, 122)});
  check_cuda_matches_cpu([](const Inputs& in) { return sum(in[0]); }, {input({0, 3}, 123)});
  check_cuda_matches_cpu([](const Inputs& in) { return sum(in[0], 0); }, {input({0, 3}, 124)});
  check_cuda_matches_cpu([](const Inputs& in) { return softmax(in[0]); }, {input({0, 5}, 125)});
  check_cuda_matches_cpu([](const Inputs& in) { return layer_norm(in[0], in[1], in[2]); },
                         {input({0, 4}, 126), input({4}, 127), input({4}, 128)});
  check_cuda_matches_cpu([](const Inputs& in) { return embedding(in[0], in[1]); },
                         {input({4, 3}, 129), Tensor::from_indices({}, {0})});
}

TEST_CASE("cuda: mixing devices throws ag::Error naming the op") {
  if (!ag::test::cuda_or_skip()) return;
  const Tensor cpu = Tensor::ones({2, 2}), gpu = Tensor::ones({2, 2}, DType::Float32, Device::CUDA);
  CHECK_THROWS_WITH_AS(add(cpu, gpu), doctest::Contains("add: [2,2] float32, [2,2] float32 cuda: mixed devices"), Error);
  CHECK_THROWS_WITH_AS(matmul(gpu, cpu), doctest::Contains("matmul:"), Error);
  CHECK_THROWS_WITH_AS(embedding(gpu, Tensor::from_indices({0}, {1})), doctest::Contains("embedding: indices"), Error);
  Tensor out = Tensor::empty({2}, DType::Float32, Device::CPU);
  CHECK_THROWS_WITH_AS(kernel::sum_to_shape(gpu, out),
                       doctest::Contains("sum_to_shape: tensors on different devices (cuda and cpu)"), Error);
}

TEST_CASE("cuda: the caching allocator serves a repeated step without cudaMalloc") {
  if (!ag::test::cuda_or_skip()) return;
  Tensor w = input({64, 32}, 130).detach().to(Device::CUDA).requires_grad_();
  const Tensor x = input({16, 64}, 131).detach().to(Device::CUDA);
  auto step = [&] {
    w.zero_grad();
    sum(gelu(matmul(x, w))).backward();
  };
  step();
  const cuda::MemoryStats before = cuda::memory_stats();
  step();
  const cuda::MemoryStats after = cuda::memory_stats();
  CHECK(after.system_allocs == before.system_allocs);
  CHECK(after.in_use_bytes == before.in_use_bytes);
  cuda::empty_cache();
  CHECK(cuda::memory_stats().cached_bytes == 0);
}

TEST_CASE("cuda: linear attention, elu1 and favor, causal and not (features, prefix products, backward)") {
  if (!ag::test::cuda_or_skip()) return;
  for (FeatureMap map : {FeatureMap::Elu1, FeatureMap::Favor})
    for (bool causal : {true, false})
      for (int64_t T : {1, 65, 200}) {
        CAPTURE(std::string(name_of(map)));
        CAPTURE(causal);
        CAPTURE(T);
        const Tensor omega = favor_projection(24, 16, 9).to(DType::Float32);
        check_cuda_matches_cpu(
            [&](const Inputs& x) {
              const AttentionSpec spec{.function = AttentionFunction::Linear, .causal = causal, .feature_map = map,
                                       .omega = map == FeatureMap::Favor ? omega.to(x[0].device()) : Tensor()};
              return attention(x[0], x[1], x[2], spec);
            },
            {input({2, 3, T, 16}, 401), input({2, 3, T, 16}, 402), input({2, 3, T, 16}, 403)});
      }
}
