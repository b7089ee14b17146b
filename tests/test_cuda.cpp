// What only CUDA has: whether cuBLAS is loaded, TF32, errors raised on the
// device and reported at the next synchronisation, the grid cap, atomics that
// must still be deterministic, the caching allocator, mixed devices, and the
// optimizer kernels against the CPU's. Every op is checked on the device
// against the CPU where it is checked on the CPU (TEST_CASE_EVERY_DEVICE in
// test_ops_gradcheck.cpp and the attention tests). Without a device each case
// prints [SKIP], which CTest reports as Skipped.
#include <cmath>
#include <cstring>
#include <fstream>

#include "core/dispatch.h"
#include "tests/helpers.h"

// The file's names and using-directives stay its own in a unity build, where the test
// files compile as one translation unit (CMakeLists.txt).
namespace cuda_test {

using namespace ag;

namespace {
using Inputs = std::vector<Tensor>;

constexpr double kTol = 1e-5;

// float32 N(0, 1) inputs requiring grad; positive() for Adam's second moments.
Tensor input(const Shape& shape, uint64_t seed) { return ag::test::random(shape, seed, DType::Float32); }
Tensor positive(const Shape& shape, uint64_t seed) {
  Generator gen(seed);
  return Tensor::uniform(shape, 0.5, 2.0, DType::Float32, &gen).requires_grad_();
}

// A copy of x of its own on `device`, requiring grad as x does.
Tensor copy_to(Device device, const Tensor& x) { return ag::test::copy_to(device, x, x.dtype()); }

// f's output and every input gradient on CUDA against the CPU's, to rtol.
void check_cuda_matches_cpu(const GradcheckFn& f, const Inputs& inputs, double rtol = kTol) {
  ag::test::check_device_matches_cpu(Device::CUDA, f, inputs, rtol);
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

TEST_CASE("cuda: a flat kernel longer than the grid cap (grid-stride loop)") {
  if (!ag::test::cuda_or_skip()) return;
  // 2^24 + 3 elements: more than kMaxBlocks · kThreads = 2^16 · 256 threads.
  check_cuda_matches_cpu([](const Inputs& x) { return relu(x[0] * 2.0 + 0.5); }, {input({(1 << 24) + 3}, 17)});
}

TEST_CASE("cuda: TF32 is off by default — switched on it changes matmul's result, which stays close") {
  if (!ag::test::cuda_or_skip()) return;
  CHECK_FALSE(cuda::allow_tf32());
  const Tensor a = input({64, 256}, 46).detach().to(Device::CUDA), b = input({256, 64}, 47).detach().to(Device::CUDA);
  const Tensor reference = matmul(a.to(Device::CPU), b.to(Device::CPU));
  cuda::set_allow_tf32(true);
  CHECK(cuda::allow_tf32());
  const Tensor fast = matmul(a, b);
  cuda::set_allow_tf32(false);
  CHECK_FALSE(cuda::allow_tf32());
  const Tensor exact = matmul(a, b);
  // TF32 rounds the operands to 10 mantissa bits, float32 keeps 23: over K = 256
  // terms its error is ~1e-3, far above float32's ~1e-7. A switch that did
  // nothing would leave the two errors alike.
  const double tf32_error = ag::test::relative_error(fast, reference);
  const double float32_error = ag::test::relative_error(exact, reference);
  INFO("TF32's error " << tf32_error << ", float32's " << float32_error);
  CHECK(tf32_error > 10 * float32_error);
  CHECK(tf32_error <= 1e-2);
  CHECK(float32_error <= kTol);
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

TEST_CASE("cuda: embedding's backward is deterministic with every index the same row") {
  if (!ag::test::cuda_or_skip()) return;
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
    auto adam = [&](Device device) {
      std::vector<Tensor> s = {copy_to(device, param), copy_to(device, m0), copy_to(device, v0)};
      const Tensor g = copy_to(device, grad);
      Tensor applied = Tensor::from_indices({0}, {1}).to(device);  // the step count, read where it lives
      const kernel::AdamHyper hyper{1e-2, 0.9, 0.999, 1e-8, 0.1, static_cast<const int64_t*>(applied.raw_data()), decoupled};
      for (int step = 1; step <= 3; ++step) {
        kernel::adam_step(s[0], g, s[1], s[2], hyper);
        kernel::count_applied_step(applied, nullptr);
      }
      CHECK(applied.to_indices() == std::vector<int64_t>{3});
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
      Tensor applied = Tensor::from_indices({0}, {1}).to(device);
      const kernel::SgdHyper hyper{0.1, momentum, 0.1, 0.01, nesterov, static_cast<const int64_t*>(applied.raw_data())};
      for (int step = 0; step < 3; ++step) {
        kernel::sgd_step(p, g, momentum == 0.0 ? p : b, hyper);
        kernel::count_applied_step(applied, nullptr);
      }
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

TEST_CASE("cuda: fill, cast, copies and a zero-size copy") {
  if (!ag::test::cuda_or_skip()) return;
  const Tensor full = Tensor::full({3, 4}, 2.5, DType::Float64, Device::CUDA);
  for (double v : full.to_vector()) CHECK(v == 2.5);
  const Tensor x = input({5, 6}, 120).detach();
  CHECK_CLOSE(x.to(Device::CUDA).to(DType::Float64).to(DType::Float32), x, 0.0);
  CHECK(Tensor::arange(5, DType::Int64, Device::CUDA).to(DType::Float32).to_vector() ==
        std::vector<double>{0, 1, 2, 3, 4});
  CHECK(Tensor::zeros({0, 3}, DType::Float32, Device::CUDA).to(Device::CPU).shape() == Shape{0, 3});
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

}  // namespace cuda_test
