// The mlp op (core/ops/mlp.cpp): gelu(X W_fc + b_fc) W_proj + b_proj as one op,
// whose CUDA kernels carry the bias and GELU in cuBLASLt's epilogues (cuda/mlp.cu).
// On the CPU it must be the composition it replaced, bit for bit (the golden
// files of test_char_lm and test_before46 depend on it), and its hand-derived
// backward must pass gradcheck. On a device: float32 against the CPU, and under
// --precision tf32 and bf16 every output and gradient within a bound derived
// from the significands (below), which also holds for fp32. Without a device the
// "cuda:" cases print [SKIP].
#include <cmath>
#include <array>

#include "core/elementwise_math.h"
#include "cuda/context.h"
#include "optim/train_step.h"
#include "tests/helpers.h"

// The file's names and using-directives stay its own in a unity build, where the test
// files compile as one translation unit (CMakeLists.txt).
namespace mlp_test {

using namespace ag;
using ag::test::random;

namespace {
using Inputs = std::vector<Tensor>;

// x [..., C], w_fc [C, F], b_fc [F], w_proj [F, C], b_proj [C], float64, all requiring gradients.
Inputs mlp_inputs(const Shape& x_shape, int64_t F, uint64_t seed) {
  const int64_t C = x_shape.back();
  return {random(x_shape, seed), random({C, F}, seed + 1), random({F}, seed + 2), random({F, C}, seed + 3),
          random({C}, seed + 4)};
}

GradcheckFn fused(GeluApprox approx) {
  return [approx](const Inputs& x) { return mlp(x[0], x[1], x[2], x[3], x[4], approx); };
}
// What nn::MLP computed before the op: the reference.
GradcheckFn composed(GeluApprox approx) {
  return [approx](const Inputs& x) { return linear(bias_gelu(matmul(x[0], x[1]), x[2], approx), x[3], x[4]); };
}

// f(inputs) and every input's gradient from one upstream gradient, as float64 vectors, in `dtype`.
std::vector<std::vector<double>> output_and_gradients(const GradcheckFn& f, const Inputs& inputs64, DType dtype) {
  Inputs xs;
  for (const Tensor& x : inputs64) xs.push_back(x.detach().to(dtype).requires_grad_());
  const Tensor y = f(xs);
  Generator gen(77);
  y.backward(Tensor::randn(y.shape(), dtype, &gen));
  std::vector<std::vector<double>> all = {y.to_vector()};
  for (const Tensor& x : xs) all.push_back(x.grad().to_vector());
  return all;
}
}  // namespace

TEST_CASE("mlp: on the CPU it is linear(bias_gelu(matmul(x, W_fc), b_fc), W_proj, b_proj) bit for bit — float32 and float64, both GELUs") {
  // F = 65 and 130: one and several column blocks in b_fc's gradient sums; [2, 150, 12] rows enough to split over threads.
  for (const auto& size : std::vector<std::pair<Shape, int64_t>>{{{1, 3}, 5}, {{7, 4}, 65}, {{2, 150, 12}, 130}}) {
    const Shape x_shape = size.first;  // not structured bindings: CAPTURE's lambda reads them (clang 14)
    const int64_t F = size.second;
    CAPTURE(to_string(x_shape));
    for (GeluApprox approx : {GeluApprox::Erf, GeluApprox::Tanh})
      for (DType dtype : {DType::Float32, DType::Float64}) {
        CAPTURE(name_of(approx));
        CAPTURE(dtype_name(dtype));
        const Inputs in = mlp_inputs(x_shape, F, 200);
        const auto a = output_and_gradients(fused(approx), in, dtype), b = output_and_gradients(composed(approx), in, dtype);
        for (size_t i = 0; i < a.size(); ++i) {
          INFO("result " << i << " (0: the output, then the gradients of x, W_fc, b_fc, W_proj, b_proj)");
          CHECK(a[i] == b[i]);
        }
      }
  }
}

TEST_CASE("mlp: gradcheck in float64, both GELUs, and float32 within 1e-5 of float64") {
  for (GeluApprox approx : {GeluApprox::Erf, GeluApprox::Tanh}) {
    CAPTURE(name_of(approx));
    CHECK_GRADCHECK(fused(approx), mlp_inputs({2, 3, 4}, 7, 210));
    ag::test::check_float32_matches_float64(fused(approx), mlp_inputs({5, 8}, 32, 220));
  }
}

TEST_CASE("mlp: only the inputs that want a gradient get one, and no graph is kept without any") {
  Inputs in = mlp_inputs({3, 4}, 8, 230);
  in[0] = in[0].detach();  // x and b_proj constants: the others still get theirs
  in[4] = in[4].detach();
  sum(fused(GeluApprox::Erf)(in)).backward();
  CHECK_FALSE(in[0].grad().defined());
  CHECK_FALSE(in[4].grad().defined());
  for (int i : {1, 2, 3}) CHECK(in[i].grad().defined());
  const Inputs reference = mlp_inputs({3, 4}, 8, 230);
  sum(composed(GeluApprox::Erf)(reference)).backward();
  for (int i : {1, 2, 3}) CHECK(in[i].grad().to_vector() == reference[i].grad().to_vector());
  {
    NoGradGuard no_grad;
    CHECK_FALSE(fused(GeluApprox::Erf)(mlp_inputs({3, 4}, 8, 230)).requires_grad());
  }
  CHECK_THROWS_WITH_AS(mlp(Tensor::zeros({2, 4}), Tensor::zeros({4, 8}), Tensor::zeros({7}), Tensor::zeros({8, 4}),
                           Tensor::zeros({4})),
                       doctest::Contains("mlp: x [2,4], w_fc [4,8], b_fc [7]"), Error);
}

// --- on a device ----------------------------------------------------------------------------
//
// fp32 against the CPU as every op is (1e-5, normwise). Under fp32 both GELUs take
// the unfused GELU kernels (cuBLASLt's tanh is of unstated accuracy: cuda/mlp.cu),
// and the weight products BGRADA where F is a multiple of 8 (F = 64, 128: the
// leading dim cuBLASLt requires); F = 20 takes the unfused kernels throughout.
TEST_CASE_EVERY_DEVICE("mlp: a device's fused kernels match the CPU's, fp32") {
  if (device == Device::CPU) return;  // the cases above are the CPU's
  for (const auto& size : std::vector<std::pair<Shape, int64_t>>{{{7, 16}, 64}, {{2, 33, 5}, 20}, {{4, 64, 32}, 128}})
    for (GeluApprox approx : {GeluApprox::Erf, GeluApprox::Tanh}) {
      const Shape x_shape = size.first;
      const int64_t F = size.second;
      CAPTURE(to_string(x_shape));
      CAPTURE(name_of(approx));
      const int64_t before = cuda::epilogue_products();
      ag::test::check_device_matches_cpu(device, fused(approx), mlp_inputs(x_shape, F, 240));
      // The fused path ran, not its fallback: BGRADA alone, for either GELU (no GELU epilogue under fp32).
      const int64_t fused_products = cuda::epilogue_products() - before;
      MESSAGE("fp32 " << name_of(approx) << " F=" << F << ": " << fused_products << " products through cuBLASLt's epilogues");
      if (F % 8 == 0) CHECK(fused_products == 1);
    }
}

namespace {
// The bound, elementwise, for a device run in precision p against the float64 CPU.
// A GEMM whose inputs are rounded to a significand of unit u (fp32 0, tf32 2^-10:
// cuBLAS may truncate to TF32 rather than round, bf16 2^-8 rounded to nearest in
// the scratch copies) and summed over K in float32 is off by at most
//   g(K)·(|A||B|),  g(K) = 2u + u² + γ_K (1 + u)²,  γ_K = K·2^-24 / (1 − K·2^-24)
// (tests/test_precision.cpp, docs/backprop.md "Mixed precision"). Through the MLP,
// writing S(A, B) = |A||B| and e_Z for the bound on Z's error (every e ≥ 0):
//   U = X W_fc + b_fc         e_U = g(C)·S(X, W_fc) + 2^-23·(S(X, W_fc) + |b_fc|)   (the bias added in float32)
//   G = f(U)                  e_G = L1·e_U + ε·(|U| + 1)                          (|f'| ≤ L1 = 1.13)
//   Y = G W_proj + b_proj     e_Y = g(F)·S(|G| + e_G, W_proj) + e_G·|W_proj| + 2^-23·(S(G, W_proj) + |b_proj|)
// and backward from dY (exact: the test's own upstream gradient):
//   dG = dY W_projᵀ           e_dG = g(C)·S(dY, W_projᵀ)
//   f'(U)                     e_f' = L2·e_U + ε·(1 + 2|U|·v(U))                   (|f''| ≤ L2 = 0.8, v below)
//   dU = dG ∘ f'(U)           e_dU = e_dG·(L1 + e_f') + |dG|·e_f' + 2^-24·|dU|
//   dX = dU W_fcᵀ             e_dX = g(F)·S(|dU| + e_dU, W_fcᵀ) + S(e_dU, W_fcᵀ)
//   dW_fc = Xᵀ dU             e = g(N)·S(Xᵀ, |dU| + e_dU) + S(Xᵀ, e_dU)
//   db_fc = Σ_rows dU         e = γ_N·Σ_rows(|dU| + e_dU) + Σ_rows e_dU
//   dW_proj = Gᵀ dY           e = g(N)·S(|G| + e_G, dY) + S(e_G, dY)
//   db_proj = Σ_rows dY       e = γ_N·Σ_rows |dY|                                 (float32 sums of float32 dY: no rounded inputs)
// ε is GELU's own evaluation in float32: 2^-21 for the unfused kernels (the CPU's
// float32 GELU and GELU' are within 4e-7·max(1, |U|): tests/test_ops_gradcheck.cpp),
// and 2^-11 where cuBLASLt's epilogue evaluates the tanh GELU, since cuBLASLt does
// not say how it computes tanh: the allowance covers the hardware's tanh.approx.f32,
// whose relative error 2^-10.99 (δt ≤ 2^-11 for t = tanh w, w = √(2/π)(U + 0.044715U³))
// reaches G = ½U(1 + t) as ≤ ½|U|·δt = 2^-12·|U|, and G' = ½(1 + t) + ½U(1 − t²)·v(U),
// v(U) = dw/dU = √(2/π)(1 + 3·0.044715·U²), as ≤ ½δt + ½|U|v(U)·2δt = 2^-11·(½ + |U|v(U)):
// both twice over.
constexpr double kL1 = 1.13, kL2 = 0.8;
double input_unit(Precision p) { return p == Precision::BF16 ? std::ldexp(1.0, -8) : p == Precision::TF32 ? std::ldexp(1.0, -10) : 0.0; }
double gamma_sum(int64_t K) {
  const double e = std::ldexp(1.0, -24);
  return K * e / (1 - K * e);
}
double gemm_unit(Precision p, int64_t K) {
  const double u = input_unit(p);
  return 2 * u + u * u + gamma_sum(K) * (1 + u) * (1 + u);
}

Tensor abs64(const Tensor& x) {
  std::vector<double> v = x.detach().to(Device::CPU).to(DType::Float64).to_vector();
  for (double& e : v) e = std::abs(e);
  return Tensor::from_vector(v, x.shape(), DType::Float64);
}
Tensor t2(const Tensor& x) { return transpose(x, 0, 1); }
Tensor column_sums(const Tensor& x) { return sum(x, 0); }

// f'(U) elementwise, in float64 (core/elementwise_math.h, the kernels' own formulas).
Tensor gelu_grad(const Tensor& U, GeluApprox approx) {
  std::vector<double> v = U.to_vector();
  for (double& e : v) e = approx == GeluApprox::Erf ? math::gelu_erf_grad(e) : math::gelu_tanh_grad(e);
  return Tensor::from_vector(v, U.shape(), DType::Float64);
}

// The bounds above for (Y, dX, dW_fc, db_fc, dW_proj, db_proj), elementwise, from
// the float64 inputs (x [N, C]) and upstream gradient dY; eps is GELU's evaluation allowance.
std::vector<Tensor> mlp_bounds(const Inputs& in, const Tensor& dY, GeluApprox approx, Precision p, double eps) {
  const Tensor X = in[0].detach(), W_fc = in[1].detach(), b_fc = in[2].detach(), W_proj = in[3].detach();
  const int64_t N = X.size(0), C = X.size(1), F = W_fc.size(1);
  const double e23 = std::ldexp(1.0, -23), e24 = std::ldexp(1.0, -24);
  const Tensor U = matmul(X, W_fc) + b_fc, G = gelu(U, approx), aG = abs64(G), aU = abs64(U);
  const Tensor aX = abs64(X), aW_fc = abs64(W_fc), aW_proj = abs64(W_proj), adY = abs64(dY);
  // forward
  const Tensor S_U = matmul(aX, aW_fc);
  const Tensor e_U = S_U * gemm_unit(p, C) + (S_U + abs64(b_fc)) * e23;
  const Tensor e_G = e_U * kL1 + (aU + 1.0) * eps;
  const Tensor e_Y = matmul(aG + e_G, aW_proj) * gemm_unit(p, F) + matmul(e_G, aW_proj) +
                     (matmul(aG, aW_proj) + abs64(in[4])) * e23;
  // backward
  const Tensor dG = matmul(dY, t2(W_proj)), adG = abs64(dG);
  const Tensor f1 = gelu_grad(U, approx), adU = abs64(dG * f1);
  const Tensor e_dG = matmul(adY, t2(aW_proj)) * gemm_unit(p, C);
  std::vector<double> v = U.to_vector();  // 1 + 2|U|·v(U)
  for (double& e : v) e = 1 + 2 * std::abs(e) * math::kSqrt2_Pi * (1 + 3 * math::kGeluTanhCoeff * e * e);
  const Tensor e_f1 = e_U * kL2 + Tensor::from_vector(v, U.shape(), DType::Float64) * eps;
  const Tensor e_dU = e_dG * (e_f1 + kL1) + adG * e_f1 + adU * e24;
  const Tensor e_dX = matmul(adU + e_dU, t2(aW_fc)) * gemm_unit(p, F) + matmul(e_dU, t2(aW_fc));
  const Tensor e_dW_fc = matmul(t2(aX), adU + e_dU) * gemm_unit(p, N) + matmul(t2(aX), e_dU);
  const Tensor e_db_fc = column_sums(adU + e_dU) * gamma_sum(N) + column_sums(e_dU);
  const Tensor e_dW_proj = matmul(t2(aG + e_G), adY) * gemm_unit(p, N) + matmul(t2(e_G), adY);
  const Tensor e_db_proj = column_sums(adY) * gamma_sum(N);
  return {e_Y, e_dX, e_dW_fc, e_db_fc, e_dW_proj, e_db_proj};
}

// The op on `device` in float32 under precision p, and on the CPU in float64, from
// the same inputs and upstream gradient: each result's largest |error| / bound.
std::vector<double> error_over_bound(Device device, const Inputs& in, GeluApprox approx, Precision p) {
  Generator gen(91);
  const int64_t N = in[0].size(0), C = in[0].size(1), F = in[1].size(1);
  const Tensor dY = Tensor::randn({N, C}, DType::Float32, &gen).to(DType::Float64);  // float32's values: exact in both
  const auto run = [&](Device where, DType dtype) {
    Inputs xs;
    for (const Tensor& x : in) xs.push_back(x.detach().to(dtype).to(where).requires_grad_());
    const Tensor y = fused(approx)(xs);
    y.backward(dY.to(dtype).to(where));
    std::vector<std::vector<double>> all = {y.to(Device::CPU).to_vector()};
    for (const Tensor& x : xs) all.push_back(x.grad().to(Device::CPU).to_vector());
    return all;
  };
  const auto exact = run(Device::CPU, DType::Float64);
  std::vector<std::vector<double>> fast;
  {
    const optim::PrecisionScope scope(p);
    fast = run(device, DType::Float32);
  }
  const bool epilogue_gelu =  // cuda/mlp.cu: the tanh GELU in cuBLASLt's epilogues, under tf32 and bf16 only
      device == Device::CUDA && approx == GeluApprox::Tanh && F % 8 == 0 && p != Precision::FP32;
  const std::vector<Tensor> bounds =
      mlp_bounds(in, dY, approx, p, epilogue_gelu ? std::ldexp(1.0, -11) : std::ldexp(1.0, -21));
  std::vector<double> worst;
  for (size_t r = 0; r < bounds.size(); ++r) {
    const std::vector<double> b = bounds[r].to_vector();
    const std::vector<double>& e = exact[r], & f = fast[r];
    REQUIRE(b.size() == e.size());
    double w = 0;
    for (size_t i = 0; i < e.size(); ++i) w = std::max(w, std::abs(f[i] - e[i]) / b[i]);
    worst.push_back(w);
  }
  return worst;
}
}  // namespace

TEST_CASE_EVERY_DEVICE("mlp: fp32, tf32 and bf16 on a device stay within the bound derived from the significands") {
  if (device == Device::CPU) {
    // The CPU runs fp32 only (it refuses tf32 and bf16): its float32 against float64 within the same bound.
    const Inputs in = mlp_inputs({24, 8}, 32, 250);
    for (GeluApprox approx : {GeluApprox::Erf, GeluApprox::Tanh})
      for (double w : error_over_bound(Device::CPU, in, approx, Precision::FP32)) CHECK(w <= 1.0);
    return;
  }
  const char* names[] = {"Y", "dX", "dW_fc", "db_fc", "dW_proj", "db_proj"};
  for (const std::array<int64_t, 3>& size : std::vector<std::array<int64_t, 3>>{{96, 32, 128}, {64, 48, 192}, {40, 5, 20}})
    for (GeluApprox approx : {GeluApprox::Erf, GeluApprox::Tanh})
      for (Precision p : {Precision::FP32, Precision::TF32, Precision::BF16}) {
        const int64_t N = size[0], C = size[1], F = size[2];
        CAPTURE(N);
        CAPTURE(F);
        CAPTURE(name_of(approx));
        CAPTURE(name_of(p));
        const int64_t before = cuda::epilogue_products();
        const std::vector<double> worst = error_over_bound(device, mlp_inputs({N, C}, F, 260), approx, p);
        const int64_t products = cuda::epilogue_products() - before;
        MESSAGE(name_of(p) << " " << name_of(approx) << " F=" << F << ": " << products
                           << " products through cuBLASLt's epilogues");
        // The fused path ran where cuda/mlp.cu fuses, not a silent fallback (F a multiple of 8, as
        // in the fp32 case above): the tanh GELU's forward (GELU_AUX_BIAS) and backward (DGELU_BGRAD)
        // epilogues under tf32 and bf16, and proj's weight product with its bias gradient (BGRADA)
        // in every precision but bf16, where cuBLASLt's A would be the rounded copy.
        if (F % 8 == 0)
          CHECK(products == (approx == GeluApprox::Tanh && p != Precision::FP32 ? 2 : 0) + (p != Precision::BF16 ? 1 : 0));
        for (size_t r = 0; r < worst.size(); ++r) {
          MESSAGE(name_of(p) << " " << name_of(approx) << " F=" << F << " " << names[r] << ": error / bound " << worst[r]);
          CHECK(worst[r] <= 1.0);
        }
      }
}

}  // namespace mlp_test
