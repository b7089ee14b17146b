// The tensor cores' fragments for cuda/flash_mma.cu: how the 32 lanes of a warp hold
// the tiles of one mma.sync, the two operand formats (Bf16, Tf32), and the two products
// the flash kernels are built of (product_rows: C += A Xᵀ; product_columns: C += P X with
// P from an accumulator). Device code, written so that a host build can compile it too:
// tests/test_cuda_on_host.cpp runs a warp's lanes as host fibers with a model of mma.sync
// from the PTX ISA's tables (tests/cuda_on_host.h), and checks the products against plain
// sums — the fragments' index arithmetic checked where there is no GPU. So the code below reaches the
// hardware through six seams only: lane(), round_bf16, bits_of, float_of, pair_at and (for
// the mma) the format's mma; under nvcc they are the CUDA intrinsics, in a host build the
// includer defines the first five (in ag::cuda::mma, before including this), with the CUDA
// keywords, and gives its formats a model of the mma (cuda/host_compilable.cuh: AG_UNROLL).
//
// mma.sync.m16n8k16.row.col (PTX ISA, "Matrix fragments for mma.m16n8k16"):
// C [16, 8] += A [16, 16] · B [16, 8]. Lane = 4·g + t (g = lane / 4, t = lane % 4):
//   A: a0 = A[g][2t, 2t+1], a1 = A[g+8][2t, 2t+1], a2 = A[g][2t+8, 2t+9], a3 = A[g+8][2t+8, 2t+9]
//   B: b0 = B[2t, 2t+1][g], b1 = B[2t+8, 2t+9][g]
//   C: c0, c1 = C[g][2t, 2t+1], c2, c3 = C[g+8][2t, 2t+1]
// two bf16 per 32-bit register, the lower index in the lower half. So the C
// fragments of two neighbouring 8-column tiles are, packed to bf16, exactly the A
// fragment of their 16 columns: P (and dS) go from the S accumulator into the
// next product without touching shared memory (pack_a). tf32's m16n8k8 and how its
// fragments meet the same C fragments: at struct Tf32 below.
//
// Shared memory holds tiles row-major, [rows][d_h + 8] bf16 ([rows][d_h + 4] fp32
// for tf32): the 16 bytes of padding put the 8 rows a fragment load touches
// (g = 0 … 7) 4 banks apart, so a warp's 32 four-byte loads hit 32 different banks.

#pragma once
#include <cstdint>

#include "cuda/host_compilable.cuh"

#ifdef __CUDACC__
#include <cuda_bf16.h>

namespace ag::cuda::mma {
using bf16 = __nv_bfloat16;
__device__ inline int lane() { return static_cast<int>(threadIdx.x % 32); }
__device__ inline bf16 round_bf16(float x) { return __float2bfloat16_rn(x); }  // to nearest, ties to even
__device__ inline uint16_t bits_of(bf16 x) { return __bfloat16_as_ushort(x); }
__device__ inline uint32_t bits_of(float x) { return __float_as_uint(x); }
__device__ inline float float_of(uint32_t bits) { return __uint_as_float(bits); }
// Two neighbouring bf16 as one 32-bit word (p 4-byte aligned: every caller's index is even).
__device__ inline uint32_t pair_at(const bf16* p) { return *reinterpret_cast<const uint32_t*>(p); }
}  // namespace ag::cuda::mma
#endif

namespace ag::cuda::mma {

// --- the two operand formats ----------------------------------------------------------------
//
// Bf16 (--precision bf16): bfloat16 operands, mma.sync.m16n8k16, two per 32-bit register.
// Tf32 (--precision tf32): tf32 operands held as fp32 whose 13 low bits are zero,
// mma.sync.m16n8k8, one per register. Each gives its Element (what shared memory holds),
// its mma's depth kK, the rounding of an fp32 operand, the mma, its fragment loads from
// shared tiles, and pack_a (an accumulator's C fragments as the next product's A fragment).
// cuda/flash_mma.cu's kernels are written once, for either.

// C += A·B on the tensor cores, C in fp32: mma.sync.m16n8k16 with bf16 operands (kK = 16) or
// m16n8k8 with tf32 operands (kK = 8), each four A registers and two B registers a lane.
template <int kK> __device__ inline void mma_sync(float (&c)[4], const uint32_t (&a)[4], const uint32_t (&b)[2]) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 800
  if constexpr (kK == 16)
    asm volatile(
        "mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0, %1, %2, %3}, {%4, %5, %6, %7}, {%8, %9}, "
        "{%0, %1, %2, %3};\n"
        : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
        : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b[0]), "r"(b[1]));
  else
    asm volatile(
        "mma.sync.aligned.m16n8k8.row.col.f32.tf32.tf32.f32 {%0, %1, %2, %3}, {%4, %5, %6, %7}, {%8, %9}, "
        "{%0, %1, %2, %3};\n"
        : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
        : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b[0]), "r"(b[1]));
#elif defined(__CUDA_ARCH__)
  __trap();  // flash_mma_takes sends no problem here below sm_80
#else
  (void)c, (void)a, (void)b;  // a host build (tests/cuda_on_host.h) gives its formats a model instead
#endif
}

struct Bf16 {
  using Element = bf16;
  static constexpr int kK = 16;
  // To nearest, ties to even.
  static __device__ bf16 operand(float x) { return round_bf16(x); }

  static __device__ void mma(float (&c)[4], const uint32_t (&a)[4], const uint32_t (&b)[2]) { mma_sync<kK>(c, a, b); }

  static __device__ uint32_t pack(bf16 lower, bf16 upper) {
    return static_cast<uint32_t>(bits_of(lower)) | (static_cast<uint32_t>(bits_of(upper)) << 16);
  }
  // Two fp32 rounded to bf16, `lower` in the lower half.
  static __device__ uint32_t pack(float lower, float upper) { return pack(operand(lower), operand(upper)); }

  // A's fragment of the 16 × 16 block at (m0, k0) of X stored [m][k] (row stride ld).
  static __device__ void load_a(const bf16* X, int ld, int m0, int k0, uint32_t (&a)[4]) {
    const int g = lane() / 4, t = lane() % 4;
    const bf16* p = X + (m0 + g) * ld + k0 + 2 * t;
    a[0] = pair_at(p);
    a[1] = pair_at(p + 8 * ld);
    a[2] = pair_at(p + 8);
    a[3] = pair_at(p + 8 * ld + 8);
  }
  // B's fragment of the 16 × 8 block at (k0, n0) of B = Xᵀ, X stored [n][k]: k runs
  // along X's rows, so each register is one 4-byte load (S = Q Kᵀ reads K so).
  static __device__ void load_b_rows(const bf16* X, int ld, int n0, int k0, uint32_t (&b)[2]) {
    const int g = lane() / 4, t = lane() % 4;
    const bf16* p = X + (n0 + g) * ld + k0 + 2 * t;
    b[0] = pair_at(p);
    b[1] = pair_at(p + 8);
  }
  // B's fragment of the 16 × 8 block at (k0, n0) of B = X, X stored [k][n]: k runs
  // down X's columns, so each register packs two 2-byte loads (P V reads V so).
  // Each of the 4 loads touches 16 words, 2 lanes each (the same word: no conflict),
  // in 16 different banks: a row is (d_h + 8) / 2 ≡ 4 words mod 32, so rows 2t sit
  // 8t banks apart and the columns n0 + g add g / 2.
  static __device__ void load_b_columns(const bf16* X, int ld, int k0, int n0, uint32_t (&b)[2]) {
    const int g = lane() / 4, t = lane() % 4;
    const bf16* p = X + (k0 + 2 * t) * ld + n0 + g;
    b[0] = pack(p[0], p[ld]);
    b[1] = pack(p[8 * ld], p[9 * ld]);
  }
  // The A fragment of columns 16·kk … 16·kk + 15 of a [16, N] accumulator held as
  // N / 8 C fragments (see the top of the file), rounded to bf16.
  template <int N> static __device__ void pack_a(const float (&c)[N / 8][4], int kk, uint32_t (&a)[4]) {
    a[0] = pack(c[2 * kk][0], c[2 * kk][1]);
    a[1] = pack(c[2 * kk][2], c[2 * kk][3]);
    a[2] = pack(c[2 * kk + 1][0], c[2 * kk + 1][1]);
    a[3] = pack(c[2 * kk + 1][2], c[2 * kk + 1][3]);
  }
};

// mma.sync.m16n8k8.row.col with .tf32 operands (PTX ISA, "Matrix fragments for mma.m16n8k8"):
// C [16, 8] += A [16, 8] · B [8, 8], one operand per register; lane = 4·g + t as above:
//   A: a0 = A[g][t], a1 = A[g+8][t], a2 = A[g][t+4], a3 = A[g+8][t+4]
//   B: b0 = B[t][g], b1 = B[t+4][g]
//   C: as m16n8k16's.
// A C fragment holds columns 2t, 2t+1 where A's wants t, t+4; but a sum over k does not
// care how its terms' slots are numbered, as long as A and B number them alike. So where A
// comes from an accumulator (pack_a), slot t holds column 2t and slot t+4 column 2t+1, and
// load_b_columns reads B's rows 2t and 2t+1 into b0 and b1: no shuffles between lanes.
// Banks: a shared row is d_h + 4 ≡ 4 words mod 32, so A's and row-B's loads (rows g,
// columns t) hit 4g + t and column-B's (rows 2t, columns g) 8t + g: 32 different banks.
struct Tf32 {
  using Element = float;
  static constexpr int kK = 8;
  // To nearest, ties away from zero (cvt.rna.tf32.f32's rounding); inf and NaN as they are.
  static __device__ float operand(float x) {
    const uint32_t bits = bits_of(x);
    if ((bits & 0x7F800000u) == 0x7F800000u) return x;
    return float_of((bits + 0x1000u) & 0xFFFFE000u);
  }

  static __device__ void mma(float (&c)[4], const uint32_t (&a)[4], const uint32_t (&b)[2]) { mma_sync<kK>(c, a, b); }

  static __device__ uint32_t at(const float* p) { return bits_of(*p); }
  // A's fragment of the 16 × 8 block at (m0, k0) of X stored [m][k].
  static __device__ void load_a(const float* X, int ld, int m0, int k0, uint32_t (&a)[4]) {
    const int g = lane() / 4, t = lane() % 4;
    const float* p = X + (m0 + g) * ld + k0 + t;
    a[0] = at(p);
    a[1] = at(p + 8 * ld);
    a[2] = at(p + 4);
    a[3] = at(p + 8 * ld + 4);
  }
  // B's fragment of the 8 × 8 block at (k0, n0) of B = Xᵀ, X stored [n][k].
  static __device__ void load_b_rows(const float* X, int ld, int n0, int k0, uint32_t (&b)[2]) {
    const int g = lane() / 4, t = lane() % 4;
    const float* p = X + (n0 + g) * ld + k0 + t;
    b[0] = at(p);
    b[1] = at(p + 4);
  }
  // B's fragment of the 8 × 8 block at (k0, n0) of B = X, X stored [k][n], its slots
  // numbered as pack_a's: b0 = B[2t][g], b1 = B[2t+1][g].
  static __device__ void load_b_columns(const float* X, int ld, int k0, int n0, uint32_t (&b)[2]) {
    const int g = lane() / 4, t = lane() % 4;
    const float* p = X + (k0 + 2 * t) * ld + n0 + g;
    b[0] = at(p);
    b[1] = at(p + ld);
  }
  // The A fragment of columns 8·kk … 8·kk + 7 of a [16, N] accumulator (its C fragment
  // kk), rounded to tf32: slot t is column 2t, slot t + 4 column 2t + 1.
  template <int N> static __device__ void pack_a(const float (&c)[N / 8][4], int kk, uint32_t (&a)[4]) {
    a[0] = bits_of(operand(c[kk][0]));  // (g, 2t)
    a[1] = bits_of(operand(c[kk][2]));  // (g + 8, 2t)
    a[2] = bits_of(operand(c[kk][1]));  // (g, 2t + 1)
    a[3] = bits_of(operand(c[kk][3]));  // (g + 8, 2t + 1)
  }
};

// Shared rows are padded by 16 bytes (8 bf16, 4 fp32), so that the rows a fragment load
// touches fall in different banks (above).
template <class E> constexpr int kPad = 16 / static_cast<int>(sizeof(E));

// C [16, N] += A [16, D] · (X [N, D])ᵀ: A's 16 rows from m0 of `A` stored [m][D], X
// stored [n][D] (shared, row stride D + kPad). S = Q Kᵀ, dP = dZ Vᵀ and their transposes.
template <class F, int D, int N>
__device__ inline void product_rows(const typename F::Element* A, int m0, const typename F::Element* X,
                                       float (&c)[N / 8][4]) {
  constexpr int ld = D + kPad<typename F::Element>;
  AG_UNROLL
  for (int kk = 0; kk < D / F::kK; ++kk) {
    uint32_t a[4];
    F::load_a(A, ld, m0, F::kK * kk, a);
    AG_UNROLL
    for (int nt = 0; nt < N / 8; ++nt) {
      uint32_t b[2];
      F::load_b_rows(X, ld, 8 * nt, F::kK * kk, b);
      F::mma(c[nt], a, b);
    }
  }
}
// C [16, D] += P [16, N] · X [N, D]: P from the registers (pack_a), X stored [N][D]
// in shared memory. Z += P V, dQ += dS K, dV += Pᵀ dZ, dK += dSᵀ Q.
template <class F, int D, int N>
__device__ inline void product_columns(const float (&p)[N / 8][4], const typename F::Element* X, float (&c)[D / 8][4]) {
  constexpr int ld = D + kPad<typename F::Element>;
  uint32_t as[N / F::kK][4];
  AG_UNROLL
  for (int kk = 0; kk < N / F::kK; ++kk) F::template pack_a<N>(p, kk, as[kk]);
  AG_UNROLL
  for (int kk = 0; kk < N / F::kK; ++kk) {
    const uint32_t (&a)[4] = as[kk];
    AG_UNROLL
    for (int nt = 0; nt < D / 8; ++nt) {
      uint32_t b[2];
      F::load_b_columns(X, ld, F::kK * kk, 8 * nt, b);
      F::mma(c[nt], a, b);
    }
  }
}

}  // namespace ag::cuda::mma
