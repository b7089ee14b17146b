// FlashAttention on tensor cores (cuda/flash_mma.cu): under --precision bf16 (or
// tf32) the CUDA flash kernel rounds Q, K, V, dZ, P and dS to bf16 (or tf32) and
// sums in fp32. Its Z, lse, dQ, dK and dV are checked element by element against
// the CPU's flash in float64, within a bound derived from the format's significand
// (below), and, as FlashAttention's tests do, their largest error within twice the
// naive attention's in that format (naive), over the
// cases the kernel takes: causal and not, d_h = 64 and 128, T not a multiple of
// the 64-row tile (1, 37, 200), B·H > 1, grouped kv heads with Tq < Tk, both
// layouts, sparse patterns and ALiBi (the masked instantiation); the backward's
// bits run to run; and the problems it does not take staying on the float32
// kernel. Without a device the cases print [SKIP].
#include <cmath>
#include <cstring>

#include "cuda/context.h"
#include "optim/train_step.h"
#include "tests/flash_mma_reference.h"
#include "tests/helpers.h"

// The file's names and using-directives stay its own in a unity build, where the test
// files compile as one translation unit (CMakeLists.txt).
namespace flash_mma_test {

using namespace ag;
using ag::test::random;
using ag::test::softmax_of;

namespace {
using namespace ag::test::flash_mma_reference;

std::vector<Case> cases() {
  std::vector<Case> all;
  for (int64_t d : {64, 128})
    for (int64_t T : {1, 37, 200})
      for (bool causal : {false, true}) all.push_back({2, 2, 2, T, T, d, causal, AttentionLayout::BHTD});
  for (int64_t d : {64, 128}) {
    all.push_back({1, 4, 2, 37, 100, d, true, AttentionLayout::BTHD});   // grouped kv heads, queries after a prefix
    all.push_back({2, 3, 1, 130, 130, d, false, AttentionLayout::BTHD});  // three query heads over one kv head
  }
  // The masked kernels: a sliding window, a dilated one with global keys, random blocks, ALiBi
  // (alone, over a prefix, with a window), each with tiles that are hidden, partial and wholly seen.
  all.push_back({2, 2, 2, 200, 200, 64, true, AttentionLayout::BHTD, {.window = 16}});
  all.push_back({1, 4, 2, 150, 150, 128, true, AttentionLayout::BTHD, {.window = 8, .dilation = 3, .global = 5}});
  all.push_back({1, 2, 1, 200, 200, 64, true, AttentionLayout::BHTD, {.window = 12, .random_blocks = 2, .seed = 7}});
  all.push_back({2, 4, 4, 130, 130, 64, true, AttentionLayout::BHTD, {}, true});
  all.push_back({1, 3, 1, 37, 100, 128, true, AttentionLayout::BTHD, {}, true});
  all.push_back({1, 4, 2, 200, 200, 64, true, AttentionLayout::BTHD, {.window = 24}, true});
  return all;
}

// Every case under the format's --precision on the device against the CPU's float64: each
// result within the derived bound, and its largest error within twice the naive attention's.
void check_against_float64(const Format& f) {
  double largest_Z = 0;
  for (const Case& c : cases()) {
    CAPTURE(describe(c));
    const CaseInputs in = inputs_of(c, static_cast<uint64_t>(c.Tq * 1000 + c.d + (c.causal ? 7 : 0)));
    const AttentionSpec spec = spec_of(c);
    const ag::test::AttentionRun exact = ag::test::run_attention(in.qkv, spec, Device::CPU, DType::Float64, in.upstream);
    ag::test::AttentionRun fast;
    {
      const optim::PrecisionScope precision(f.precision);
      fast = ag::test::run_attention(in.qkv, spec, Device::CUDA, DType::Float32, in.upstream);
    }
    const auto [q, k, v, dz] = rows_of(c, in);
    const Bounds bound = derive_bounds(f.u, c, q, k, v, dz);
    const Naive reference = naive(f, c, q, k, v, dz);
    const std::pair<const char*, Worst> results[] = {
        {"Z", worst_of(fast.Z, exact.Z, bound.Z)},     {"lse", worst_of(fast.lse, exact.lse, bound.lse)},
        {"dQ", worst_of(fast.dQ, exact.dQ, bound.dQ)}, {"dK", worst_of(fast.dK, exact.dK, bound.dK)},
        {"dV", worst_of(fast.dV, exact.dV, bound.dV)}};
    for (const auto& result : results) {
      INFO(result.first << ": error / bound " << result.second.of_bound << ", normwise relative error "
                        << result.second.relative);
      CHECK(result.second.of_bound <= 1.0);
    }
    largest_Z = std::max(largest_Z, results[0].second.relative);
    struct Recipe {
      const char* name;
      const Tensor &ours, &reference;
      const std::vector<double>& naive;
    };
    const Recipe recipe[] = {{"Z", fast.Z, exact.Z, reference.Z},
                             {"dQ", fast.dQ, exact.dQ, reference.dQ},
                             {"dK", fast.dK, exact.dK, reference.dK},
                             {"dV", fast.dV, exact.dV, reference.dV}};
    for (const Recipe& r : recipe) {
      const double error = ag::test::max_abs_error(r.ours, r.reference),
                   naive_error = ag::test::max_abs_error(
                       Tensor::from_vector(r.naive, r.reference.shape(), DType::Float64), r.reference);
      INFO(r.name << ": largest error " << error << ", the naive " << f.name << " attention's " << naive_error);
      if (naive_error > 0) CHECK(error <= 2 * naive_error);  // 0: both exact (T = 1's dQ and dK), the bound alone
    }
  }
  // The inputs were rounded to the format, so the tensor-core kernel ran: float32 alone stays
  // near 2^-24·√T (below 2^-20 here); the format's rounding gives about u (2^-14 is u·2^-6 for
  // bf16, as 2^-17 is for tf32).
  INFO(f.name << ": Z's largest normwise error " << largest_Z);
  CHECK(largest_Z > f.u * std::ldexp(1.0, -6));
}

}  // namespace

TEST_CASE("cuda: bf16 flash attention on tensor cores — Z, lse, dQ, dK, dV within bf16's derived bound of float64") {
  if (!ag::test::cuda_or_skip()) return;
  check_against_float64(kBf16);
}

TEST_CASE("cuda: tf32 flash attention on tensor cores — Z, lse, dQ, dK, dV within tf32's derived bound of float64") {
  if (!ag::test::cuda_or_skip()) return;
  check_against_float64(kTf32);
}

TEST_CASE("cuda: bf16 and tf32 flash attention's backward gives the same bits every run") {
  if (!ag::test::cuda_or_skip()) return;
  const Shape shape{2, 2, 200, 64};
  const std::vector<Tensor> in = {random(shape, 1), random(shape, 2), random(shape, 3)};
  const Tensor upstream = random(shape, 4, DType::Float64, false);
  AttentionSpec spec{.causal = true};
  softmax_of(spec).impl = AttentionImpl::Flash;
  for (const Format& f : {kBf16, kTf32}) {
    CAPTURE(f.name);
    const optim::PrecisionScope precision(f.precision);
    const ag::test::AttentionRun first = ag::test::run_attention(in, spec, Device::CUDA, DType::Float32, upstream);
    const ag::test::AttentionRun second = ag::test::run_attention(in, spec, Device::CUDA, DType::Float32, upstream);
    CHECK(first.Z.to_vector() == second.Z.to_vector());
    CHECK(first.dQ.to_vector() == second.dQ.to_vector());
    CHECK(first.dK.to_vector() == second.dK.to_vector());
    CHECK(first.dV.to_vector() == second.dV.to_vector());
  }
}

// What the tensor cores do not take (flash_mma_takes) stays on the float32 kernel under
// --precision bf16 and tf32, for a head width other than 64 and 128 and a soft cap (a sparse
// window and ALiBi are the masked kernels' now, in the cases above): its results are the bits
// of the same call under fp32 (the float32 kernel calls no GEMM, so the switch cannot reach
// it), and agree with float64's within 1e-4 (normwise), which float32's sums over 70 keys and
// 64 widths meet with room (n·2^-24 ≈ 1e-5 at worst) and bf16's rounding of the inputs
// (2^-9 ≈ 2e-3 relative per element, as the case above sees) does not.
TEST_CASE("cuda: under bf16 and tf32, flash problems the tensor cores do not take stay on the float32 kernel") {
  if (!ag::test::cuda_or_skip()) return;
  struct Fallback {
    const char* name;
    int64_t d;
    AttentionSpec spec;
  };
  std::vector<Fallback> fallbacks = {{"d_h 32", 32, {.causal = true}}, {"soft cap", 64, {.causal = true}}};
  softmax_of(fallbacks[1].spec).mods.soft_cap = 5.0;
  for (Fallback& fallback : fallbacks) {
    CAPTURE(fallback.name);
    softmax_of(fallback.spec).impl = AttentionImpl::Flash;
    const Shape shape{2, 2, 70, fallback.d};
    const std::vector<Tensor> in = {random(shape, 31), random(shape, 32), random(shape, 33)};
    const Tensor upstream = random(shape, 34, DType::Float64, false);
    const ag::test::AttentionRun exact =
        ag::test::run_attention(in, fallback.spec, Device::CPU, DType::Float64, upstream);
    const ag::test::AttentionRun fp32 =
        ag::test::run_attention(in, fallback.spec, Device::CUDA, DType::Float32, upstream);
    for (const Format& f : {kBf16, kTf32}) {
      CAPTURE(f.name);
      const optim::PrecisionScope precision(f.precision);
      const ag::test::AttentionRun fast =
          ag::test::run_attention(in, fallback.spec, Device::CUDA, DType::Float32, upstream);
      CHECK(fast.Z.to_vector() == fp32.Z.to_vector());
      CHECK(fast.dQ.to_vector() == fp32.dQ.to_vector());
      CHECK(fast.dK.to_vector() == fp32.dK.to_vector());
      CHECK(fast.dV.to_vector() == fp32.dV.to_vector());
      CHECK_CLOSE(fast.Z, exact.Z, 1e-4);
      CHECK_CLOSE(fast.dQ, exact.dQ, 1e-4);
      CHECK_CLOSE(fast.dK, exact.dK, 1e-4);
      CHECK_CLOSE(fast.dV, exact.dV, 1e-4);
    }
  }
}

// The bf16 and tf32 switches are CUDA's: on the CPU, flash under --precision bf16 or tf32
// gives float32's bits (its GEMMs and tiles never round; bench_attention refuses those
// precisions there). The cases above run only with a device; this one holds the CPU side of
// the switch, and the rounding helpers they compare against (bf16: to nearest, ties to even,
// at 2^-7 of 1; tf32: to nearest, ties away from zero, at 2^-10 of 1).
TEST_CASE("bf16 and tf32 flash attention: on the CPU the switch leaves flash's float32 bits, and bf16() and tf32() round as the formats do") {
  const Shape shape{2, 2, 70, 64};
  const std::vector<Tensor> in = {random(shape, 11), random(shape, 12), random(shape, 13)};
  const Tensor upstream = random(shape, 14, DType::Float64, false);
  AttentionSpec spec{.causal = true};
  softmax_of(spec).impl = AttentionImpl::Flash;
  const ag::test::AttentionRun fp32 = ag::test::run_attention(in, spec, Device::CPU, DType::Float32, upstream);
  for (const Format& f : {kBf16, kTf32}) {
    CAPTURE(f.name);
    ag::test::AttentionRun under;
    {
      const optim::PrecisionScope precision(f.precision);
      under = ag::test::run_attention(in, spec, Device::CPU, DType::Float32, upstream);
    }
    CHECK(fp32.Z.to_vector() == under.Z.to_vector());
    CHECK(fp32.dQ.to_vector() == under.dQ.to_vector());
    CHECK(fp32.dK.to_vector() == under.dK.to_vector());
    CHECK(fp32.dV.to_vector() == under.dV.to_vector());
  }
  CHECK(bf16(1.0 + std::ldexp(1.0, -8)) == 1.0);                                // a tie: to the even 1
  CHECK(bf16(1.0 + 3 * std::ldexp(1.0, -8)) == 1.0 + std::ldexp(1.0, -6));       // a tie: to the even 1 + 2^-6
  CHECK(bf16(1.0 + std::ldexp(1.0, -8) + std::ldexp(1.0, -12)) == 1.0 + std::ldexp(1.0, -7));  // above the tie: up
  CHECK(bf16(-3.0) == -3.0);
  CHECK(tf32(1.0 + std::ldexp(1.0, -11)) == 1.0 + std::ldexp(1.0, -10));        // a tie: away from zero
  CHECK(tf32(-1.0 - std::ldexp(1.0, -11)) == -1.0 - std::ldexp(1.0, -10));      // a tie: away from zero
  CHECK(tf32(1.0 + std::ldexp(1.0, -11) - std::ldexp(1.0, -20)) == 1.0);        // below the tie: down
  CHECK(tf32(1.0 + 3 * std::ldexp(1.0, -12)) == 1.0 + std::ldexp(1.0, -10));    // above the tie: up
  CHECK(tf32(1.0 + std::ldexp(1.0, -23)) == 1.0);
  CHECK(tf32(-3.0) == -3.0);
  CHECK(std::isinf(tf32(INFINITY)));
  CHECK(std::isnan(tf32(NAN)));
}

}  // namespace flash_mma_test
