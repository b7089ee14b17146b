// CUDA device code run on the host, where there is no GPU (tests/cuda_on_host.h: each block's
// threads as fibers, mma.sync and the warp shuffles as it models them), each against a
// reference apart from it: the tensor cores' fragments, the tensor-core and the CUDA-core flash
// kernels, the chunked product, the embedding's backward passes and scored positions, the
// optimizer's kernels, S4D's kernels and long convolution, attention over a graph's edges, the
// attention kernels that run one thread per index, state-space and linear attention, the LSTM
// cell, dropout, the row kernels (softmax, cross entropy, layer norm), the reductions, the
// convolution, the elementwise ops and the movement kernels.
//
// 1. The fragment code (cuda/mma_fragments.cuh) on one warp. Its loads, packing and loops
//    have to produce the products the kernels rely on:
//      product_rows:    C [16, N] += A [rows m0 …, D] · X [N, D]ᵀ          (S = Q Kᵀ, dP = dZ Vᵀ)
//      product_columns: C [16, D] += P [16, N] · X [N, D], P from C fragments (Z += P V, dQ += dS K)
//    for both operand formats (bf16 through m16n8k16, tf32 through m16n8k8 with its renumbered
//    k slots) and the kernels' tile shapes. A wrong lane, register or slot gives errors of the
//    products' own size; the sums' float32 rounding is below γ_(K+1)·Σ|terms|.
//
// 2. The kernels (cuda/flash_mma_kernels.cuh: the forward, the dQ kernel and the dK dV kernel,
//    bf16 and tf32, plain and masked) through the launches cuda/flash_mma.cu makes (the operands
//    rounded into compact copies, the kernels for the head width and the mask), each block as
//    128 fibers, a few blocks striding over the tasks as on a device. Their Z, lse, dQ, dK and dV are held to what
//    tests/test_flash_mma.cpp holds the device to: within the format's derived bound of the
//    CPU's float64 flash, and within twice the naive attention's error in that format — on a
//    smaller set of cases: T of one and several tiles, not multiples of 64, grouped kv heads
//    with Tq < Tk, both layouts, d_h 64 and 128, a window with random blocks, ALiBi with a
//    window. What the host cannot show — the hardware's accumulation and rounding inside an
//    mma, timing, shared-memory banks — the device's cases do.
//
// 3. FlashAttention's kernels on CUDA cores (cuda/flash_kernels.cuh: the float32 and float64
//    forward, dQ and dK dV kernels that every problem the tensor cores do not take runs on),
//    in float64 against the CPU's flash in float64, to 1e-12 normwise: causal and not, grouped
//    kv heads with Tq < Tk, both layouts, a window, dilation and global keys, random blocks,
//    ALiBi, a soft cap, on each of the three tiles (32, 16, 8) the launch may choose.
//
// 4. The chunked decayed product (cuda/chunked_kernels.cuh: chunk states, state passing,
//    outputs — Mamba-2's SSD algorithm, the GPU's ssd and linear attention), each block as 256
//    fibers, in float64 against the recurrence it computes, h_i = a_i h_(i−1) + Σ_g w_i B_giᵀ C_gi
//    and Out_i = A_i h_i (the anticausal one from the end; "all": every j, no decay), within
//    1e-12 of the same recurrence in absolute values: causal, anticausal and all, a decoding
//    state in and out, one and two in-heads, chunks of 64 and 16, T of one chunk and several
//    (not multiples), r and e across the 64-wide tiles and the 32-wide slices.
//
// 5. The embedding's backward through its launch (cuda/embedding_kernels.cuh: the sort keys,
//    the sort — std::stable_sort where CUB's radix sort runs on a device, both stable — the run
//    sums, the segment sums) against each row's plain sum in float64, every run length (one row
//    on most positions, rows of one position, indices out of the table, a table of 2^6 rows),
//    and unnamed rows exactly 0; the forward's gather; and the loss's scored positions (one
//    block of 1024 threads, a scan) against the order the CPU gives.
//
// 6. The optimizer's kernels (cuda/optimizer_kernels.cuh: Adam(W) with t read from the device's
//    step count, SGD, the step count, the clip) against the CPU's kernels over four steps of
//    which the second is skipped by its guard (issue 47: t, m, v and the parameters stay, and
//    the next step is t = 2, SGD's next the first), to float64's last bits.
//
// 7. S4D (cuda/s4_kernels.cuh): the kernel K, its backward and the recurrence, one thread per
//    element as on a device, against the CPU's loops (which form exp(ℓs) along runs and sum
//    each channel's modes in one thread) to 1e-12; and the long convolution's steps around the
//    transforms — padding, the spectra's products, the correlation, the unpadding by 1/n — with
//    a plain DFT of cuFFT's conventions in cuFFT's place, against the CPU's KissFFT convolution
//    and its backward to 1e-12.
//
// 8. Attention over a graph's edges (cuda/edge_attention_kernels.cuh): every kernel, through the
//    launches cuda/edge_attention.cu makes, against the CPU's, to the last bit (both add the
//    same terms in the same order in double).
//
// 9. The attention kernels that run one thread per index (cuda/attention_kernels.cuh: the dense
//    softmax and its backward with masks, ALiBi and sinks, the score modifiers' bias tables and
//    cap with their gradients, GAT's additive scores, attention dropout's counters with and
//    without a graph's shift, RoPE, ring attention's merge), through cuda/attention.cu's
//    launches, against the CPU's kernels (1e-12; the dropout's mask and RoPE to the bit); and
//    the CUDA-core flash launches with bias tables (cuda/flash_kernels.cuh: the tile the budget
//    allows, the per-tile table sums added over the tiles into dBias), against the CPU's flash
//    (1e-12).
//
// 10. State-space and linear attention as the GPU runs them (cuda/ssd_kernels.cuh,
//    linear_attention_kernels.cuh): the operands' head mappings into the chunked product of 4,
//    the decay gradient's spans of 64, the feature maps (elu1, FAVOR+) and their backward,
//    through cuda/ssd.cu's and linear_attention.cu's launches, against the CPU's kernels
//    (1e-12): both directions, weighted or not, grouped heads both ways, a decoding state, T = 1.
//
// 11. The LSTM cell's step and backward (cuda/lstm_kernels.cuh) and dropout with and without a
//    graph's counter shift (cuda/dropout_kernels.cuh), against the CPU's kernels, to the bit.
//
// 12. The row kernels: softmax, log-softmax, cross entropy and their backward
//    (cuda/softmax_kernels.cuh), layer norm, its fused residual add and backward with dWeight's
//    and dBias's chunked column sums (cuda/layer_norm_kernels.cuh), each row one block combining
//    through block_reduce's warp shuffles, against the CPU's kernels (1e-12); the reductions
//    (cuda/reduce_kernels.cuh: sum_to_shape on its three paths, max with argmax, cumsum), the
//    causal depthwise convolution (cuda/conv_kernels.cuh), the elementwise ops
//    (cuda/elementwise_kernels.cuh: every unary and binary op, broadcasts, the activations'
//    derivatives, the bias activation and its backward) and the movement kernels
//    (cuda/memory_kernels.cuh: the strided copy, fill, cast, a GEMM's scaling when K = 0, the
//    index-range scan) likewise.
//
// Launches written once for any device (cuda/launch.cuh's Gpu) run here on host::Device
// (tests/cuda_on_host.h): a functor at every index once, in a shuffled order, so a result that
// hangs on the threads' order shows; a kernel on three blocks of fibers; scratch filled with NaN.
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <random>
#include <type_traits>
#include <vector>

#include "core/dispatch.h"
#include "tests/flash_mma_reference.h"
#include "tests/helpers.h"
// last: it defines CUDA's keywords for the device code
#include "tests/cuda_on_host.h"

// The kernels' dynamic shared memory (cuda/shared_buffers.cuh: one buffer, as blocks run one
// at a time; the largest ask is tf32's dQ kernel at d_h 128, 132 KB), and CUDA's min (int64),
// isfinite and exp (float) where the kernels call them unqualified.
namespace ag::cuda {
alignas(16) unsigned char shared_bytes[ag::test::cuda_host::kSharedBytes];
namespace {
using std::cos;
using std::exp;
using std::fmax;
using std::isfinite;
using std::log;
using std::min;
using std::sin;
}  // namespace
}  // namespace ag::cuda
namespace ag::cuda::chunked {
using std::exp;
}  // namespace ag::cuda::chunked

#include "cuda/flash_mma_kernels.cuh"

#include "cuda/chunked_kernels.cuh"
#include "cuda/embedding_kernels.cuh"
#include "cuda/optimizer_kernels.cuh"
#include "cuda/flash_kernels.cuh"
#include "cuda/s4_kernels.cuh"
#include "cuda/edge_attention_kernels.cuh"
#include "cuda/attention_kernels.cuh"
#include "cuda/ssd_kernels.cuh"
#include "cuda/linear_attention_kernels.cuh"
#include "cuda/lstm_kernels.cuh"
#include "cuda/dropout_kernels.cuh"
#include "cuda/softmax_kernels.cuh"
#include "cuda/layer_norm_kernels.cuh"
#include "cuda/conv_kernels.cuh"
#include "cuda/reduce_kernels.cuh"
#include "cuda/elementwise_kernels.cuh"
#include "cuda/memory_kernels.cuh"

// A named namespace, not a using-directive at file scope: tests/flash_mma_reference.h has a
// bf16() of its own, beside ag::cuda::mma's bf16 type.
namespace mma_fragments_test {
using namespace ag::cuda::mma;
using ag::test::cuda_host::HostBf16;
using ag::test::cuda_host::HostTf32;

// The tests' own roundings, written apart from the header's: bf16 to nearest even
// (tests/flash_mma_reference.h's bf16()); tf32 to nearest, ties away from zero
// (cvt.rna.tf32.f32), here by arithmetic on the value rather than its bits (normal x ≠ 0).
double as_double(bf16 x) { return float_of(static_cast<uint32_t>(x.bits) << 16); }
double as_double(float x) { return x; }
double tf32_by_value(float x) {
  const double magnitude = std::abs(static_cast<double>(x));
  const int exponent = std::ilogb(magnitude);
  const double unit = std::ldexp(1.0, exponent - 10);  // tf32: 10 stored fraction bits
  const double down = std::floor(magnitude / unit) * unit;
  const double r = magnitude - down >= unit / 2 ? down + unit : down;
  return x < 0 ? -r : r;
}
template <class F> double rounded(float x) {
  if constexpr (std::is_same_v<F, HostBf16>) return ag::test::flash_mma_reference::bf16(x);
  else return tf32_by_value(x);
}

// Entry (row, col) of a [16, n] tile held as C fragments, for lane l: entry e of column tile nt.
int row_of(int l, int e) { return l / 4 + 8 * (e / 2); }
int col_of(int l, int nt, int e) { return 8 * nt + 2 * (l % 4) + e % 2; }

// Both products for format F at head width D and N columns, from the rows m0 … of a
// 64-row shared tile; returns the worst error over γ_(K+1)·(|C| + Σ|terms|) of the two.
template <class F, int D, int N>
double check_products(int m0, unsigned seed) {
  using E = typename F::Element;
  constexpr int ld = D + kPad<E>;
  std::mt19937 rng(seed);
  std::normal_distribution<float> normal;
  std::vector<E> A(64 * ld), X(N * ld), Y(N * ld);  // padding columns hold values too: none may be read
  for (std::vector<E>* tile : {&A, &X, &Y})
    for (E& e : *tile) e = F::operand(normal(rng));
  std::vector<float> C0(16 * N), P(16 * N), O0(16 * D);
  for (float& x : C0) x = normal(rng);
  for (float& x : P) x = 0.3f * normal(rng);
  for (float& x : O0) x = normal(rng);
  std::vector<float> C(16 * N), O(16 * D);

  ag::test::cuda_host::launch(1, 32, [&] {
    const int l = lane();
    float c[N / 8][4], p[N / 8][4], o[D / 8][4];
    for (int nt = 0; nt < N / 8; ++nt)
      for (int e = 0; e < 4; ++e) {
        c[nt][e] = C0[row_of(l, e) * N + col_of(l, nt, e)];
        p[nt][e] = P[row_of(l, e) * N + col_of(l, nt, e)];
      }
    for (int nt = 0; nt < D / 8; ++nt)
      for (int e = 0; e < 4; ++e) o[nt][e] = O0[row_of(l, e) * D + col_of(l, nt, e)];
    product_rows<F, D, N>(A.data(), m0, X.data(), c);
    product_columns<F, D, N>(p, Y.data(), o);
    for (int nt = 0; nt < N / 8; ++nt)
      for (int e = 0; e < 4; ++e) C[row_of(l, e) * N + col_of(l, nt, e)] = c[nt][e];
    for (int nt = 0; nt < D / 8; ++nt)
      for (int e = 0; e < 4; ++e) O[row_of(l, e) * D + col_of(l, nt, e)] = o[nt][e];
  });

  const auto gamma = [](int n) { return (n + 1) * std::ldexp(1.0, -24) / (1 - (n + 1) * std::ldexp(1.0, -24)); };
  double worst = 0;
  for (int i = 0; i < 16; ++i)
    for (int n = 0; n < N; ++n) {  // C = C0 + A[m0 + i] · X[n]
      double exact = C0[i * N + n], size = std::abs(exact);
      for (int k = 0; k < D; ++k) {
        const double term = as_double(A[(m0 + i) * ld + k]) * as_double(X[n * ld + k]);
        exact += term;
        size += std::abs(term);
      }
      worst = std::max(worst, std::abs(C[i * N + n] - exact) / (gamma(D) * size));
    }
  for (int i = 0; i < 16; ++i)
    for (int d = 0; d < D; ++d) {  // O = O0 + rounded(P[i]) · Y[:, d]
      double exact = O0[i * D + d], size = std::abs(exact);
      for (int n = 0; n < N; ++n) {
        const double term = rounded<F>(P[i * N + n]) * as_double(Y[n * ld + d]);
        exact += term;
        size += std::abs(term);
      }
      worst = std::max(worst, std::abs(O[i * D + d] - exact) / (gamma(N) * size));
    }
  return worst;
}

// Both products at the kernels' tile shapes (d_h, columns): the forward and dQ kernels' 64-key
// tiles at d_h 64 and 128, the dK dV kernel's 32-query tiles at 128; from rows 0, 16 and 48.
template <class F> void check_tile_shapes(unsigned seed) {
  for (const int m0 : {0, 16, 48}) {
    CAPTURE(m0);
    CHECK(check_products<F, 64, 64>(m0, seed + m0) <= 1.0);
    CHECK(check_products<F, 128, 64>(m0, seed + 1 + m0) <= 1.0);
    CHECK(check_products<F, 128, 32>(m0, seed + 2 + m0) <= 1.0);
  }
}

TEST_CASE("mma fragments: bf16's m16n8k16 fragments make Q Kᵀ and P V at the flash kernels' tile shapes") {
  check_tile_shapes<HostBf16>(1);
}

TEST_CASE("mma fragments: tf32's m16n8k8 fragments, k slots renumbered, make Q Kᵀ and P V at the flash kernels' tile shapes") {
  check_tile_shapes<HostTf32>(4);
}

TEST_CASE("mma fragments: the formats round operands as bf16 (nearest even) and tf32 (nearest, ties away) do") {
  const double tie_bf16 = std::ldexp(1.0, -8), tie_tf32 = std::ldexp(1.0, -11);
  CHECK(as_double(Bf16::operand(static_cast<float>(1 + tie_bf16))) == 1.0);
  CHECK(as_double(Bf16::operand(static_cast<float>(1 + 3 * tie_bf16))) == 1 + 4 * tie_bf16);
  CHECK(Tf32::operand(static_cast<float>(1 + tie_tf32)) == static_cast<float>(1 + 2 * tie_tf32));
  CHECK(Tf32::operand(static_cast<float>(-1 - tie_tf32)) == static_cast<float>(-1 - 2 * tie_tf32));
  CHECK(Tf32::operand(static_cast<float>(1 + tie_tf32 - std::ldexp(1.0, -20))) == 1.0f);
  CHECK(std::isinf(Tf32::operand(INFINITY)));
  CHECK(std::isnan(Tf32::operand(NAN)));
  std::mt19937 rng(7);
  std::normal_distribution<float> normal;
  for (int n = 0; n < 1000; ++n) {
    const float x = std::ldexp(normal(rng), static_cast<int>(rng() % 40) - 20);
    CHECK(Tf32::operand(x) == tf32_by_value(x));
    CHECK(as_double(Bf16::operand(x)) == ag::test::flash_mma_reference::bf16(x));
  }
}

}  // namespace mma_fragments_test

namespace flash_mma_host_test {
using namespace ag;
using namespace ag::test::flash_mma_reference;
namespace kernels = ag::cuda::flash_mma;
namespace host = ag::test::cuda_host;

struct Results {
  std::vector<double> Z, lse, dQ, dK, dV;
};

// The forward, then the backward (D formed by the dQ kernel, nothing accumulated), through the
// launches cuda/flash_mma.cu makes: the operands rounded into compact copies, the kernels on
// three blocks at most, so that the grid-stride loops turn.
template <class F> Results run_kernels(const Case& c, const Rows& q, const Rows& k, const Rows& v, const Rows& dz) {
  const AttentionShape shape = shape_of(c);
  const auto narrow = [](const Rows& x) { return std::vector<float>(x.v.begin(), x.v.end()); };
  const std::vector<float> Q = narrow(q), K = narrow(k), V = narrow(v), dZ = narrow(dz);
  std::vector<float> Z(q.v.size()), dQ(q.v.size()), dK(k.v.size()), dV(v.v.size());
  std::vector<double> lse(static_cast<size_t>(c.B * c.Hq * c.Tq));
  host::Device dev;
  kernels::forward_launch<F>(dev, Q.data(), K.data(), V.data(), shape, Z.data(), lse.data());
  kernels::backward_launch<F>(dev, Q.data(), K.data(), V.data(), lse.data(), dZ.data(), nullptr, shape, false,
                              dQ.data(), dK.data(), dV.data());
  const auto widen = [](const std::vector<float>& x) { return std::vector<double>(x.begin(), x.end()); };
  return {widen(Z), lse, widen(dQ), widen(dK), widen(dV)};
}

template <class F> void check_format(const Format& f) {
  const std::vector<Case> all = {
      {2, 2, 2, 37, 37, 64, true, AttentionLayout::BHTD},
      {2, 2, 2, 1, 1, 128, true, AttentionLayout::BHTD},
      {1, 3, 1, 70, 70, 64, false, AttentionLayout::BTHD},   // three query heads over one kv head, two tiles each way
      {1, 4, 2, 37, 100, 128, true, AttentionLayout::BTHD},  // grouped kv heads, queries after a prefix
      {1, 2, 1, 100, 100, 64, true, AttentionLayout::BHTD, {.window = 12, .random_blocks = 2, .seed = 7}},
      {1, 2, 2, 80, 80, 64, true, AttentionLayout::BTHD, {.window = 24}, true},  // ALiBi with a window
  };
  double largest_Z = 0;
  for (const Case& c : all) {
    CAPTURE(describe(c));
    const CaseInputs in = inputs_of(c, static_cast<uint64_t>(c.Tq * 1000 + c.d + (c.causal ? 7 : 0)));
    const ag::test::AttentionRun exact =
        ag::test::run_attention(in.qkv, spec_of(c), Device::CPU, DType::Float64, in.upstream);
    const auto [q, k, v, dz] = rows_of(c, in);
    const Results fast = run_kernels<F>(c, q, k, v, dz);
    const Bounds bound = derive_bounds(f.u, c, q, k, v, dz);
    const Naive reference = naive(f, c, q, k, v, dz);
    const auto tensor = [](const std::vector<double>& x, const Tensor& like) {
      return Tensor::from_vector(x, like.shape(), DType::Float64);
    };
    struct Result {
      const char* name;
      Tensor ours;
      const Tensor& exact;
      const std::vector<double>& bound;
      const std::vector<double>* naive;  // none for lse
    };
    const Result results[] = {{"Z", tensor(fast.Z, exact.Z), exact.Z, bound.Z, &reference.Z},
                              {"lse", tensor(fast.lse, exact.lse), exact.lse, bound.lse, nullptr},
                              {"dQ", tensor(fast.dQ, exact.dQ), exact.dQ, bound.dQ, &reference.dQ},
                              {"dK", tensor(fast.dK, exact.dK), exact.dK, bound.dK, &reference.dK},
                              {"dV", tensor(fast.dV, exact.dV), exact.dV, bound.dV, &reference.dV}};
    for (const Result& r : results) {
      const Worst worst = worst_of(r.ours, r.exact, r.bound);
      INFO(r.name << ": error / bound " << worst.of_bound << ", normwise relative error " << worst.relative);
      CHECK(worst.of_bound <= 1.0);
      if (r.naive == nullptr) continue;
      const double error = ag::test::max_abs_error(r.ours, r.exact),
                   naive_error = ag::test::max_abs_error(tensor(*r.naive, r.exact), r.exact);
      INFO(r.name << ": largest error " << error << ", the naive " << f.name << " attention's " << naive_error);
      if (naive_error > 0) CHECK(error <= 2 * naive_error);
    }
    largest_Z = std::max(largest_Z, worst_of(results[0].ours, exact.Z, bound.Z).relative);
  }
  INFO(f.name << ": Z's largest normwise error " << largest_Z);
  CHECK(largest_Z > f.u * std::ldexp(1.0, -6));  // the operands were rounded to the format
}

TEST_CASE("flash on host threads: bf16 tensor-core kernels within bf16's derived bound of float64") {
  check_format<host::HostBf16>(kBf16);
}

TEST_CASE("flash on host threads: tf32 tensor-core kernels within tf32's derived bound of float64") {
  check_format<host::HostTf32>(kTf32);
}

}  // namespace flash_mma_host_test

namespace flash_host_test {
using namespace ag;
using namespace ag::test::flash_mma_reference;
namespace host = ag::test::cuda_host;

struct FloatCase {
  Case shape;
  double soft_cap;
  int tile;
};

TEST_CASE("flash on host threads: the CUDA-core kernels in float64 equal the CPU's flash to 1e-12, on every tile") {
  const std::vector<FloatCase> cases = {
      {{2, 2, 2, 37, 37, 16, true, AttentionLayout::BHTD}, 0, 32},
      {{1, 3, 1, 20, 45, 24, false, AttentionLayout::BTHD}, 0, 16},  // three query heads over one kv head, Tq < Tk
      {{1, 4, 2, 30, 70, 16, true, AttentionLayout::BTHD}, 0, 8},    // grouped kv heads, queries after a prefix
      {{1, 2, 2, 60, 60, 16, true, AttentionLayout::BHTD, {.window = 8, .dilation = 2, .global = 3}}, 0, 16},
      {{1, 2, 1, 64, 64, 16, true, AttentionLayout::BHTD, {.window = 6, .random_blocks = 2, .seed = 7}}, 0, 8},
      {{1, 4, 4, 40, 40, 16, true, AttentionLayout::BTHD, {}, true}, 0, 32},  // ALiBi
      {{2, 2, 2, 33, 33, 16, true, AttentionLayout::BHTD}, 5.0, 16},           // a soft cap
  };
  for (const FloatCase& f : cases) {
    const Case& c = f.shape;
    CAPTURE(describe(c));
    CAPTURE(f.soft_cap);
    CAPTURE(f.tile);
    const CaseInputs in = inputs_of(c, static_cast<uint64_t>(c.Tq * 100 + c.d));
    AttentionSpec spec = spec_of(c);
    if (f.soft_cap > 0) ag::test::softmax_of(spec).mods.soft_cap = f.soft_cap;
    const ag::test::AttentionRun exact = ag::test::run_attention(in.qkv, spec, Device::CPU, DType::Float64, in.upstream);
    AttentionShape shape = shape_of(c);
    shape.mods.soft_cap = f.soft_cap;
    const std::vector<double> Q = in.qkv[0].to_vector(), K = in.qkv[1].to_vector(), V = in.qkv[2].to_vector(),
                              dZ = in.upstream.to_vector();
    std::vector<double> Z(Q.size()), dQ(Q.size()), dK(K.size()), dV(V.size()), lse(static_cast<size_t>(c.B * c.Hq * c.Tq)),
        D(lse.size());
    // The shared memory each kernel asks at this tile fits the buffer, as 48 KB does on a device.
    REQUIRE(ag::cuda::forward_floats(f.tile, c.d) * 8 <= 48 * 1024);
    REQUIRE(ag::cuda::query_floats(f.tile, shape) * 8 <= 48 * 1024);
    REQUIRE(ag::cuda::key_floats(f.tile, shape) * 8 <= 48 * 1024);
    const auto blocks = [](int64_t tasks) { return static_cast<unsigned>(std::min<int64_t>(tasks, 3)); };
    const int64_t q_tiles = ag::cuda::tiles_of(c.Tq, f.tile), k_tiles = ag::cuda::tiles_of(c.Tk, f.tile);
    host::launch(blocks(c.B * c.Hq * q_tiles), 128, [&] {
      ag::cuda::flash_forward_kernel<double>(Q.data(), K.data(), V.data(), shape, f.tile, Z.data(), lse.data());
    });
    host::launch(blocks(c.B * c.Hq * q_tiles), 128, [&] {
      ag::cuda::flash_backward_query_kernel<double>(Q.data(), K.data(), V.data(), lse.data(), dZ.data(), shape, f.tile,
                                                    false, false, D.data(), dQ.data(), nullptr);
    });
    host::launch(blocks(c.B * c.Hkv * k_tiles), 128, [&] {
      ag::cuda::flash_backward_key_kernel<double>(Q.data(), K.data(), V.data(), lse.data(), D.data(), dZ.data(), shape,
                                                  f.tile, false, dK.data(), dV.data());
    });
    const auto tensor = [](const std::vector<double>& x, const Tensor& like) {
      return Tensor::from_vector(x, like.shape(), DType::Float64);
    };
    CHECK_CLOSE(tensor(Z, exact.Z), exact.Z, 1e-12);
    CHECK_CLOSE(tensor(lse, exact.lse), exact.lse, 1e-12);
    CHECK_CLOSE(tensor(dQ, exact.dQ), exact.dQ, 1e-12);
    CHECK_CLOSE(tensor(dK, exact.dK), exact.dK, 1e-12);
    CHECK_CLOSE(tensor(dV, exact.dV), exact.dV, 1e-12);
  }
}

}  // namespace flash_host_test

namespace chunked_host_test {
using namespace ag;
namespace chunked = ag::cuda::chunked;
namespace host = ag::test::cuda_host;

// The product's operands as the kernels read them (cuda/ssd.cu's SsdOperands, on plain
// arrays): problem n's rows of A [r], B_g [r], C_g [e], Out [e], and λ, w per position.
struct Operands {
  const double *A, *B, *C, *log_a, *w;
  double* Out;
  int64_t T, r, e, G;
  int64_t groups() const { return G; }
  chunked::Rows<const double> a(int64_t n, int64_t j) const { return {A + (n * T + j) * r, r}; }
  chunked::Rows<const double> b(int64_t n, int64_t g, int64_t j) const { return {B + ((n * G + g) * T + j) * r, r}; }
  chunked::Rows<const double> c(int64_t n, int64_t g, int64_t j) const { return {C + ((n * G + g) * T + j) * e, e}; }
  chunked::Rows<double> out(int64_t n, int64_t j) const { return {Out + (n * T + j) * e, e}; }
  double log_decay(int64_t n, int64_t j) const { return log_a[n * T + j]; }
  double weight(int64_t n, int64_t j) const { return w[n * T + j]; }
};

struct ChunkCase {
  PrefixDirection direction;
  int64_t problems, T, r, e, G, chunk;
  bool from_state;
};

// The recurrence, per problem, in float64: Out [problems, T, e] and the last state; with
// `absolute`, every operand's magnitude instead (the scale the error is measured against).
struct Recurrence {
  std::vector<double> Out, state;
};
Recurrence recurrence(const ChunkCase& k, const Operands& p, const std::vector<double>& state_in, bool absolute) {
  const auto v = [absolute](double x) { return absolute ? std::abs(x) : x; };
  Recurrence out{std::vector<double>(static_cast<size_t>(k.problems * k.T * k.e)), state_in};
  for (double& x : out.state) x = v(x);
  const bool causal = k.direction == PrefixDirection::Causal, all = k.direction == PrefixDirection::All;
  for (int64_t n = 0; n < k.problems; ++n) {
    std::vector<double> h(out.state.begin() + n * k.r * k.e, out.state.begin() + (n + 1) * k.r * k.e);
    if (!k.from_state) std::fill(h.begin(), h.end(), 0.0);
    const auto add_terms = [&](int64_t j) {  // h += Σ_g w_j B_gjᵀ C_gj
      for (int64_t g = 0; g < k.G; ++g)
        for (int64_t x = 0; x < k.r; ++x)
          for (int64_t y = 0; y < k.e; ++y)
            h[x * k.e + y] += v(p.weight(n, j)) * v(p.b(n, g, j)[0][x]) * v(p.c(n, g, j)[0][y]);
    };
    const auto read = [&](int64_t i) {  // Out_i = A_i h
      for (int64_t y = 0; y < k.e; ++y) {
        double sum = 0;
        for (int64_t x = 0; x < k.r; ++x) sum += v(p.a(n, i)[0][x]) * h[x * k.e + y];
        out.Out[(n * k.T + i) * k.e + y] = sum;
      }
    };
    if (all) {
      for (int64_t j = 0; j < k.T; ++j) add_terms(j);
      for (int64_t i = 0; i < k.T; ++i) read(i);
    }
    for (int64_t step = 0; step < (all ? 0 : k.T); ++step) {
      const int64_t i = causal ? step : k.T - 1 - step;
      // causal: h_i = a_i h_(i−1) + terms_i; anticausal: h_i = a_(i+1) h_(i+1) + terms_i
      const int64_t decayed = causal ? i : i + 1;
      if (decayed < k.T)
        for (double& x : h) x *= std::exp(p.log_decay(n, decayed));
      add_terms(i);
      read(i);
    }
    std::copy(h.begin(), h.end(), out.state.begin() + n * k.r * k.e);
  }
  return out;
}

// The three launches of cuda/chunked_kernels.cuh's product(), on the host's Device.
void run_chunked(const chunked::Plan& plan, const Operands& p, double* state) {
  host::Device dev;
  chunked::product<double>(dev, p, plan, state);
}

TEST_CASE("chunked product on host threads: the GPU's chunked ssd and linear attention kernels equal their recurrence (float64, 1e-12)") {
  const std::vector<ChunkCase> cases = {
      {PrefixDirection::Causal, 2, 200, 16, 8, 1, 64, false},    // four chunks, the last partial
      {PrefixDirection::Anticausal, 1, 37, 70, 65, 1, 16, false},  // r and e over two tiles, r over three slices
      {PrefixDirection::Causal, 2, 100, 40, 33, 1, 64, true},     // decoding: a state in, the last one out
      {PrefixDirection::All, 1, 70, 20, 9, 2, 64, false},          // linear attention's every j, two in-heads
      {PrefixDirection::Causal, 3, 1, 8, 8, 2, 64, false},         // T = 1
      {PrefixDirection::Anticausal, 1, 130, 8, 70, 2, 64, false},
  };
  for (const ChunkCase& k : cases) {
    CAPTURE(static_cast<int>(k.direction));
    CAPTURE(k.T);
    CAPTURE(k.r);
    CAPTURE(k.e);
    CAPTURE(k.G);
    CAPTURE(k.chunk);
    std::mt19937 rng(static_cast<unsigned>(k.T * 31 + k.r));
    std::normal_distribution<double> normal;
    std::uniform_real_distribution<double> uniform(0.5, 1.0);
    const auto fill = [&](int64_t count, auto draw) {
      std::vector<double> x(static_cast<size_t>(count));
      for (double& v : x) v = draw();
      return x;
    };
    const int64_t rows = k.problems * k.T;
    const std::vector<double> A = fill(rows * k.r, [&] { return normal(rng); }),
                              B = fill(rows * k.G * k.r, [&] { return normal(rng); }),
                              C = fill(rows * k.G * k.e, [&] { return normal(rng); }),
                              log_a = fill(rows, [&] { return k.direction == PrefixDirection::All ? 0.0 : std::log(uniform(rng)); }),
                              w = fill(rows, [&] { return uniform(rng); }),
                              state_in = fill(k.problems * k.r * k.e, [&] { return normal(rng); });
    std::vector<double> out(static_cast<size_t>(rows * k.e), 0.0), state = state_in;
    const Operands p{A.data(), B.data(), C.data(), log_a.data(), w.data(), out.data(), k.T, k.r, k.e, k.G};
    run_chunked(chunked::make_plan(k.direction, k.problems, k.T, k.r, k.e, k.chunk, k.from_state), p, state.data());
    const Recurrence exact = recurrence(k, p, state_in, false), scale = recurrence(k, p, state_in, true);
    double worst = 0;
    for (size_t i = 0; i < out.size(); ++i) worst = std::max(worst, std::abs(out[i] - exact.Out[i]) / scale.Out[i]);
    double worst_state = 0;
    if (k.from_state)
      for (size_t i = 0; i < state.size(); ++i)
        worst_state = std::max(worst_state, std::abs(state[i] - exact.state[i]) / scale.state[i]);
    CHECK(worst <= 1e-12);
    CHECK(worst_state <= 1e-12);
  }
}

}  // namespace chunked_host_test

namespace embedding_host_test {
using namespace ag;
namespace host = ag::test::cuda_host;

// CUB's SortPairs on the host: the pairs sorted stably by key (a radix sort is stable).
struct StableSortPairs {
  void operator()(const uint32_t* keys, uint32_t* sorted_keys, const int32_t* values, int32_t* sorted_values, int64_t N,
                  int end_bit) const {
    std::vector<int64_t> order(static_cast<size_t>(N));
    for (int64_t i = 0; i < N; ++i) order[static_cast<size_t>(i)] = i;
    const uint32_t mask = end_bit >= 32 ? ~0u : (1u << end_bit) - 1;
    std::stable_sort(order.begin(), order.end(), [&](int64_t a, int64_t b) { return (keys[a] & mask) < (keys[b] & mask); });
    for (int64_t i = 0; i < N; ++i) {
      sorted_keys[i] = keys[order[static_cast<size_t>(i)]];
      sorted_values[i] = values[order[static_cast<size_t>(i)]];
    }
  }
};

// The backward through the launch cuda/embedding.cu makes (its scratch, the keys, the sort, the
// run sums, the segment sums).
TEST_CASE("embedding on host threads: the backward's passes after the sort give each row's sum, unnamed rows 0") {
  struct EmbeddingCase {
    int64_t V, N, C;
    double on_row_zero;  // the share of positions on row 0
  };
  for (const EmbeddingCase& k : {EmbeddingCase{65, 1000, 3, 0.6}, EmbeddingCase{20, 31, 2, 0.0},
                                 EmbeddingCase{20, 33, 5, 0.3}, EmbeddingCase{5000, 700, 2, 0.0},
                                 EmbeddingCase{7, 1, 4, 1.0},
                                 EmbeddingCase{64, 500, 3, 0.3}}) {  // V = 2^6: the out-of-table key 64 needs bit 6
    CAPTURE(k.V);
    CAPTURE(k.N);
    std::mt19937 rng(static_cast<unsigned>(k.V + k.N));
    std::uniform_real_distribution<double> uniform(0.0, 1.0);
    std::normal_distribution<double> normal;
    std::vector<int64_t> indices(static_cast<size_t>(k.N));
    for (int64_t& v : indices) {
      const double u = uniform(rng);
      v = u < k.on_row_zero ? 0 : static_cast<int64_t>(rng() % static_cast<unsigned>(k.V));
      if (uniform(rng) < 0.02) v = k.V + 3;  // outside the table: sorted last, never written
    }
    std::vector<double> dOut(static_cast<size_t>(k.N * k.C));
    for (double& x : dOut) x = normal(rng);
    std::vector<double> dWeight(static_cast<size_t>(k.V * k.C), 0.0);  // zeroed, as the memset
    host::Device dev;
    ag::cuda::embedding_backward_launch(dev, StableSortPairs(), dOut.data(), indices.data(), k.N, k.V, k.C,
                                        dWeight.data());
    std::vector<double> exact(dWeight.size(), 0.0), size(dWeight.size(), 0.0);
    for (int64_t n = 0; n < k.N; ++n)
      if (indices[static_cast<size_t>(n)] < k.V)
        for (int64_t c = 0; c < k.C; ++c) {
          exact[static_cast<size_t>(indices[static_cast<size_t>(n)] * k.C + c)] += dOut[static_cast<size_t>(n * k.C + c)];
          size[static_cast<size_t>(indices[static_cast<size_t>(n)] * k.C + c)] += std::abs(dOut[static_cast<size_t>(n * k.C + c)]);
        }
    double worst = 0;
    int64_t unnamed_nonzero = 0;
    for (size_t i = 0; i < dWeight.size(); ++i) {
      if (size[i] == 0) unnamed_nonzero += dWeight[i] != 0.0;
      else worst = std::max(worst, std::abs(dWeight[i] - exact[i]) / size[i]);
    }
    CHECK(worst <= 1e-12);
    CHECK(unnamed_nonzero == 0);
    // the forward's gather from a table [V, C]: row indices[n] into row n, NaN for an index outside
    const Tensor table = ag::test::random({k.V, k.C}, 9, DType::Float64, false);
    std::vector<double> gathered(dOut.size());
    ag::cuda::embedding_launch(host::Device(), table.data<double>(), indices.data(), k.N, k.V, k.C, gathered.data());
    int64_t wrong = 0;
    for (int64_t n = 0; n < k.N; ++n) {
      const int64_t row = indices[static_cast<size_t>(n)];
      for (int64_t c = 0; c < k.C; ++c) {
        const double got = gathered[static_cast<size_t>(n * k.C + c)];
        wrong += row < k.V ? got != table.data<double>()[row * k.C + c] : !std::isnan(got);
      }
    }
    CHECK(wrong == 0);
  }
}

TEST_CASE("scored positions on host threads: one block's scan lists the scored targets in the CPU's order") {
  for (const int64_t N : {int64_t{1}, int64_t{700}, int64_t{5000}}) {
    CAPTURE(N);
    const int64_t ignore_index = -100;
    std::mt19937 rng(static_cast<unsigned>(N));
    std::vector<int64_t> targets(static_cast<size_t>(N));
    for (int64_t& t : targets) t = rng() % 4 == 0 ? ignore_index : static_cast<int64_t>(rng() % 65);
    std::vector<int64_t> expected_rows, expected_scored;
    for (int64_t i = 0; i < N; ++i)
      if (targets[static_cast<size_t>(i)] != ignore_index) {
        expected_rows.push_back(i);
        expected_scored.push_back(targets[static_cast<size_t>(i)]);
      }
    const int64_t n = static_cast<int64_t>(expected_rows.size());
    std::vector<int64_t> rows(static_cast<size_t>(n), -1), scored(static_cast<size_t>(n), -1);
    ag::cuda::scored_positions_launch(host::Device(), targets.data(), N, ignore_index, n, rows.data(), scored.data());
    CHECK(rows == expected_rows);
    CHECK(scored == expected_scored);
  }
}

}  // namespace embedding_host_test

namespace optimizer_host_test {
using namespace ag;
namespace host = ag::test::cuda_host;

// Four steps, the second with a non-finite guard, on the host-run CUDA kernels and on the
// CPU's; every parameter, moment and the count agree, and the count says 3.
TEST_CASE("optimizer on host threads: Adam(W) and SGD kernels skip a guarded step as the CPU does (t stays)") {
  const int64_t n = 700;  // two blocks of 256 and a grid-stride turn
  std::mt19937 rng(47);
  std::normal_distribution<double> normal;
  const auto draw = [&] {
    std::vector<double> x(static_cast<size_t>(n));
    for (double& v : x) v = normal(rng);
    return x;
  };
  const std::vector<double> start = draw();
  const std::vector<std::vector<double>> grads = {draw(), draw(), draw(), draw()};
  const double guards[] = {1.0, NAN, 2.0, 3.0};
  const auto cpu = [&](const std::vector<double>& x) { return Tensor::from_vector(x, {n}, DType::Float64); };
  for (const bool adam : {true, false}) {
    CAPTURE(adam);
    // the host-run kernels' state, and the CPU's
    std::vector<double> p = start, m(static_cast<size_t>(n), 0.0), v(static_cast<size_t>(n), 0.0), g;
    int64_t count = 0;
    Tensor cp = cpu(start), cm = cpu(m), cv = cpu(v), cg, ccount = Tensor::from_indices({0}, {1});
    for (int step = 0; step < 4; ++step) {
      CAPTURE(step);
      g = grads[static_cast<size_t>(step)];
      cg = cpu(g);
      const double guard = guards[step];
      if (adam) {
        kernel::AdamHyper hyper{0.01, 0.9, 0.999, 1e-8, 0.1, &count, true, &guard};
        ag::cuda::adam_step_launch(host::Device(), n, p.data(), g.data(), m.data(), v.data(), hyper);
        kernel::AdamHyper on_cpu = hyper;
        on_cpu.applied_steps = static_cast<const int64_t*>(ccount.raw_data());
        kernel::adam_step(cp, cg, cm, cv, on_cpu);
      } else {
        kernel::SgdHyper hyper{0.05, 0.9, 0.1, 0.01, true, &count, &guard};
        ag::cuda::sgd_step_launch(host::Device(), n, p.data(), g.data(), m.data(), hyper);
        kernel::SgdHyper on_cpu = hyper;
        on_cpu.applied_steps = static_cast<const int64_t*>(ccount.raw_data());
        kernel::sgd_step(cp, cg, cm, on_cpu);
      }
      ag::cuda::count_applied_step_launch(host::Device(), &count, &guard);
      kernel::count_applied_step(ccount, &guard);
      CHECK(count == ccount.to_indices()[0]);
      CHECK(ag::test::relative_error(cpu(p), cp) <= 1e-15);
      CHECK(ag::test::relative_error(cpu(m), cm) <= 1e-15);
      if (adam) CHECK(ag::test::relative_error(cpu(v), cv) <= 1e-15);
    }
    CHECK(count == 3);  // the guarded step was not counted
  }
}

TEST_CASE("optimizer on host threads: the clip scales by the CPU's coefficient, and only when above the norm") {
  for (const double max_norm : {0.5, 1e6}) {
    std::vector<double> x = {3.0, -4.0, 12.0};  // norm 13
    const double sum_of_squares = 169.0;
    ag::cuda::clip_by_norm_launch(host::Device(), 3, x.data(), &sum_of_squares, max_norm);
    Tensor on_cpu = Tensor::from_vector({3.0, -4.0, 12.0}, {3}, DType::Float64);
    const Tensor total = Tensor::from_vector({169.0}, {1}, DType::Float64);
    kernel::clip_by_norm(on_cpu, total, max_norm);
    CHECK(x == on_cpu.to_vector());
  }
}

}  // namespace optimizer_host_test

// What the tests of launches on host::Device share: float64 tensors the host-run kernels and the
// CPU's read alike, and their data.
namespace functor_test {
using namespace ag;
Tensor drawn(const Shape& shape, uint64_t seed) { return ag::test::random(shape, seed, DType::Float64, false); }
Tensor zeros(const Shape& shape) { return Tensor::zeros(shape, DType::Float64); }
double* out(Tensor& t) { return t.data<double>(); }
const double* in(const Tensor& t) { return t.data<double>(); }
}  // namespace functor_test

namespace s4_host_test {
using namespace ag;
using namespace functor_test;
namespace host = ag::test::cuda_host;
using math::Complex;

// The transforms of cuda/s4_kernels.cuh's long convolution on the host: a plain DFT with cuFFT's
// conventions — unnormalised, forward Σ_t z_t e^(−2πi·ft/n), inverse with + — its twiddles
// e^(∓2πi·k/n) from the exact angle in long double. Not cuFFT's algorithm: its order of sums is
// the device's cases' to check.
struct HostFft {
  void operator()(Complex<double>* z, int64_t n, int64_t rows, bool inverse) const {
    const long double pi = 3.141592653589793238462643383279502884L;
    std::vector<Complex<long double>> twiddle(static_cast<size_t>(n));
    for (int64_t k = 0; k < n; ++k) {
      const long double angle = (inverse ? 2 : -2) * pi * static_cast<long double>(k) / static_cast<long double>(n);
      twiddle[static_cast<size_t>(k)] = {std::cos(angle), std::sin(angle)};
    }
    std::vector<Complex<double>> out(static_cast<size_t>(n));
    for (int64_t r = 0; r < rows; ++r) {
      Complex<double>* x = z + r * n;
      for (int64_t f = 0; f < n; ++f) {
        Complex<long double> acc{0, 0};
        for (int64_t t = 0; t < n; ++t)
          acc = acc + Complex<long double>{x[t].re, x[t].im} * twiddle[static_cast<size_t>(f * t % n)];
        out[static_cast<size_t>(f)] = {static_cast<double>(acc.re), static_cast<double>(acc.im)};
      }
      std::copy(out.begin(), out.end(), x);
    }
  }
};

// Parameters of H channels and `modes` modes away from S4D-Lin's round values: every
// tensor drawn, Re A in (−1.1, −0.1), Im A up to 3π·modes, steps from 0.01 to 0.5.
S4dParameters drawn_parameters(int64_t H, int64_t modes, uint64_t seed) {
  std::mt19937 rng(static_cast<unsigned>(seed));
  std::uniform_real_distribution<double> unit(0.0, 1.0);
  const auto fill = [&](const Shape& shape, auto draw) {
    Tensor t = Tensor::empty(shape, DType::Float64);
    for (int64_t i = 0; i < t.numel(); ++i) t.data<double>()[i] = draw();
    return t;
  };
  return {fill({H}, [&] { return std::log(0.01 + 0.49 * unit(rng)); }),
          fill({H, modes}, [&] { return std::log(0.1 + unit(rng)); }),
          fill({H, modes}, [&] { return 3.0 * M_PI * static_cast<double>(modes) * unit(rng); }),
          fill({H, modes, 2}, [&] { return 2.0 * unit(rng) - 1.0; }),
          fill({H, modes, 2}, [&] { return 2.0 * unit(rng) - 1.0; }),
          Tensor()};
}


TEST_CASE("s4 on host: the kernel K, its backward and the recurrence, one thread per element as on a device, equal the CPU's loops (float64)") {
  for (const int64_t T : {int64_t{1}, int64_t{37}, int64_t{70}}) {  // the CPU forms exp(ℓs) along runs of 32
    CAPTURE(T);
    const int64_t H = 3, modes = 4, B = 2;
    const S4dParameters p = drawn_parameters(H, modes, static_cast<uint64_t>(T));
    host::Device run;
    const math::S4dParams<double> params{p.log_dt.data<double>(), p.log_A_re.data<double>(), p.A_im.data<double>(),
                                         p.B.data<double>(), p.C.data<double>(), modes};
    // K [H, T]
    Tensor K = Tensor::empty({H, T}, DType::Float64), K_cpu = Tensor::empty({H, T}, DType::Float64);
    ag::cuda::s4d_kernel_launch(run, params, H, T, out(K));
    kernel::s4d_kernel(p.log_dt, p.log_A_re, p.A_im, p.B, p.C, K_cpu);
    CHECK_CLOSE(K, K_cpu, 1e-12);
    // its backward from a drawn dK: the modes' gradients, then each channel's ∂L/∂log Δ
    const Tensor dK = ag::test::random({H, T}, 7, DType::Float64, false);
    const auto zeros_like = [](const Tensor& x) { return Tensor::zeros(x.shape(), DType::Float64); };
    Tensor dlog_dt = zeros_like(p.log_dt), dlog_A_re = zeros_like(p.log_A_re), dA_im = zeros_like(p.A_im),
           dB = zeros_like(p.B), dC = zeros_like(p.C);
    ag::cuda::s4d_kernel_backward_launch(run, params, H, T, dK.data<double>(), out(dlog_dt),
                                         out(dlog_A_re), out(dA_im), out(dB), out(dC));
    Tensor c_dlog_dt = zeros_like(p.log_dt), c_dlog_A_re = zeros_like(p.log_A_re), c_dA_im = zeros_like(p.A_im),
           c_dB = zeros_like(p.B), c_dC = zeros_like(p.C);
    kernel::s4d_kernel_backward(p.log_dt, p.log_A_re, p.A_im, p.B, p.C, dK, c_dlog_dt, c_dlog_A_re, c_dA_im, c_dB,
                                c_dC);
    CHECK_CLOSE(dlog_dt, c_dlog_dt, 1e-12);
    CHECK_CLOSE(dlog_A_re, c_dlog_A_re, 1e-12);
    CHECK_CLOSE(dA_im, c_dA_im, 1e-12);
    CHECK_CLOSE(dB, c_dB, 1e-12);
    CHECK_CLOSE(dC, c_dC, 1e-12);
    // the recurrence over u [B, T, H] from a drawn state [B, H, modes, 2], which it leaves at the end
    const Tensor u = ag::test::random({B, T, H}, 8, DType::Float64, false);
    const Tensor state0 = ag::test::random({B, H, modes, 2}, 9, DType::Float64, false);
    Tensor state = state0.clone(), y = Tensor::empty({B, T, H}, DType::Float64);
    Tensor c_state = state0.clone(), c_y = Tensor::empty({B, T, H}, DType::Float64);
    ag::cuda::s4d_recurrence_launch(run, params, u.data<double>(), B, T, H, out(state), out(y));
    kernel::s4d_recurrence(p.log_dt, p.log_A_re, p.A_im, p.B, p.C, u, c_state, c_y);
    CHECK_CLOSE(y, c_y, 1e-12);
    CHECK_CLOSE(state, c_state, 1e-12);
  }
}

TEST_CASE("s4 on host: the long convolution's steps around cuFFT's transforms equal the CPU's FFT convolution and its backward (float64)") {
  struct ConvCase {
    int64_t B, T, H;
  };
  for (const ConvCase& k : {ConvCase{2, 1, 3}, ConvCase{1, 37, 2}, ConvCase{3, 64, 1}, ConvCase{2, 5, 4}}) {
    CAPTURE(k.B);
    CAPTURE(k.T);
    CAPTURE(k.H);
    const Tensor u = ag::test::random({k.B, k.T, k.H}, 11, DType::Float64, false);
    const Tensor K = ag::test::random({k.H, k.T}, 12, DType::Float64, false);
    const Tensor dY = ag::test::random({k.B, k.T, k.H}, 13, DType::Float64, false);
    Tensor y = Tensor::empty({k.B, k.T, k.H}, DType::Float64), c_y = Tensor::empty({k.B, k.T, k.H}, DType::Float64);
    host::Device forward;
    ag::cuda::long_conv_launch(forward, HostFft(), u.data<double>(), K.data<double>(), out(y), k.B, k.T, k.H);
    kernel::long_conv(u, K, c_y);
    CHECK_CLOSE(y, c_y, 1e-12);
    Tensor dU = Tensor::empty(u.shape(), DType::Float64), dK = Tensor::empty(K.shape(), DType::Float64);
    Tensor c_dU = Tensor::empty(u.shape(), DType::Float64), c_dK = Tensor::empty(K.shape(), DType::Float64);
    host::Device backward;
    ag::cuda::long_conv_backward_launch(backward, HostFft(), u.data<double>(), K.data<double>(), dY.data<double>(),
                                        out(dU), out(dK), k.B, k.T, k.H);
    kernel::long_conv_backward(u, K, dY, c_dU, c_dK);
    CHECK_CLOSE(dU, c_dU, 1e-12);
    CHECK_CLOSE(dK, c_dK, 1e-12);
  }
}

}  // namespace s4_host_test

namespace edge_attention_host_test {
using namespace ag;
using namespace functor_test;
namespace host = ag::test::cuda_host;
using ag::test::flash_mma_reference::strides_of;

// Every kernel of attention over a graph's edges, launched as cuda/edge_attention.cu launches
// them, against the CPU's, which adds the same terms in the same order in double: equal to the
// last bit. The graph has a query without edges (lse +inf, Z 0), a key without edges (dK,
// dV 0) and Tq ≠ Tk; grouped kv heads, both layouts.
TEST_CASE("edge attention on host: the GPU's kernels give the CPU's bits, forward and backward") {
  const int64_t Tq = 7, Tk = 9, B = 2, Hq = 4, Hkv = 2, d = 5;
  std::mt19937 rng(36);
  std::bernoulli_distribution edge(0.4);
  std::vector<int64_t> row_ptr = {0}, col;
  for (int64_t i = 0; i < Tq; ++i) {
    for (int64_t j = 0; j < Tk; ++j)
      if (i != 3 && j != 5 && (edge(rng) || j == i)) col.push_back(j);
    row_ptr.push_back(static_cast<int64_t>(col.size()));
  }
  const int64_t E = static_cast<int64_t>(col.size());
  const EdgeGraph graph = edge_graph({Tensor::from_indices(row_ptr, {Tq + 1}), Tensor::from_indices(col, {E})}, Tq,
                                     Tk, Device::CPU);
  const EdgeLayout g = EdgeLayout::of(graph.packed.data<int64_t>(), graph.packed.numel(), Tq, Tk);
  host::Device run;
  for (const AttentionLayout layout : {AttentionLayout::BHTD, AttentionLayout::BTHD}) {
    CAPTURE(static_cast<int>(layout));
    const auto operand = [&](int64_t H, int64_t T, uint64_t seed) {
      return ag::test::random(layout == AttentionLayout::BHTD ? Shape{B, H, T, d} : Shape{B, T, H, d}, seed,
                              DType::Float64, false);
    };
    const Tensor Q = operand(Hq, Tq, 1), K = operand(Hkv, Tk, 2), V = operand(Hkv, Tk, 3), dZ = operand(Hq, Tq, 4);
    AttentionShape shape{B, Hq, Hkv, Tq, Tk, d, 1.0 / std::sqrt(double(d)), {}, strides_of(layout, Hq, Tq, d),
                         strides_of(layout, Hkv, Tk, d)};
    const auto per_edge = [&] { return Tensor::zeros({B, Hq, E}, DType::Float64); };
    const auto like = [](const Tensor& x) { return Tensor::zeros(x.shape(), DType::Float64); };
    const auto lse_rows = [&] { return Tensor::zeros({B, Hq, Tq}, DType::Float64); };
    const auto same_bits = [](const Tensor& a, const Tensor& b) { CHECK(a.to_vector() == b.to_vector()); };
    // forward: S, A and lse, Z
    Tensor S = per_edge(), A = per_edge(), lse = lse_rows(), Z = like(Q);
    Tensor c_S = per_edge(), c_A = per_edge(), c_lse = lse_rows(), c_Z = like(Q);
    ag::cuda::edge_scores_launch(run, Q.data<double>(), K.data<double>(), g, shape, S.data<double>());
    kernel::edge_scores(Q, K, graph.packed, shape, c_S);
    same_bits(S, c_S);
    ag::cuda::edge_softmax_launch(run, S.data<double>(), g, shape, A.data<double>(), lse.data<double>());
    kernel::edge_softmax(c_S, graph.packed, shape, c_A, c_lse);
    same_bits(A, c_A);
    same_bits(lse, c_lse);
    ag::cuda::edge_product_launch(run, A.data<double>(), V.data<double>(), g, shape, Z.data<double>());
    kernel::edge_product(c_A, V, graph.packed, shape, c_Z);
    same_bits(Z, c_Z);
    // backward from dZ: dA and dV, dS, dQ and dK
    Tensor dA = per_edge(), dV = like(V), dS = per_edge(), dQ = like(Q), dK = like(K);
    Tensor c_dA = per_edge(), c_dV = like(V), c_dS = per_edge(), c_dQ = like(Q), c_dK = like(K);
    ag::cuda::edge_product_backward_launch(run, A.data<double>(), V.data<double>(), dZ.data<double>(), g, shape,
                                           dA.data<double>(), dV.data<double>());
    kernel::edge_product_backward(c_A, V, dZ, graph.packed, shape, c_dA, c_dV);
    same_bits(dA, c_dA);
    same_bits(dV, c_dV);
    ag::cuda::edge_softmax_backward_launch(run, A.data<double>(), dA.data<double>(), g, shape, dS.data<double>());
    kernel::edge_softmax_backward(c_A, c_dA, graph.packed, shape, c_dS);
    same_bits(dS, c_dS);
    ag::cuda::edge_scores_backward_launch(run, Q.data<double>(), K.data<double>(), dS.data<double>(), g, shape,
                                          dQ.data<double>(), dK.data<double>());
    kernel::edge_scores_backward(Q, K, c_dS, graph.packed, shape, c_dQ, c_dK);
    same_bits(dQ, c_dQ);
    same_bits(dK, c_dK);
    // what the graph's gaps give: query 3 has no edges, key 5 none
    for (int64_t b = 0; b < B; ++b)
      for (int64_t h = 0; h < Hq; ++h) CHECK(lse.data<double>()[(b * Hq + h) * Tq + 3] == INFINITY);
    double key5 = 0;
    for (int64_t b = 0; b < B; ++b)
      for (int64_t h = 0; h < Hkv; ++h)
        for (int64_t c = 0; c < d; ++c) key5 += std::abs(dK.data<double>()[shape.kv.at(b, h, 5) + c]);
    CHECK(key5 == 0);
  }
}

}  // namespace edge_attention_host_test

namespace attention_host_test {
using namespace ag;
using namespace ag::test::flash_mma_reference;
namespace host = ag::test::cuda_host;

using namespace functor_test;

// The bias tables of the score modifiers on `mods`, for Hq heads, Tq queries and Tk keys: a
// relative table of 8 buckets (one-way, max distance 16) and an indexed table of 5 entries.
struct BiasTables {
  Tensor relative, indexed, index;
  BiasTables(int64_t Hq, int64_t Tq, int64_t Tk, uint64_t seed)
      : relative(drawn({Hq, 8}, seed)), indexed(drawn({Hq, 5}, seed + 1)), index(Tensor::zeros({Tq, Tk}, DType::Int64)) {
    for (int64_t e = 0; e < Tq * Tk; ++e) index.data<int64_t>()[e] = (e * 7 + e / Tk) % 5;
  }
  void set(ScoreModifiers& mods) const {
    mods.relative = relative.raw_data();
    mods.relative_buckets = 8;
    mods.max_distance = 16;
    mods.bidirectional = false;
    mods.indexed = indexed.raw_data();
    mods.indexed_entries = 5;
    mods.index = index.data<int64_t>();
    mods.index_row = index.size(1);
  }
};

// The dense implementation's one-thread-per-index kernels (cuda/attention_kernels.cuh), through the
// launches cuda/attention.cu makes, against the CPU's kernels on the same float64 tensors. The
// softmax columns, the modifiers, the additive scores and the dropout add in the CPU's order; the
// tolerance 1e-12 leaves the CPU room to vectorise its loops.
TEST_CASE("attention on host: the dense softmax and its backward, with masks, ALiBi and sinks, give the CPU's") {
  host::Device run;
  const std::vector<Case> cases = {
      {2, 3, 3, 9, 9, 4, true, AttentionLayout::BHTD},
      {1, 4, 2, 6, 11, 4, true, AttentionLayout::BHTD, {.window = 3, .dilation = 2, .global = 1}, true},
      {2, 2, 1, 7, 5, 4, false, AttentionLayout::BHTD},
  };
  for (const Case& c : cases) {
    for (const bool sinks_on : {false, true}) {
      CAPTURE(describe(c));
      CAPTURE(sinks_on);
      const AttentionMask mask = mask_of(c);
      const ag::cuda::TransposedScores s{c.B, c.Hq, c.Tk, c.Tq};
      const Tensor S = drawn({c.B, c.Hq, c.Tk, c.Tq}, 21), dA = drawn({c.B, c.Hq, c.Tk, c.Tq}, 22);
      const Tensor sinks = sinks_on ? drawn({c.Hq}, 23) : Tensor();
      Tensor A = zeros(S.shape()), lse = zeros({c.B, c.Hq, c.Tq}), c_A = zeros(S.shape()), c_lse = zeros(lse.shape());
      ag::cuda::attention_softmax_launch(run, in(S), s, mask, sinks_on ? in(sinks) : nullptr, out(A), out(lse));
      kernel::attention_softmax(S, mask, sinks, c_A, c_lse);
      CHECK_CLOSE(A, c_A, 1e-12);
      CHECK_CLOSE(lse, c_lse, 1e-12);
      Tensor dS = zeros(S.shape()), c_dS = zeros(S.shape());
      ag::cuda::attention_softmax_backward_launch(run, in(A), in(dA), s, out(dS));
      kernel::attention_softmax_backward(c_A, dA, c_dS);
      CHECK_CLOSE(dS, c_dS, 1e-12);
    }
  }
}

// Under a causal mask the CPU writes 0 to the scores a query cannot see (S' and the chain's dU
// there; core/cpu/attention.cpp), CUDA modifies them as any other: the softmax reads neither, and
// the gradient reaching them from the softmax is 0. So the comparison is of the pairs the mask
// keeps, with dS' 0 on the others, as the softmax's backward gives it.
TEST_CASE("attention on host: the score modifiers (bias tables, a soft cap) and their backward give the CPU's") {
  host::Device run;
  for (const bool causal : {false, true}) {
    const Case c{2, 3, 3, 6, 10, 4, causal, AttentionLayout::BHTD};  // queries after a prefix: p = i + 4
    const BiasTables tables(c.Hq, c.Tq, c.Tk, 31);
    const auto hidden = [&](int64_t e) {  // entry e of Sᵀ [B, Hq, Tk, Tq]
      return causal && e / c.Tq % c.Tk > e % c.Tq + (c.Tk - c.Tq);
    };
    const auto kept = [&](Tensor x) {  // x with the hidden pairs 0
      for (int64_t e = 0; e < x.numel(); ++e)
        if (hidden(e)) x.data<double>()[e] = 0;
      return x;
    };
    for (const double cap : {0.0, 3.0}) {
      CAPTURE(causal);
      CAPTURE(cap);
      AttentionShape shape = shape_of(c);
      tables.set(shape.mods);
      shape.mods.soft_cap = cap;
      const Tensor S = drawn({c.B, c.Hq, c.Tk, c.Tq}, 32), dS = kept(drawn(S.shape(), 33));
      Tensor S_mod = zeros(S.shape()), c_S_mod = zeros(S.shape());
      ag::cuda::attention_score_mods_launch(run, in(S), S.numel(), shape, out(S_mod));
      kernel::attention_score_mods(S, shape, c_S_mod);
      CHECK_CLOSE(kept(S_mod), kept(c_S_mod), 1e-12);
      const int64_t E = shape.mods.bias_entries();
      Tensor dU = zeros(S.shape()), dBias = zeros({c.B, c.Hq, E}), c_dU = zeros(S.shape()), c_dBias = zeros(dBias.shape());
      const Tensor chain = shape.mods.has_chain() ? S : Tensor();
      ag::cuda::attention_score_mods_backward_launch(run, in(dS), chain.defined() ? in(chain) : nullptr, dS.numel(),
                                                     shape, out(dU), out(dBias), dBias.numel());
      kernel::attention_score_mods_backward(dS, chain, shape, c_dU, c_dBias);
      CHECK_CLOSE(dU, c_dU, 1e-12);
      CHECK_CLOSE(dBias, c_dBias, 1e-12);
    }
  }
}

TEST_CASE("attention on host: GAT's additive scores and their backward, on a chunk of the batch, give the CPU's") {
  host::Device run;
  for (const AttentionLayout layout : {AttentionLayout::BHTD, AttentionLayout::BTHD}) {
    CAPTURE(static_cast<int>(layout));
    const Case c{3, 4, 2, 5, 7, 3, false, layout};
    const CaseInputs operands = inputs_of(c, 41);
    const Tensor &Q = operands.qkv[0], &K = operands.qkv[1];
    const AttentionShape shape = shape_of(c);
    const int64_t first_batch = 1, n = 2;  // the chunk: batch entries 1 and 2
    const double slope = 0.2;
    Tensor S = zeros({n, c.Hq, c.Tk, c.Tq}), c_S = zeros(S.shape());
    ag::cuda::attention_additive_scores_launch(run, in(Q), in(K), shape, slope, first_batch, S.numel(), out(S));
    kernel::attention_additive_scores(Q, K, shape, slope, first_batch, c_S);
    CHECK_CLOSE(S, c_S, 1e-12);
    const Tensor dU = drawn(S.shape(), 42);
    Tensor dQ = zeros(Q.shape()), dK = zeros(K.shape()), c_dQ = zeros(Q.shape()), c_dK = zeros(K.shape());
    ag::cuda::attention_additive_scores_backward_launch(run, in(Q), in(K), in(dU), n, shape, slope, first_batch,
                                                        out(dQ), out(dK));
    kernel::attention_additive_scores_backward(Q, K, dU, shape, slope, first_batch, c_dQ, c_dK);
    CHECK_CLOSE(dQ, c_dQ, 1e-12);
    CHECK_CLOSE(dK, c_dK, 1e-12);
  }
}

TEST_CASE("attention on host: attention dropout draws the CPU's mask, with a graph's counter shift and without") {
  host::Device run;
  const int64_t n = 2, Hq = 3, Tk = 6, Tq = 5, first_batch = 2;
  const Tensor X = drawn({n, Hq, Tk, Tq}, 51);
  Tensor support = drawn(X.shape(), 52);
  for (int64_t e = 0; e < support.numel(); e += 3) support.data<double>()[e] = 0;  // hidden pairs: nothing drawn
  const uint64_t shift = 1000;
  for (const uint64_t* counter_shift : {static_cast<const uint64_t*>(nullptr), &shift}) {
    CAPTURE(counter_shift != nullptr);
    Tensor y = zeros(X.shape()), c_y = zeros(X.shape());
    ag::cuda::attention_dropout_launch(run, in(X), in(support), ag::cuda::TransposedScores{n, Hq, Tk, Tq}, 0.3, 77, 5,
                                       counter_shift, first_batch, out(y));
    kernel::attention_dropout(X, support, 0.3, 77, 5, counter_shift, first_batch, c_y);
    CHECK(y.to_vector() == c_y.to_vector());
  }
}

TEST_CASE("attention on host: RoPE and ring attention's merge give the CPU's") {
  host::Device run;
  for (const AttentionLayout layout : {AttentionLayout::BHTD, AttentionLayout::BTHD}) {
    CAPTURE(static_cast<int>(layout));
    const int64_t B = 2, H = 3, T = 5, d = 6;
    const Tensor X = drawn(layout == AttentionLayout::BHTD ? Shape{B, H, T, d} : Shape{B, T, H, d}, 61);
    for (const double direction : {1.0, -1.0}) {
      const RotaryShape rotary{B, H, T, d, strides_of(layout, H, T, d), 1000, 10000.0, direction};
      Tensor Y = zeros(X.shape()), c_Y = zeros(X.shape());
      ag::cuda::rotary_embedding_launch(run, in(X), rotary, out(Y));
      kernel::rotary_embedding(X, rotary, c_Y);
      CHECK(Y.to_vector() == c_Y.to_vector());
    }
    // the merge: some rows saw no key in one part (lse +inf), one row in neither
    const Case c{B, H, H, T, T, d, false, layout};
    const AttentionShape shape = shape_of(c);
    Tensor Z = drawn(X.shape(), 62), lse = drawn({B, H, T}, 63), c_Z = Z.clone(), c_lse = lse.clone();
    Tensor Z_part = drawn(X.shape(), 64), lse_part = drawn({B, H, T}, 65);
    lse.data<double>()[1] = INFINITY;
    lse_part.data<double>()[2] = INFINITY;
    lse.data<double>()[3] = lse_part.data<double>()[3] = INFINITY;
    c_lse = lse.clone();
    ag::cuda::attention_merge_launch(run, out(Z), out(lse), in(Z_part), in(lse_part), shape);
    kernel::attention_merge(c_Z, c_lse, Z_part, lse_part, shape);
    CHECK_CLOSE(Z, c_Z, 1e-12);
    CHECK_CLOSE(lse, c_lse, 1e-12);
  }
}

// The CUDA-core flash attention with the modifiers' bias tables, through the launches
// cuda/attention.cu makes (cuda/flash_kernels.cuh: the tile the shared-memory budget allows, the
// forward adding the tables, the query kernel writing each query tile's table sums into scratch,
// their sum over the tiles in order into dBias [B, Hq, entries], the key kernel reading the
// query kernel's D): in float64 against the CPU's flash and its table gradient, to 1e-12; three
// query tiles, a soft cap, grouped kv heads.
TEST_CASE("flash on host threads: the CUDA-core launches with bias tables and a cap give the CPU's Z, gradients and dBias") {
  const Case c{2, 4, 2, 70, 76, 8, true, AttentionLayout::BHTD};
  const BiasTables tables(c.Hq, c.Tq, c.Tk, 71);
  AttentionShape shape = shape_of(c);
  tables.set(shape.mods);
  shape.mods.soft_cap = 4.0;
  const CaseInputs operands = inputs_of(c, 72);
  const Tensor &Q = operands.qkv[0], &K = operands.qkv[1], &V = operands.qkv[2], &dZ = operands.upstream;
  const int64_t E = shape.mods.bias_entries();
  Tensor Z = zeros(Q.shape()), lse = zeros({c.B, c.Hq, c.Tq}), dQ = zeros(Q.shape()), dK = zeros(K.shape()),
         dV = zeros(V.shape()), dBias = zeros({c.B, c.Hq, E});
  host::Device dev;
  ag::cuda::flash_attention_launch(dev, in(Q), in(K), in(V), shape, out(Z), out(lse));
  ag::cuda::flash_attention_backward_launch(dev, in(Q), in(K), in(V), in(lse), in(dZ), static_cast<double*>(nullptr),
                                            shape, false, out(dQ), out(dK), out(dV), out(dBias));
  Tensor c_Z = zeros(Q.shape()), c_lse = zeros(lse.shape()), c_dQ = zeros(Q.shape()), c_dK = zeros(K.shape()),
         c_dV = zeros(V.shape()), c_dBias = zeros(dBias.shape());
  kernel::flash_attention(Q, K, V, shape, c_Z, c_lse);
  kernel::flash_attention_backward(Q, K, V, c_lse, dZ, Tensor(), shape, false, c_dQ, c_dK, c_dV, c_dBias);
  // the query kernel's tile here: 32, so three query tiles' table sums were added
  CHECK(ag::cuda::choose_tile<double>("", c.d, [&](int t) { return ag::cuda::query_floats(t, shape); }) == 32);
  CHECK_CLOSE(Z, c_Z, 1e-12);
  CHECK_CLOSE(lse, c_lse, 1e-12);
  CHECK_CLOSE(dQ, c_dQ, 1e-12);
  CHECK_CLOSE(dK, c_dK, 1e-12);
  CHECK_CLOSE(dV, c_dV, 1e-12);
  CHECK_CLOSE(dBias, c_dBias, 1e-12);
}

}  // namespace attention_host_test

namespace ssd_linear_host_test {
using namespace ag;
namespace host = ag::test::cuda_host;

using namespace functor_test;
// Rows of width d of a [B, T, H, d] tensor (BTHD), as the ops read them.
HeadStrides bthd(int64_t T, int64_t H, int64_t d) { return {T * H * d, d, H * d}; }

// State-space attention's product and decay gradient (cuda/ssd_kernels.cuh) through the launches
// cuda/ssd.cu makes — the operands' head mappings, the chunked product's three launches, the
// spans of the gradient — on the host's Device, against the CPU's kernels in float64 to 1e-12.
TEST_CASE("ssd on host: the GPU's chunked product and decay gradient give the CPU's, every direction, heads and a state") {
  struct SsdCase {
    PrefixDirection direction;
    bool weighted;
    int64_t batch, T, r, e, heads, a_heads, b_heads, c_heads, chunk;
    bool with_state;
  };
  const std::vector<SsdCase> cases = {
      {PrefixDirection::Causal, true, 2, 100, 16, 8, 4, 2, 1, 4, 64, false},      // two chunks, grouped heads
      {PrefixDirection::Anticausal, false, 1, 37, 20, 70, 2, 2, 2, 1, 16, false},  // e over two tiles
      {PrefixDirection::Causal, true, 2, 20, 8, 8, 2, 1, 2, 2, 64, true},         // decoding: a state in and out
      {PrefixDirection::Causal, false, 1, 1, 8, 4, 3, 3, 3, 3, 64, true},         // one position
  };
  for (const SsdCase& k : cases) {
    CAPTURE(static_cast<int>(k.direction));
    CAPTURE(k.T);
    CAPTURE(k.with_state);
    DecayedProduct how;
    how.direction = k.direction;
    how.weighted = k.weighted;
    how.chunk = k.chunk;
    how.batch = k.batch, how.T = k.T, how.r = k.r, how.e = k.e;
    how.heads = k.heads, how.a_heads = k.a_heads, how.b_heads = k.b_heads, how.c_heads = k.c_heads;
    how.a = bthd(k.T, k.a_heads, k.r), how.b = bthd(k.T, k.b_heads, k.r), how.c = bthd(k.T, k.c_heads, k.e);
    how.out = bthd(k.T, k.heads, k.e), how.decay = bthd(k.T, k.heads, 1);
    const uint64_t seed = static_cast<uint64_t>(k.T * 10 + k.r);
    const Tensor A = drawn({k.batch, k.T, k.a_heads, k.r}, seed), B = drawn({k.batch, k.T, k.b_heads, k.r}, seed + 1),
                 C = drawn({k.batch, k.T, k.c_heads, k.e}, seed + 2);
    Tensor dt = drawn({k.batch, k.T, k.heads}, seed + 3), log_a = drawn(dt.shape(), seed + 4);
    for (int64_t i = 0; i < dt.numel(); ++i) {
      dt.data<double>()[i] = 0.1 + std::abs(dt.data<double>()[i]);                // Δ > 0
      log_a.data<double>()[i] = -0.05 - 0.2 * std::abs(log_a.data<double>()[i]);  // a in (0, 1)
    }
    const Tensor state0 = drawn({k.batch, k.heads, k.r, k.e}, seed + 5);
    Tensor Out = Tensor::zeros({k.batch, k.T, k.heads, k.e}, DType::Float64), c_Out = Out.clone();
    Tensor state = state0.clone(), c_state = state0.clone();
    host::Device dev;
    ag::cuda::ssd_product_launch(dev, in(A), in(B), in(C), in(dt), in(log_a), how, out(Out),
                                 k.with_state ? out(state) : nullptr);
    kernel::ssd_product(A, B, C, dt, log_a, how, c_Out, k.with_state ? &c_state : nullptr);
    CHECK_CLOSE(Out, c_Out, 1e-12);
    CHECK_CLOSE(state, c_state, 1e-12);
    // the decay's gradient from the product's Y = Out and a drawn dY, dΔ
    const Tensor dY = drawn(Out.shape(), seed + 6), d_dt = drawn(dt.shape(), seed + 7);
    Tensor d_log_a = Tensor::zeros(dt.shape(), DType::Float64), c_d_log_a = d_log_a.clone();
    ag::cuda::ssd_decay_gradient_launch(dev, in(dY), in(c_Out), in(dt), in(d_dt), how, out(d_log_a));
    kernel::ssd_decay_gradient(dY, c_Out, dt, d_dt, how, c_d_log_a);
    CHECK_CLOSE(d_log_a, c_d_log_a, 1e-12);
  }
}

TEST_CASE("ssd on host: the decay gradient's spans of 64 add up as the CPU's one pass does") {
  DecayedProduct how;
  how.batch = 2, how.T = 150, how.r = 4, how.e = 5, how.heads = 3;  // three spans, the last partial
  how.out = bthd(how.T, how.heads, how.e), how.decay = bthd(how.T, how.heads, 1);
  const Tensor Y = drawn({2, 150, 3, 5}, 91), dY = drawn(Y.shape(), 92), dt = drawn({2, 150, 3}, 93),
               d_dt = drawn(dt.shape(), 94);
  Tensor d_log_a = Tensor::zeros(dt.shape(), DType::Float64), c_d_log_a = d_log_a.clone();
  host::Device dev;
  ag::cuda::ssd_decay_gradient_launch(dev, in(dY), in(Y), in(dt), in(d_dt), how, out(d_log_a));
  kernel::ssd_decay_gradient(dY, Y, dt, d_dt, how, c_d_log_a);
  CHECK_CLOSE(d_log_a, c_d_log_a, 1e-12);
}

// Linear attention's feature maps and prefix product (cuda/linear_attention_kernels.cuh) through
// cuda/linear_attention.cu's launches on the host's Device, against the CPU's kernels (1e-12).
TEST_CASE("linear attention on host: the GPU's feature maps and chunked prefix product give the CPU's") {
  const int64_t rows = 30, d = 6, m = 8;
  const Tensor X = drawn({rows, d}, 101), omega = drawn({m, d}, 102);
  for (const FeatureMap map : {FeatureMap::Elu1, FeatureMap::Favor}) {
    CAPTURE(static_cast<int>(map));
    const int64_t r = map == FeatureMap::Elu1 ? d : m;
    const Tensor w = map == FeatureMap::Favor ? omega : Tensor();
    Tensor Phi = Tensor::zeros({rows, r}, DType::Float64), c_Phi = Phi.clone();
    ag::cuda::attention_features_launch(host::Device(), in(X), w.defined() ? in(w) : nullptr, map, rows, d, r,
                                        out(Phi));
    kernel::attention_features(X, w, map, c_Phi);
    CHECK_CLOSE(Phi, c_Phi, 1e-12);
    const Tensor dPhi = drawn(Phi.shape(), 103);
    Tensor dX = Tensor::zeros(X.shape(), DType::Float64), c_dX = dX.clone();
    ag::cuda::attention_features_backward_launch(host::Device(), in(X), w.defined() ? in(w) : nullptr, map, in(c_Phi),
                                                 in(dPhi), rows, d, r, out(dX));
    kernel::attention_features_backward(X, w, map, c_Phi, dPhi, c_dX);
    CHECK_CLOSE(dX, c_dX, 1e-12);
  }
  struct ProductCase {
    PrefixDirection direction;
    int64_t batch, T, r, e, out_heads, in_heads, chunk;
  };
  const std::vector<ProductCase> cases = {
      {PrefixDirection::Causal, 2, 90, 12, 7, 4, 2, 64},      // query heads over fewer kv heads
      {PrefixDirection::Anticausal, 1, 70, 9, 70, 2, 4, 16},  // a kv head's gradient sums two query heads
      {PrefixDirection::All, 2, 33, 5, 6, 2, 2, 64},
  };
  for (const ProductCase& k : cases) {
    CAPTURE(static_cast<int>(k.direction));
    CAPTURE(k.T);
    PrefixProduct how;
    how.direction = k.direction;
    how.chunk = k.chunk;
    how.batch = k.batch, how.T = k.T, how.r = k.r, how.e = k.e, how.out_heads = k.out_heads, how.in_heads = k.in_heads;
    how.a = bthd(k.T, k.out_heads, k.r), how.b = bthd(k.T, k.in_heads, k.r), how.c = bthd(k.T, k.in_heads, k.e);
    how.out = bthd(k.T, k.out_heads, k.e);
    const uint64_t seed = static_cast<uint64_t>(k.T + k.e);
    const Tensor A = drawn({k.batch, k.T, k.out_heads, k.r}, seed), B = drawn({k.batch, k.T, k.in_heads, k.r}, seed + 1),
                 C = drawn({k.batch, k.T, k.in_heads, k.e}, seed + 2);
    Tensor Out = Tensor::zeros({k.batch, k.T, k.out_heads, k.e}, DType::Float64), c_Out = Out.clone();
    host::Device dev;
    ag::cuda::linear_attention_product_launch(dev, in(A), in(B), in(C), how, out(Out));
    kernel::linear_attention_product(A, B, C, how, c_Out);
    CHECK_CLOSE(Out, c_Out, 1e-12);
  }
}

}  // namespace ssd_linear_host_test

namespace cell_dropout_host_test {
using namespace ag;
using namespace functor_test;
namespace host = ag::test::cuda_host;

// The LSTM cell's step and its backward (cuda/lstm_kernels.cuh) and dropout (dropout_kernels.cuh)
// through their launches on the host's Device, against the CPU's kernels: the same formulas per
// element (core/lstm_math.h) and the same counters (core/random.h), so the same bits.
TEST_CASE("lstm and dropout on host: the GPU's cell step, its backward and the dropout mask give the CPU's bits") {
  const int64_t B = 3, C = 7;
  const Tensor G = drawn({B, 4 * C}, 111), c_prev = drawn({B, C}, 112), dh = drawn({B, C}, 113),
               dc = drawn({B, C}, 114);
  Tensor act = zeros({B, 4 * C}), c = zeros({B, C}), h = zeros({B, C});
  Tensor c_act = zeros(act.shape()), c_c = zeros(c.shape()), c_h = zeros(h.shape());
  ag::cuda::lstm_cell_launch(host::Device(), in(G), in(c_prev), B, C, out(act), out(c), out(h));
  kernel::lstm_cell(G, c_prev, c_act, c_c, c_h);
  CHECK(act.to_vector() == c_act.to_vector());
  CHECK(c.to_vector() == c_c.to_vector());
  CHECK(h.to_vector() == c_h.to_vector());
  Tensor dG = zeros(G.shape()), dc_prev = zeros(c_prev.shape()), c_dG = zeros(G.shape()), c_dc_prev = zeros(c_prev.shape());
  ag::cuda::lstm_cell_backward_launch(host::Device(), in(c_act), in(c_prev), in(c_c), in(dh), in(dc), B, C, out(dG),
                                      out(dc_prev));
  kernel::lstm_cell_backward(c_act, c_prev, c_c, dh, dc, c_dG, c_dc_prev);
  CHECK(dG.to_vector() == c_dG.to_vector());
  CHECK(dc_prev.to_vector() == c_dc_prev.to_vector());

  const Tensor x = drawn({5, 40}, 115);
  const uint64_t shift = 4096;
  for (const uint64_t* counter_shift : {static_cast<const uint64_t*>(nullptr), &shift}) {
    CAPTURE(counter_shift != nullptr);
    Tensor y = zeros(x.shape()), c_y = zeros(x.shape());
    ag::cuda::dropout_launch(host::Device(), in(x), x.numel(), 0.25, 9, 300, counter_shift, out(y));
    kernel::dropout(x, 0.25, 9, 300, counter_shift, c_y);
    CHECK(y.to_vector() == c_y.to_vector());
  }
}

// y, dX and dBias add the CPU's terms in the CPU's order: the same bits. dWeight's sum over the
// batch entries is one running sum on the CPU and a sum of per-entry sums here: 1e-12.
TEST_CASE("conv on host: the GPU's causal depthwise convolution and its backward give the CPU's") {
  const int64_t B = 2, T = 9, C = 5, W = 4;
  const Tensor x = drawn({B, T, C}, 141), weight = drawn({W, C}, 142), bias = drawn({C}, 143), dY = drawn({B, T, C}, 144);
  for (const bool with_bias : {false, true}) {
    CAPTURE(with_bias);
    const Tensor b = with_bias ? bias : Tensor();
    Tensor y = zeros(x.shape()), c_y = zeros(x.shape());
    ag::cuda::causal_conv1d_launch(host::Device(), in(x), in(weight), with_bias ? in(bias) : nullptr, B, T, C, W,
                                   out(y));
    kernel::causal_conv1d(x, weight, b, c_y);
    CHECK(y.to_vector() == c_y.to_vector());
    Tensor dX = zeros(x.shape()), dW = zeros(weight.shape()), dB = zeros({C});
    Tensor c_dX = zeros(x.shape()), c_dW = zeros(weight.shape()), c_dB = zeros({C});
    ag::cuda::causal_conv1d_backward_launch(host::Device(), in(x), in(weight), in(dY), B, T, C, W, out(dX), out(dW),
                                            with_bias ? out(dB) : nullptr);
    kernel::causal_conv1d_backward(x, weight, dY, c_dX, c_dW, with_bias ? &c_dB : nullptr);
    CHECK(dX.to_vector() == c_dX.to_vector());
    CHECK_CLOSE(dW, c_dW, 1e-12);
    CHECK(dB.to_vector() == c_dB.to_vector());
  }
}

}  // namespace cell_dropout_host_test

namespace row_kernels_host_test {
using namespace ag;
using namespace functor_test;
namespace host = ag::test::cuda_host;

// The row kernels (cuda/softmax_kernels.cuh, layer_norm_kernels.cuh): one block per row, its
// threads striding along the row and combining through block_reduce's warp shuffles, through
// cuda/softmax.cu's and layer_norm.cu's launches on the host's Device (three blocks striding
// over the rows), against the CPU's kernels (1e-12: the sums' order differs). Rows of 5 (one
// warp, most lanes idle), 40 (two warps) and 300 (eight warps, each thread twice along the row).
TEST_CASE("softmax on host threads: softmax, log-softmax, cross entropy and their backward give the CPU's") {
  for (const int64_t C : {int64_t{5}, int64_t{40}, int64_t{300}}) {
    CAPTURE(C);
    const int64_t N = 7;
    Tensor x = drawn({N, C}, 121);
    for (int64_t j = 0; j < C; ++j) x.data<double>()[2 * C + j] = -INFINITY;  // a fully masked row: zeros
    const Tensor dY = drawn({N, C}, 122);
    const host::Device dev;
    Tensor y = zeros(x.shape()), c_y = zeros(x.shape()), dX = zeros(x.shape()), c_dX = zeros(x.shape());
    ag::cuda::softmax_launch(dev, in(x), N, C, out(y));
    kernel::softmax(x, c_y);
    CHECK_CLOSE(y, c_y, 1e-12);
    ag::cuda::softmax_backward_launch(dev, in(c_y), in(dY), N, C, out(dX));
    kernel::softmax_backward(c_y, dY, c_dX);
    CHECK_CLOSE(dX, c_dX, 1e-12);
    const Tensor logits = drawn({N, C}, 123);
    ag::cuda::log_softmax_launch(dev, in(logits), N, C, out(y));
    kernel::log_softmax(logits, c_y);
    CHECK_CLOSE(y, c_y, 1e-12);
    ag::cuda::log_softmax_backward_launch(dev, in(c_y), in(dY), N, C, out(dX));
    kernel::log_softmax_backward(c_y, dY, c_dX);
    CHECK_CLOSE(dX, c_dX, 1e-12);
    // cross entropy: targets across the row, one ignored (−100)
    std::vector<int64_t> t(static_cast<size_t>(N));
    for (int64_t r = 0; r < N; ++r) t[static_cast<size_t>(r)] = (r * 37) % C;
    t[4] = -100;
    const Tensor targets = Tensor::from_indices(t, {N});
    Tensor loss = zeros({N}), lse = zeros({N}), scored = zeros({N});
    Tensor c_loss = zeros({N}), c_lse = zeros({N}), c_scored = zeros({N});
    ag::cuda::cross_entropy_launch(dev, in(logits), targets.data<int64_t>(), int64_t{-100}, N, C, out(loss), out(lse),
                                   out(scored));
    kernel::cross_entropy(logits, targets, -100, c_loss, c_lse, c_scored);
    CHECK_CLOSE(loss, c_loss, 1e-12);
    CHECK_CLOSE(lse, c_lse, 1e-12);
    CHECK(scored.to_vector() == c_scored.to_vector());
    const Tensor scale = Tensor::from_vector({0.25}, {1}, DType::Float64);
    Tensor dLogits = zeros(logits.shape()), c_dLogits = zeros(logits.shape());
    ag::cuda::cross_entropy_backward_launch(dev, in(logits), targets.data<int64_t>(), in(c_lse), int64_t{-100},
                                            in(scale), N, C, out(dLogits));
    kernel::cross_entropy_backward(logits, targets, c_lse, -100, scale, c_dLogits);
    CHECK_CLOSE(dLogits, c_dLogits, 1e-12);
  }
}

TEST_CASE("layer norm on host threads: the forward, the residual's fused add and the backward give the CPU's") {
  struct NormCase {
    int64_t N, C;
  };
  // 70 rows: two chunks of dWeight's rows; 130: four chunks, tasks striding over the host's 3 blocks
  for (const NormCase& k : {NormCase{5, 7}, NormCase{70, 40}, NormCase{40, 300}, NormCase{130, 40}}) {
    CAPTURE(k.N);
    CAPTURE(k.C);
    const Tensor x = drawn({k.N, k.C}, 131), residual = drawn({k.N, k.C}, 132), weight = drawn({k.C}, 133),
                 bias = drawn({k.C}, 134), dY = drawn({k.N, k.C}, 135);
    const double eps = 1e-5;
    Tensor y = zeros(x.shape()), mean = zeros({k.N}), rstd = zeros({k.N}), sum = zeros(x.shape());
    Tensor c_y = zeros(x.shape()), c_mean = zeros({k.N}), c_rstd = zeros({k.N}), c_sum = zeros(x.shape());
    host::Device dev;
    ag::cuda::layer_norm_launch(dev, in(x), static_cast<const double*>(nullptr), in(weight), in(bias), eps, k.N, k.C,
                                static_cast<double*>(nullptr), out(y), out(mean), out(rstd));
    kernel::layer_norm(x, weight, bias, eps, c_y, c_mean, c_rstd);
    CHECK_CLOSE(y, c_y, 1e-12);
    CHECK_CLOSE(mean, c_mean, 1e-12);
    CHECK_CLOSE(rstd, c_rstd, 1e-12);
    ag::cuda::layer_norm_launch(dev, in(x), in(residual), in(weight), in(bias), eps, k.N, k.C, out(sum), out(y),
                                out(mean), out(rstd));
    kernel::add_layer_norm(x, residual, weight, bias, eps, c_sum, c_y, c_mean, c_rstd);
    CHECK(sum.to_vector() == c_sum.to_vector());
    CHECK_CLOSE(y, c_y, 1e-12);
    CHECK_CLOSE(rstd, c_rstd, 1e-12);
    Tensor dX = zeros(x.shape()), dW = zeros({k.C}), dB = zeros({k.C});
    Tensor c_dX = zeros(x.shape()), c_dW = zeros({k.C}), c_dB = zeros({k.C});
    ag::cuda::layer_norm_backward_launch(dev, in(c_sum), in(weight), in(c_mean), in(c_rstd), in(dY), k.N, k.C, out(dX),
                                         out(dW), out(dB));
    kernel::layer_norm_backward(c_sum, weight, c_mean, c_rstd, dY, c_dX, c_dW, c_dB);
    CHECK_CLOSE(dX, c_dX, 1e-12);
    CHECK_CLOSE(dW, c_dW, 1e-12);
    CHECK_CLOSE(dB, c_dB, 1e-12);
  }
}

// The reductions (cuda/reduce_kernels.cuh) through cuda/reduce.cu's launches: sum_to_shape on each
// of its three paths (one thread per output, one block per output through block_reduce, and the
// total's fixed grid), max over a dim with its argmax and backward, cumulative sums both ways;
// against the CPU's kernels (the sums in double: 1e-12; max, argmax and its scatter to the bit).
TEST_CASE("reductions on host threads: sum_to_shape on each path, max and cumsum give the CPU's") {
  struct SumCase {
    Shape x, out;
  };
  for (const SumCase& k : {SumCase{{6, 5, 4}, {1, 5, 1}},     // 24 terms each: a thread per output
                           SumCase{{40, 3, 7}, {3, 7}},       // 40 terms, leading dim dropped: still per thread
                           SumCase{{300, 5}, {1, 5}},          // 300 terms: a block per output
                           SumCase{{3, 4, 70}, {3, 1, 1}},     // 280 terms over two dims, a block each
                           SumCase{{9, 130}, {1}}}) {          // everything: the total
    CAPTURE(to_string(k.x));
    CAPTURE(to_string(k.out));
    const Tensor x = drawn(k.x, 151);
    Tensor sum = zeros(k.out), c_sum = zeros(k.out);
    host::Device dev;
    ag::cuda::sum_to_shape_launch(dev, in(x), k.x, k.out, out(sum));
    kernel::sum_to_shape(x, c_sum);
    CHECK_CLOSE(sum, c_sum, 1e-12);
  }
  const Tensor x = drawn({4, 9, 6}, 152), dValues = drawn({4, 6}, 153);
  const kernel::ReduceDims dims{4, 9, 6};  // over the middle dim
  Tensor values = zeros({4, 6}), argmax = Tensor::zeros({4, 6}, DType::Int64);
  Tensor c_values = zeros({4, 6}), c_argmax = Tensor::zeros({4, 6}, DType::Int64);
  ag::cuda::max_dim_launch(host::Device(), in(x), dims, out(values), argmax.data<int64_t>());
  kernel::max_dim(x, dims, c_values, c_argmax);
  CHECK(values.to_vector() == c_values.to_vector());
  CHECK(argmax.to_indices() == c_argmax.to_indices());
  Tensor dX = zeros(x.shape()), c_dX = zeros(x.shape());
  ag::cuda::max_dim_backward_launch(host::Device(), in(dValues), argmax.data<int64_t>(), dims, out(dX));
  kernel::max_dim_backward(dValues, c_argmax, dims, c_dX);
  CHECK(dX.to_vector() == c_dX.to_vector());
  for (const bool reverse : {false, true}) {
    CAPTURE(reverse);
    Tensor y = zeros(x.shape()), c_y = zeros(x.shape());
    ag::cuda::cumsum_launch(host::Device(), in(x), dims, reverse, out(y));
    kernel::cumsum(x, dims, reverse, c_y);
    CHECK_CLOSE(y, c_y, 1e-12);
  }
}

// The elementwise kernels (cuda/elementwise_kernels.cuh) through cuda/elementwise.cu's launches,
// against the CPU's kernels: every unary op and activation derivative, the bias activation and
// its backward (whose column sums are sum_to_shape's), affine, LeakyReLU, pow, and each binary
// op on equal shapes and broadcast both ways (1e-12: the CPU vectorises some of its loops).
TEST_CASE("elementwise on host: every unary and binary op, the activations' derivatives and the bias activation give the CPU's") {
  using kernel::BinaryOp;
  using kernel::UnaryOp;
  const int64_t N = 6, C = 11;
  const Tensor x = drawn({N, C}, 161), dY = drawn({N, C}, 162), bias = drawn({C}, 163);
  Tensor positive = drawn({N, C}, 164);
  for (int64_t i = 0; i < positive.numel(); ++i) positive.data<double>()[i] = 0.1 + std::abs(positive.data<double>()[i]);
  const host::Device dev;
  for (const UnaryOp op : {UnaryOp::Neg, UnaryOp::Exp, UnaryOp::Log, UnaryOp::Tanh, UnaryOp::Relu, UnaryOp::GeluErf,
                           UnaryOp::GeluTanh, UnaryOp::Silu, UnaryOp::Softplus, UnaryOp::Elu}) {
    CAPTURE(static_cast<int>(op));
    const Tensor& input = op == UnaryOp::Log ? positive : x;
    Tensor y = zeros(x.shape()), c_y = zeros(x.shape());
    ag::cuda::unary_launch(dev, op, in(input), input.numel(), out(y));
    kernel::unary(op, input, c_y);
    CHECK_CLOSE(y, c_y, 1e-12);
    if (op == UnaryOp::Neg || op == UnaryOp::Exp || op == UnaryOp::Log || op == UnaryOp::Tanh) continue;
    Tensor dX = zeros(x.shape()), c_dX = zeros(x.shape());
    ag::cuda::unary_backward_launch(dev, op, in(x), in(dY), x.numel(), out(dX));
    kernel::unary_backward(op, x, dY, c_dX);
    CHECK_CLOSE(dX, c_dX, 1e-12);
    Tensor a = zeros(x.shape()), derivative = zeros(x.shape()), c_a = zeros(x.shape()), c_derivative = zeros(x.shape());
    ag::cuda::bias_activation_launch(dev, op, in(x), in(bias), x.numel(), C, out(a), out(derivative));
    kernel::bias_activation(op, x, bias, c_a, &c_derivative);
    CHECK_CLOSE(a, c_a, 1e-12);
    CHECK_CLOSE(derivative, c_derivative, 1e-12);
    Tensor dbias = zeros({C}), c_dbias = zeros({C});
    host::Device scratch_dev;
    ag::cuda::bias_activation_backward_launch(scratch_dev, in(c_derivative), in(dY), x.shape(), bias.shape(), out(dX),
                                              out(dbias));
    kernel::bias_activation_backward(c_derivative, dY, c_dX, c_dbias);
    CHECK_CLOSE(dX, c_dX, 1e-12);
    CHECK_CLOSE(dbias, c_dbias, 1e-12);
  }
  Tensor y = zeros(x.shape()), c_y = zeros(x.shape());
  ag::cuda::affine_launch(dev, in(x), x.numel(), 1.5, -0.25, out(y));
  kernel::affine(x, 1.5, -0.25, c_y);
  CHECK(y.to_vector() == c_y.to_vector());
  ag::cuda::leaky_relu_launch(dev, in(x), x.numel(), 0.2, out(y));
  kernel::leaky_relu(x, 0.2, c_y);
  CHECK(y.to_vector() == c_y.to_vector());
  ag::cuda::leaky_relu_backward_launch(dev, in(x), in(dY), x.numel(), 0.2, out(y));
  kernel::leaky_relu_backward(x, dY, 0.2, c_y);
  CHECK(y.to_vector() == c_y.to_vector());
  ag::cuda::pow_scalar_launch(dev, in(positive), x.numel(), 2.5, out(y));
  kernel::pow_scalar(positive, 2.5, c_y);
  CHECK_CLOSE(y, c_y, 1e-12);
  struct Operands {
    Shape a, b, out;
  };
  for (const Operands& k : {Operands{{N, C}, {N, C}, {N, C}}, Operands{{N, C}, {C}, {N, C}},
                            Operands{{N, 1}, {1, C}, {N, C}}, Operands{{2, 1, C}, {3, 1}, {2, 3, C}}}) {
    CAPTURE(to_string(k.a));
    CAPTURE(to_string(k.b));
    const Tensor a = drawn(k.a, 165), b = drawn(k.b, 166);
    for (const BinaryOp op : {BinaryOp::Add, BinaryOp::Sub, BinaryOp::Mul, BinaryOp::Div}) {
      CAPTURE(static_cast<int>(op));
      Tensor z = zeros(k.out), c_z = zeros(k.out);
      ag::cuda::binary_launch(dev, op, in(a), k.a, in(b), k.b, k.out, out(z));
      kernel::binary(op, a, b, c_z);
      CHECK_CLOSE(z, c_z, 1e-12);
    }
  }
}

// The movement kernels (cuda/memory_kernels.cuh) through cuda/memory.cu's launches: the strided copy
// (a permute, a slice at an offset, a broadcast-expand, a contiguous copy that becomes one memcpy),
// fill and every cast, against the CPU's kernels, to the bit.
TEST_CASE("memory on host: the strided copy, fill and casts give the CPU's bits") {
  const Tensor x = drawn({4, 5, 6}, 171);
  struct CopyCase {
    const char* what;
    kernel::StridedView src, dst;
    Shape shape;
  };
  const std::vector<CopyCase> cases = {
      {"permute [4,5,6] -> [6,4,5]", {0, {1, 30, 6}}, {0, {20, 5, 1}}, {6, 4, 5}},
      {"slice [1:3, :, 2:5]", {32, {30, 6, 1}}, {0, {15, 3, 1}}, {2, 5, 3}},
      {"expand a row [6] to [7, 6]", {12, {0, 1}}, {0, {6, 1}}, {7, 6}},
      {"contiguous (one memcpy)", {0, {30, 6, 1}}, {0, {30, 6, 1}}, {4, 5, 6}},
  };
  const auto memcpy_bytes = [](char* to, const char* from, size_t bytes) { std::memcpy(to, from, bytes); };
  for (const CopyCase& k : cases) {
    CAPTURE(k.what);
    Tensor y = zeros({numel(k.shape)}), c_y = zeros({numel(k.shape)});
    ag::cuda::copy_strided_launch(host::Device(), memcpy_bytes, reinterpret_cast<const char*>(in(x) + k.src.offset),
                                  k.src.strides, reinterpret_cast<char*>(out(y) + k.dst.offset), k.dst.strides, k.shape,
                                  sizeof(double));
    kernel::copy_strided(x, k.src, c_y, k.dst, k.shape);
    CHECK(y.to_vector() == c_y.to_vector());
  }
  Tensor filled = zeros({9}), c_filled = zeros({9});
  ag::cuda::fill_launch(host::Device(), out(filled), 9, -2.5);
  kernel::fill(c_filled, -2.5);
  CHECK(filled.to_vector() == c_filled.to_vector());
  Tensor f32 = Tensor::zeros({4, 5, 6}, DType::Float32), c_f32 = Tensor::zeros({4, 5, 6}, DType::Float32);
  ag::cuda::cast_launch(host::Device(), in(x), x.numel(), f32.data<float>());
  kernel::cast(x, c_f32);
  CHECK(f32.to_vector() == c_f32.to_vector());
  Tensor back = zeros(x.shape()), c_back = zeros(x.shape());
  ag::cuda::cast_launch(host::Device(), f32.data<float>(), x.numel(), out(back));
  kernel::cast(c_f32, c_back);
  CHECK(back.to_vector() == c_back.to_vector());
  const Tensor indices = Tensor::from_indices({3, -1, 0, 70000}, {4});
  Tensor as_double = zeros({4}), c_as_double = zeros({4});
  ag::cuda::cast_launch(host::Device(), indices.data<int64_t>(), 4, out(as_double));
  kernel::cast(indices, c_as_double);
  CHECK(as_double.to_vector() == c_as_double.to_vector());
}

// A GEMM with K = 0 (cuda/matmul.cu scales C itself: cuBLAS has been seen to leave it) against
// the CPU's BLAS call with K = 0, a strided batch with gaps between rows and matrices, which
// stay; and the index scan of cuda/launch.cu's check_indices_later against the first bad
// position of each list, written down.
TEST_CASE("memory on host: a GEMM with K = 0 scales C as BLAS does, and the index scan finds the first bad position") {
  for (const double beta : {0.5, 0.0, 1.0}) {
    CAPTURE(beta);
    kernel::GemmShape s{.batch = 3, .M = 2, .N = 3, .K = 0};
    s.ldc = 5;
    s.c_batch_stride = 12;
    s.c_offset = 1;
    s.beta = beta;
    Tensor C = drawn({1 + 3 * 12}, 181);
    C.data<double>()[1 + 12 + 5 + 2] = NAN;  // matrix 1, row 1, column 2: beta 0 writes 0 over it
    Tensor c_C = C.clone();
    const Tensor none = zeros({1});
    ag::cuda::scale_batches_launch(host::Device(), out(C) + s.c_offset, s.batch, s.M, s.N, s.ldc, s.c_batch_stride,
                                   beta);
    kernel::gemm(s, none, none, c_C);
    const std::vector<double> ours = C.to_vector(), blas = c_C.to_vector();
    for (size_t i = 0; i < ours.size(); ++i) {
      CAPTURE(i);
      CHECK((ours[i] == blas[i] || (std::isnan(ours[i]) && std::isnan(blas[i]))));
    }
    CHECK(std::isnan(ours[1 + 12 + 5 + 2]) == (beta != 0));
  }
  constexpr unsigned long long kNone = ~0ull;  // what the scan leaves when every index is in range
  struct Scan {
    std::vector<int64_t> indices;
    int64_t limit;
    bool has_ignore;
    int64_t ignore;
    unsigned long long first;  // the smallest bad position
  };
  const std::vector<Scan> scans = {
      {{0, 3, 9, 2, -1, 10, 4}, 10, false, -1, 4},    // -1 (10 after it; no ignoring asked, so -1 counts)
      {{1, 2, 10, -1}, 10, false, 0, 2},              // the limit itself
      {{0, -100, 9, -100, 12, 1}, 10, true, -100, 4},  // the ignored -100s pass: 12
      {{0, 1, 2, 3}, 4, false, 0, kNone},
      {{5}, 4, true, 5, kNone},  // the one index out of range is the ignored one
  };
  for (const Scan& scan : scans) {
    unsigned long long first = 0;
    ag::cuda::first_out_of_range_launch(host::Device(), scan.indices.data(), static_cast<int64_t>(scan.indices.size()),
                                        scan.limit, scan.has_ignore, scan.ignore, &first);
    CAPTURE(scan.indices.size());
    CHECK(first == scan.first);
  }
}

}  // namespace row_kernels_host_test

#include "tests/cuda_on_host_end.h"
