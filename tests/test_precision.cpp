// --precision fp32 | tf32 | bf16 (issue 48): one line of the training options
// table (optim/train_options.h), so the command line, the training state's
// metadata and the resume rule come from it; the CPU refuses tf32 and bf16
// before anything is written; and the CUDA GEMM switch it sets
// (cuda::set_gemm_precision), whose bf16 products are checked against the
// CPU's float64 product within the bound derived from bf16's significand
// (docs/backprop.md, "Mixed precision"). Without a device the CUDA cases print
// [SKIP].
#include <cmath>
#include <cstring>
#include <filesystem>

#include "core/safetensors.h"
#include "cuda/context.h"
#include "examples/common/checkpoint.h"
#include "examples/common/command_line.h"
#include "examples/common/program_header.h"
#include "examples/common/train.h"
#include "optim/adam.h"
#include "tests/char_lm_helpers.h"
#include "tests/helpers.h"

// The file's names and using-directives stay its own in a unity build, where the test
// files compile as one translation unit (CMakeLists.txt).
namespace precision_test {

using namespace ag;
using namespace ag::char_lm;

namespace {
using ag::test::contains;

// tiny_run, two iterations.
TrainConfig precision_run(const std::string& out) {
  TrainConfig c = ag::test::tiny_run(out);
  c.run.max_iters = 2;
  c.run.eval_interval = 2;
  return c;
}
}  // namespace

TEST_CASE("precision: --precision is one table line — parsed, in --help, fp32 by default, unknown names refused") {
  for (const auto& entry : EnumNames<Precision>::values) {
    const Precision value = entry.first;  // no structured binding: CAPTURE captures it in a lambda (clang 14)
    const std::string text = entry.second;
    CAPTURE(text);
    TrainConfig c;
    const std::set<std::string> given = ag::test::parse_train(c, {"--precision", text});
    CHECK(c.optim.precision == value);
    CHECK(given.count("precision") == 1);
  }
  CHECK(optim::TrainOptions{}.precision == Precision::FP32);
  CHECK(option_from_string<Precision>("bf16", "--precision") == Precision::BF16);
  CHECK_THROWS_WITH_AS(option_from_string<Precision>("fp16", "--precision"),
                       "--precision: 'fp16' is not one of fp32|tf32|bf16", Error);
  const auto [status, help] = ag::test::run_char_lm("train --help");
  CHECK(status == 0);
  CHECK(contains(help, "--precision"));
}

TEST_CASE("precision: the CPU refuses tf32 and bf16, saying where they run, and writes nothing") {
  const ag::test::TempDir tmp("precision_refused");
  for (const Precision p : {Precision::TF32, Precision::BF16}) {
    const std::string name = name_of(p);
    CAPTURE(name);
    TrainConfig c = precision_run(tmp.file(name));
    c.optim.precision = p;
    const std::string message = ag::test::error_of([&] { train(c); });
    CHECK(message == "--precision " + name + " runs on CUDA (--device cuda); on the CPU use fp32");
    CHECK_FALSE(std::filesystem::exists(c.run.out));  // refused before --out is made
    // The step itself refuses too (the lab, sort and profile_step build one without char_lm's checks).
    Generator init(1);
    Tensor w = Tensor::randn({2, 2}, DType::Float32, &init).requires_grad_();
    optim::AdamW adam(optim::decay_groups({{"w", w}}, 0.0), {});
    optim::TrainOptions options;
    options.precision = p;
    CHECK_THROWS_WITH_AS(optim::TrainStep(adam, options, [](const Tensor&, const Tensor&, std::span<const int64_t>) {
                           return Tensor();
                         }, Device::CPU),
                         ("--precision " + name + " runs on CUDA (--device cuda); on the CPU use fp32").c_str(),
                         OptionError);
  }
  // The program: its message, and no --out.
  const auto [status, output] =
      ag::test::run_char_lm("train --precision bf16 --max-iters 1 --out " + tmp.file("program") + " --data " +
                            ag::test::generated_text_file());
  CHECK(status != 0);
  CHECK(contains(output, "--precision bf16 runs on CUDA (--device cuda); on the CPU use fp32"));
  CHECK_FALSE(std::filesystem::exists(tmp.file("program")));
}

TEST_CASE("precision: saved with the training state, kept by a resumed run, another value given again refused") {
  const ag::test::TempDir tmp("precision_resume");
  TrainConfig c = precision_run(tmp.file("run"));
  train(c);
  CHECK(load_safetensors(train_state_path(find_checkpoint(c.run.out))).metadata.at("precision") == "fp32");
  // Not given again: the run's value. Given with another: the conflict every Run option is.
  TrainConfig resume = precision_run(c.run.out);
  resume.run.resume = true;
  resume.run.max_iters = 4;
  resume.given = std::set<std::string>{"resume", "max_iters", "out"};
  CHECK_NOTHROW(train(resume));
  CHECK(load_safetensors(train_state_path(find_checkpoint(c.run.out))).metadata.at("precision") == "fp32");
  resume.run.max_iters = 6;
  resume.given->insert("precision");
  resume.optim.precision = Precision::TF32;
  CHECK_THROWS_WITH_AS(train(resume), doctest::Contains("--precision: the run has fp32, this call gives tf32"), Error);
}

TEST_CASE("precision: a bf16 run resumed on the CPU names the checkpoint, and --precision fp32 given again continues it") {
  const ag::test::TempDir tmp("precision_saved_bf16");
  TrainConfig c = precision_run(tmp.file("run"));
  train(c);
  // The run as one saved on CUDA with bf16 would be (the weights and the optimizer state are float32 either
  // way): a copy in a fresh directory, as a run from before checkpoint units (its two files at the top).
  const std::string unit = find_checkpoint(c.run.out), dir = tmp.file("bf16");
  std::filesystem::create_directories(dir);
  const SafetensorsFile weights = load_safetensors(model_path(unit));
  save_safetensors(model_path(dir), weights.tensors, weights.metadata);
  SafetensorsFile state = load_safetensors(train_state_path(unit));
  state.metadata["precision"] = "bf16";
  const std::string state_path = train_state_path(dir);
  save_safetensors(state_path, state.tensors, state.metadata);

  TrainConfig resume = precision_run(dir);
  resume.run.resume = true;
  resume.run.max_iters = 4;
  resume.given = std::set<std::string>{"resume", "max_iters", "out"};
  const std::string message = ag::test::error_of([&] { train(resume); });
  CAPTURE(message);
  CHECK(message.starts_with("checkpoint '" + state_path + "': "));
  CHECK(contains(message, "--precision bf16 runs on CUDA (--device cuda); on the CPU use fp32"));
  CHECK(contains(message, "--precision VALUE"));
  // Replaced on the command line, as the message advises: the run goes on, and saves fp32.
  resume.given->insert("precision");
  resume.optim.precision = Precision::FP32;
  CHECK(ag::test::error_of([&] { train(resume); }) == "");
  CHECK(load_safetensors(train_state_path(dir + "/" + unit_name(4))).metadata.at("precision") == "fp32");
}

TEST_CASE("precision: a PrecisionScope sets the CUDA GEMMs' switch for its lifetime, allow_tf32 is the same switch") {
  REQUIRE(cuda::gemm_precision() == Precision::FP32);
  const bool cublas_before = cuda::cublas_loaded();  // earlier cases may have used a device
  {
    const optim::PrecisionScope bf16(Precision::BF16);
    CHECK(cuda::gemm_precision() == Precision::BF16);
    CHECK_FALSE(cuda::allow_tf32());
    {
      const optim::PrecisionScope tf32(Precision::TF32);
      CHECK(cuda::allow_tf32());
    }
    CHECK(cuda::gemm_precision() == Precision::BF16);
  }
  CHECK(cuda::gemm_precision() == Precision::FP32);
  CHECK(cuda::cublas_loaded() == cublas_before);  // setting the switch opens no cuBLAS (a CPU run sets it too)
  cuda::set_allow_tf32(true);
  CHECK(cuda::gemm_precision() == Precision::TF32);
  cuda::set_allow_tf32(false);
  CHECK(cuda::gemm_precision() == Precision::FP32);
}

TEST_CASE("precision: the program header names the CUDA GEMMs' precision") {
  nn::GPTConfig model;
  model.vocab_size = 65;
  CHECK_FALSE(contains(cli::header(model, Device::CPU), "precision"));
  CHECK(contains(cli::header(model, Device::CUDA, Precision::BF16), "precision bf16; host "));
}

// --- CUDA: the bf16 GEMM ------------------------------------------------------------------

namespace {
// x rounded to the nearest bfloat16, ties to even (as __float2bfloat16_rn): keep
// float32's sign, exponent and top 7 fraction bits. Finite inputs only.
float to_bf16(float x) {
  uint32_t bits;
  std::memcpy(&bits, &x, sizeof bits);
  bits += 0x7FFFu + ((bits >> 16) & 1u);
  bits &= 0xFFFF0000u;
  std::memcpy(&x, &bits, sizeof x);
  return x;
}

// The bound on |C_ij − (A·B)_ij| for a bf16 GEMM with float32 accumulation,
// from the significands (docs/backprop.md, "Mixed precision"):
//   each input rounded to bf16: a(1 + δ), |δ| ≤ u = 2^-8, so each product is
//   ab(1 + δ_a)(1 + δ_b), off by ≤ (2u + u²)|a||b|; the product of two bf16
//   numbers (8-bit significands) fits float32's 24 bits exactly;
//   summed in float32 in any order: ≤ γ_K · Σ_k |â_ik||b̂_kj|, γ_K = K·2^-24 / (1 − K·2^-24),
//   and |â||b̂| ≤ (1 + u)²|a||b|.
//   |err_ij| ≤ [(2u + u²) + γ_K (1 + u)²] · Σ_k |a_ik||b_kj|   (2·2^-8 + 2^-16 + K·2^-24 to first order)
constexpr double kBf16Unit = 1.0 / 256;  // u = 2^-8
double float32_sums_bound(int64_t K) {
  const double e = std::ldexp(1.0, -24);
  return K * e / (1 - K * e) * (1 + kBf16Unit) * (1 + kBf16Unit);  // γ_K (1 + u)²
}
double bf16_gemm_bound(int64_t K) { return 2 * kBf16Unit + kBf16Unit * kBf16Unit + float32_sums_bound(K); }

// |A|·|B| (Σ_k |a_ik||b_kj|), [M, N] as a vector, from float64 copies.
Tensor abs_of(const Tensor& x) {
  std::vector<double> v = x.detach().to_vector();
  for (double& e : v) e = std::abs(e);
  return Tensor::from_vector(v, x.shape(), DType::Float64);
}
std::vector<double> abs_product(const Tensor& A, const Tensor& B) { return matmul(abs_of(A), abs_of(B)).to_vector(); }
}  // namespace

TEST_CASE("cuda: a bf16 GEMM is within (2·2^-8 + 2^-16 + K·2^-24)·|A||B| of the float64 product, and its rounding is bf16's") {
  if (!ag::test::cuda_or_skip()) return;
  for (const int64_t K : {64, 384, 1536}) {
    CAPTURE(K);
    const int64_t M = 96, N = 80;
    const Tensor A = ag::test::random({M, K}, 7 + K, DType::Float32), B = ag::test::random({K, N}, 8 + K, DType::Float32);
    const std::vector<double> exact = matmul(A.to(DType::Float64), B.to(DType::Float64)).to_vector();
    const std::vector<double> scale = abs_product(A, B);
    std::vector<double> fast;
    {
      const optim::PrecisionScope bf16(Precision::BF16);
      fast = matmul(A.to(Device::CUDA), B.to(Device::CUDA)).to_vector();
    }
    // The inputs rounded to bf16 on the host, multiplied in float64: the GEMM differs from it by its float32 sums only.
    auto rounded = [](const Tensor& x) {
      std::vector<double> v = x.to_vector();
      for (double& e : v) e = to_bf16(static_cast<float>(e));
      return Tensor::from_vector(v, x.shape(), DType::Float64);
    };
    const std::vector<double> of_rounded = matmul(rounded(A), rounded(B)).to_vector();
    double worst = 0, worst_sums = 0, largest = 0;
    for (size_t i = 0; i < exact.size(); ++i) {
      worst = std::max(worst, std::abs(fast[i] - exact[i]) / (bf16_gemm_bound(K) * scale[i]));
      worst_sums = std::max(worst_sums, std::abs(fast[i] - of_rounded[i]) / (float32_sums_bound(K) * scale[i]));
      largest = std::max(largest, std::abs(fast[i] - exact[i]) / scale[i]);
    }
    INFO("error / bound " << worst << ", float32 sums' error / γ_K(1 + u)²·|A||B| " << worst_sums);
    CHECK(worst <= 1.0);
    CHECK(worst_sums <= 1.0);
    CHECK(largest > std::ldexp(1.0, -14));  // the inputs were rounded: float32 alone stays near 2^-24·√K
  }
}

TEST_CASE("cuda: bf16 matmul gradients (transposed, batched GEMMs) stay within the bf16 bound of float64's") {
  if (!ag::test::cuda_or_skip()) return;
  // Y = X Wᵀ over a batch: forward [B, T, C]·[C, D]ᵀ, backward dX = dY W and dW = dYᵀ X, each a GEMM.
  const int64_t B = 3, T = 40, C = 64, D = 48;
  const Tensor X = ag::test::random({B, T, C}, 21, DType::Float32), W = ag::test::random({D, C}, 22, DType::Float32);
  const Tensor dY = ag::test::random({B, T, D}, 23, DType::Float32);
  auto run = [&](Device device, DType dtype) {
    Tensor x = X.detach().to(dtype).to(device).requires_grad_(), w = W.detach().to(dtype).to(device).requires_grad_();
    const Tensor y = matmul(x, transpose(w, 0, 1));
    y.backward(dY.to(dtype).to(device));
    return std::vector<Tensor>{y.detach().to(Device::CPU), x.grad().to(Device::CPU), w.grad().to(Device::CPU)};
  };
  const std::vector<Tensor> exact = run(Device::CPU, DType::Float64);
  std::vector<Tensor> fast;
  {
    const optim::PrecisionScope bf16(Precision::BF16);
    fast = run(Device::CUDA, DType::Float32);
  }
  // Each result's |·|·|·| product and contraction length: Y over C, dX over D, dW over B·T.
  const Tensor x = X.to(DType::Float64).reshape({B * T, C}), w = W.to(DType::Float64), dy = dY.to(DType::Float64).reshape({B * T, D});
  const std::vector<std::pair<std::vector<double>, int64_t>> scales = {
      {abs_product(x, transpose(w, 0, 1)), C}, {abs_product(dy, w), D}, {abs_product(transpose(dy, 0, 1), x), B * T}};
  const char* names[] = {"Y", "dX", "dW"};
  for (size_t r = 0; r < 3; ++r) {
    CAPTURE(names[r]);
    const std::vector<double> f = fast[r].to_vector(), e = exact[r].to_vector();
    double worst = 0;
    for (size_t i = 0; i < e.size(); ++i)
      worst = std::max(worst, std::abs(f[i] - e[i]) / (bf16_gemm_bound(scales[r].second) * scales[r].first[i]));
    CHECK(worst <= 1.0);
  }
}

TEST_CASE("cuda: the bf16 switch leaves float64 GEMMs exact, and fp32 restored gives float32's result again") {
  if (!ag::test::cuda_or_skip()) return;
  const Tensor A = ag::test::random({32, 200}, 31, DType::Float64), B = ag::test::random({200, 24}, 32, DType::Float64);
  const Tensor on_cpu = matmul(A, B);
  const Tensor fp32 = matmul(A.to(DType::Float32).to(Device::CUDA), B.to(DType::Float32).to(Device::CUDA)).to(Device::CPU);
  {
    const optim::PrecisionScope bf16(Precision::BF16);
    CHECK(ag::test::relative_error(matmul(A.to(Device::CUDA), B.to(Device::CUDA)).to(Device::CPU), on_cpu) < 1e-13);
  }
  const Tensor again = matmul(A.to(DType::Float32).to(Device::CUDA), B.to(DType::Float32).to(Device::CUDA)).to(Device::CPU);
  CHECK(again.to_vector() == fp32.to_vector());
}

}  // namespace precision_test
