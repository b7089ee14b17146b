#include <cblas.h>
#include <omp.h>

#include <algorithm>

#include "core/cpu/cpu.h"

namespace ag::cpu {

namespace {
// OpenBLAS runs a product on one thread when M·N·K is below this (interface/
// gemm.c: SMP_THRESHOLD_MIN · GEMM_MULTITHREAD_THRESHOLD = 65536 · 4).
constexpr int64_t kOpenBlasSingleThreaded = 65536 * 4;
// Up to this M·N·K, a product is split by rows over our threads, each block a
// single-threaded GEMM, rather than left to OpenBLAS's threading: at these
// sizes its synchronisation (threads waiting for each other's packed panels)
// costs more than each block packing B for itself (measured at 2 threads on
// the step's shapes: docs/performance.md).
constexpr int64_t kSplitByRows = int64_t{1} << 26;
// Row blocks start on multiples of the SkylakeX kernel's 16-row tile.
constexpr int64_t kRowTile = 16;
}  // namespace

// One cblas_?gemm per batch entry, in row-major order with the transpose flags
// passed through (no transposing copies). OpenBLAS's OpenMP build runs
// single-threaded inside a parallel region, which the two small-product cases
// use:
//   - a batch of small products (attention's per head and batch entry), which OpenBLAS
//     would run one after another on one thread: spread over our threads;
//   - one product up to kSplitByRows: its rows cut into one block per thread.
// Larger products are parallelised by OpenBLAS itself. Every element of C is
// the same dot product either way, though a row block's edge may fall inside
// one of the kernel's register tiles and change the order of its adds: the
// last bits can depend on the thread count (they do with the Haswell kernels,
// not with SkylakeX's at these shapes), as they can with OpenBLAS's own split.
void gemm(const GemmShape& s, const Tensor& A, const Tensor& B, Tensor& C) {
  const CBLAS_TRANSPOSE ta = s.trans_a ? CblasTrans : CblasNoTrans;
  const CBLAS_TRANSPOSE tb = s.trans_b ? CblasTrans : CblasNoTrans;
  // Leading dimensions of the stored (untransposed) row-major matrices.
  const int lda = static_cast<int>(s.row_stride_a());
  const int ldb = static_cast<int>(s.row_stride_b());
  const int ldc = static_cast<int>(s.row_stride_c());
  const int N = static_cast<int>(s.N), K = static_cast<int>(s.K);
  visit_floating(A.dtype(), "gemm", [&](auto zero) {
    using T = decltype(zero);
    const T* a = static_cast<const T*>(A.raw_data()) + s.a_offset;
    const T* b = static_cast<const T*>(B.raw_data()) + s.b_offset;
    T* c = static_cast<T*>(C.raw_data()) + s.c_offset;
    // Rows [first_row, first_row + rows) of op(A_gi)·op(B_gi) into the same rows
    // of C_gi. Row r of op(A) is row r of A, or column r when A is read transposed.
    const auto product = [&](int64_t g, int64_t i, int64_t first_row, int64_t rows) {
      const T* ai = a + g * s.a_group_stride + i * s.a_batch_stride + (s.trans_a ? first_row : first_row * lda);
      const T* bi = b + g * s.b_group_stride + i * s.b_batch_stride;
      T* ci = c + g * s.c_group_stride + i * s.c_batch_stride + first_row * ldc;
      if constexpr (std::is_same_v<T, float>)
        cblas_sgemm(CblasRowMajor, ta, tb, static_cast<int>(rows), N, K, static_cast<float>(s.alpha), ai, lda, bi,
                    ldb, static_cast<float>(s.beta), ci, ldc);
      else
        cblas_dgemm(CblasRowMajor, ta, tb, static_cast<int>(rows), N, K, s.alpha, ai, lda, bi, ldb, s.beta, ci, ldc);
    };
    // Separate loops, not one with an `if` clause: a parallel region switched
    // off by `if` still opens a (one-thread) region, and OpenBLAS's own threads
    // inside it form a nested team, which libgomp builds from new threads at
    // every call (on a busy machine, 2-thread steps many times slower:
    // docs/performance.md).
    const int64_t threads = omp_in_parallel() ? 1 : omp_get_max_threads(), matrices = s.groups * s.batch;
    if (threads > 1 && matrices > 1 && s.M * s.N * s.K < kOpenBlasSingleThreaded) {
#pragma omp parallel for schedule(static)
      for (int64_t m = 0; m < matrices; ++m) product(m / s.batch, m % s.batch, 0, s.M);
    } else if (threads > 1 && s.M >= 2 * kRowTile * threads && s.M * s.N * s.K <= kSplitByRows) {
      for (int64_t m = 0; m < matrices; ++m) {
#pragma omp parallel
        {
          const int64_t team = omp_get_num_threads(), member = omp_get_thread_num();
          const auto row = [&](int64_t k) { return k == team ? s.M : s.M * k / team / kRowTile * kRowTile; };
          product(m / s.batch, m % s.batch, row(member), row(member + 1) - row(member));
        }
      }
    } else {
      for (int64_t m = 0; m < matrices; ++m) product(m / s.batch, m % s.batch, 0, s.M);
    }
  });
}

}  // namespace ag::cpu
