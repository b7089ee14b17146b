// The tensor cores' fragment code of the CUDA flash kernels (cuda/mma_fragments.cuh),
// run where there is no GPU: 32 host threads play one warp's lanes, each with its lane(),
// and the formats' mma is replaced by a model of mma.sync written here from the PTX ISA's
// fragment tables ("Matrix fragments for mma.m16n8k16" with .bf16, "... mma.m16n8k8" with
// .tf32), independently of the header. The header's loads, packing and loops then have to
// produce the products the flash kernels rely on:
//   product_rows:    C [16, N] += A [rows m0 …, D] · X [N, D]ᵀ          (S = Q Kᵀ, dP = dZ Vᵀ)
//   product_columns: C [16, D] += P [16, N] · X [N, D], P from C fragments (Z += P V, dQ += dS K)
// for both operand formats (bf16 through m16n8k16, tf32 through m16n8k8 with its renumbered
// k slots) and the tile shapes the kernels use. A wrong lane, register or slot gives errors
// of the products' own size; the sums' float32 rounding is below γ_(K+1)·Σ|terms|.
// What this cannot see: the hardware's own behaviour (its accumulation order and rounding),
// shared-memory banks, and the kernels' loops around these products — the CUDA cases of
// tests/test_flash_mma.cpp, on a device, see those.
#include <algorithm>
#include <cmath>
#include <condition_variable>
#include <cstdint>
#include <cstring>
#include <functional>
#include <mutex>
#include <random>
#include <thread>
#include <vector>

#include "tests/helpers.h"

// The header's seams for a host build (cuda/mma_fragments.cuh, at its top).
namespace ag::cuda::mma {
struct bf16 {
  uint16_t bits;
};
thread_local int host_lane = 0;
inline int lane() { return host_lane; }
inline uint32_t bits_of(float x) {
  uint32_t u;
  std::memcpy(&u, &x, sizeof u);
  return u;
}
inline float float_of(uint32_t bits) {
  float f;
  std::memcpy(&f, &bits, sizeof f);
  return f;
}
inline uint16_t bits_of(bf16 x) { return x.bits; }
inline bf16 round_bf16(float x) {  // to nearest, ties to even (finite x)
  uint32_t u = bits_of(x);
  u += 0x7FFFu + ((u >> 16) & 1u);
  return bf16{static_cast<uint16_t>(u >> 16)};
}
inline uint32_t pair_at(const bf16* p) {
  uint32_t v;
  std::memcpy(&v, p, sizeof v);
  return v;
}
}  // namespace ag::cuda::mma

#include "cuda/mma_fragments.cuh"

// A named namespace, not a using-directive at file scope: the tests build in unity batches,
// where tests/test_flash_mma.cpp has a bf16() of its own.
namespace mma_fragments_test {
using namespace ag::cuda::mma;

// 32 threads as one warp: run() starts them, mma() is each lane's part of one mma.sync —
// every lane leaves its registers, the last to arrive multiplies for all, each takes its C.
class Warp {
 public:
  void run(const std::function<void(int)>& body) {
    std::vector<std::thread> lanes;
    for (int l = 0; l < 32; ++l)
      lanes.emplace_back([&body, l] {
        host_lane = l;
        body(l);
      });
    for (std::thread& t : lanes) t.join();
  }
  template <int K> void mma(float (&c)[4], const uint32_t (&a)[4], const uint32_t (&b)[2]) {
    const int l = lane();
    std::unique_lock<std::mutex> lock(mutex_);
    for (int i = 0; i < 4; ++i) A_[l][i] = a[i], C_[l][i] = c[i];
    for (int i = 0; i < 2; ++i) B_[l][i] = b[i];
    const uint64_t generation = generation_;
    if (++arrived_ == 32) {
      multiply<K>();
      arrived_ = 0;
      ++generation_;
      changed_.notify_all();
    } else {
      changed_.wait(lock, [&] { return generation_ != generation; });
    }
    for (int i = 0; i < 4; ++i) c[i] = D_[l][i];
  }

 private:
  // D = A·B + C from the 32 lanes' registers, lane = 4g + t:
  //   m16n8k16 .bf16 (two per register, the lower index in the lower half):
  //     a0 = A[g][2t, 2t+1], a1 = A[g+8][2t, 2t+1], a2 = A[g][2t+8, 2t+9], a3 = A[g+8][2t+8, 2t+9];
  //     b0 = B[2t, 2t+1][g], b1 = B[2t+8, 2t+9][g]
  //   m16n8k8 .tf32 (one per register; the hardware reads 19 bits, so the low 13 are dropped here
  //     and an operand left unrounded shows): a0 = A[g][t], a1 = A[g+8][t], a2 = A[g][t+4],
  //     a3 = A[g+8][t+4]; b0 = B[t][g], b1 = B[t+4][g]
  //   both: c0, c1 = C[g][2t, 2t+1], c2, c3 = C[g+8][2t, 2t+1]
  template <int K> void multiply() {
    double A[16][K], B[K][8];
    const auto half = [](uint32_t r, int upper) {
      return static_cast<double>(float_of((upper ? r >> 16 : r & 0xFFFFu) << 16));
    };
    const auto tf32 = [](uint32_t r) { return static_cast<double>(float_of(r & 0xFFFFE000u)); };
    for (int l = 0; l < 32; ++l) {
      const int g = l / 4, t = l % 4;
      if constexpr (K == 16) {
        for (int u = 0; u < 2; ++u) {
          A[g][2 * t + u] = half(A_[l][0], u);
          A[g + 8][2 * t + u] = half(A_[l][1], u);
          A[g][2 * t + 8 + u] = half(A_[l][2], u);
          A[g + 8][2 * t + 8 + u] = half(A_[l][3], u);
          B[2 * t + u][g] = half(B_[l][0], u);
          B[2 * t + 8 + u][g] = half(B_[l][1], u);
        }
      } else {
        A[g][t] = tf32(A_[l][0]);
        A[g + 8][t] = tf32(A_[l][1]);
        A[g][t + 4] = tf32(A_[l][2]);
        A[g + 8][t + 4] = tf32(A_[l][3]);
        B[t][g] = tf32(B_[l][0]);
        B[t + 4][g] = tf32(B_[l][1]);
      }
    }
    for (int l = 0; l < 32; ++l) {
      const int g = l / 4, t = l % 4;
      for (int e = 0; e < 4; ++e) {
        double sum = C_[l][e];
        for (int k = 0; k < K; ++k) sum += A[g + 8 * (e / 2)][k] * B[k][2 * t + e % 2];
        D_[l][e] = static_cast<float>(sum);
      }
    }
  }

  std::mutex mutex_;
  std::condition_variable changed_;
  int arrived_ = 0;
  uint64_t generation_ = 0;
  uint32_t A_[32][4] = {}, B_[32][2] = {};
  float C_[32][4] = {}, D_[32][4] = {};
};

Warp* warp = nullptr;  // the warp the formats' mma calls reach

// The header's formats with the model's mma in place of mma.sync.
struct HostBf16 : Bf16 {
  static void mma(float (&c)[4], const uint32_t (&a)[4], const uint32_t (&b)[2]) { warp->mma<16>(c, a, b); }
};
struct HostTf32 : Tf32 {
  static void mma(float (&c)[4], const uint32_t (&a)[4], const uint32_t (&b)[2]) { warp->mma<8>(c, a, b); }
};

// The tests' own roundings, written apart from the header's: bf16 to nearest even; tf32 to
// nearest, ties away from zero (cvt.rna.tf32.f32).
double as_double(bf16 x) { return float_of(static_cast<uint32_t>(x.bits) << 16); }
double as_double(float x) { return x; }
double rounded(const HostBf16&, float x) {
  uint32_t u = bits_of(x);
  u = (u + 0x7FFFu + ((u >> 16) & 1u)) & 0xFFFF0000u;
  return float_of(u);
}
double rounded(const HostTf32&, float x) {
  const double magnitude = std::abs(static_cast<double>(x));
  const int exponent = std::ilogb(magnitude);
  const double unit = std::ldexp(1.0, exponent - 10);  // tf32: 10 stored fraction bits
  const double down = std::floor(magnitude / unit) * unit;
  const double r = magnitude - down >= unit / 2 ? down + unit : down;
  return x < 0 ? -r : r;
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

  Warp w;
  warp = &w;
  w.run([&](int l) {
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
  warp = nullptr;

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
        const double term = rounded(F{}, P[i * N + n]) * as_double(Y[n * ld + d]);
        exact += term;
        size += std::abs(term);
      }
      worst = std::max(worst, std::abs(O[i * D + d] - exact) / (gamma(N) * size));
    }
  return worst;
}

TEST_CASE("mma fragments: bf16's m16n8k16 fragments make Q Kᵀ and P V at the flash kernels' tile shapes") {
  // (d_h, columns): the forward and dQ kernels' 64-key tiles at d_h 64 and 128, the dK dV kernel's 32-query tiles at 128
  for (const int m0 : {0, 16, 48}) {
    CAPTURE(m0);
    CHECK(check_products<HostBf16, 64, 64>(m0, 1 + m0) <= 1.0);
    CHECK(check_products<HostBf16, 128, 64>(m0, 2 + m0) <= 1.0);
    CHECK(check_products<HostBf16, 128, 32>(m0, 3 + m0) <= 1.0);
  }
}

TEST_CASE("mma fragments: tf32's m16n8k8 fragments, k slots renumbered, make Q Kᵀ and P V at the flash kernels' tile shapes") {
  for (const int m0 : {0, 16, 48}) {
    CAPTURE(m0);
    CHECK(check_products<HostTf32, 64, 64>(m0, 4 + m0) <= 1.0);
    CHECK(check_products<HostTf32, 128, 64>(m0, 5 + m0) <= 1.0);
    CHECK(check_products<HostTf32, 128, 32>(m0, 6 + m0) <= 1.0);
  }
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
    CHECK(Tf32::operand(x) == rounded(HostTf32{}, x));
    CHECK(as_double(Bf16::operand(x)) == rounded(HostBf16{}, x));
  }
}

}  // namespace mma_fragments_test
