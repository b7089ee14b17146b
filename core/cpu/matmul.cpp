#include <cblas.h>

#include <algorithm>

#include "core/cpu/cpu.h"

namespace ag::cpu {

namespace {
// OpenBLAS runs a product on one thread when M·N·K is below this (interface/
// gemm.c: SMP_THRESHOLD_MIN · GEMM_MULTITHREAD_THRESHOLD = 65536 · 4).
constexpr int64_t kOpenBlasSingleThreaded = 65536 * 4;
}  // namespace

// One cblas_?gemm per batch entry, in row-major order with the transpose flags
// passed through (no transposing copies). A large product is parallelised by
// OpenBLAS itself. A batch of small ones (attention's per-head products) would
// run one after another on one thread, so they are spread over our threads
// instead, each a single-threaded GEMM (OpenBLAS's OpenMP build runs
// single-threaded inside a parallel region): the same arithmetic per product.
void gemm(const GemmShape& s, const Tensor& A, const Tensor& B, Tensor& C) {
  const CBLAS_TRANSPOSE ta = s.trans_a ? CblasTrans : CblasNoTrans;
  const CBLAS_TRANSPOSE tb = s.trans_b ? CblasTrans : CblasNoTrans;
  // Leading dimensions of the stored (untransposed) row-major matrices.
  const int lda = static_cast<int>(s.row_stride_a());
  const int ldb = static_cast<int>(s.row_stride_b());
  const int ldc = static_cast<int>(s.row_stride_c());
  const int M = static_cast<int>(s.M), N = static_cast<int>(s.N), K = static_cast<int>(s.K);
  visit_floating(A.dtype(), "gemm", [&](auto zero) {
    using T = decltype(zero);
    const T* a = static_cast<const T*>(A.raw_data()) + s.a_offset;
    const T* b = static_cast<const T*>(B.raw_data()) + s.b_offset;
    T* c = static_cast<T*>(C.raw_data()) + s.c_offset;
    const auto product = [&](int64_t i) {
      const T* ai = a + i * s.a_batch_stride;
      const T* bi = b + i * s.b_batch_stride;
      T* ci = c + i * s.c_batch_stride;
      if constexpr (std::is_same_v<T, float>)
        cblas_sgemm(CblasRowMajor, ta, tb, M, N, K, static_cast<float>(s.alpha), ai, lda, bi, ldb,
                    static_cast<float>(s.beta), ci, ldc);
      else
        cblas_dgemm(CblasRowMajor, ta, tb, M, N, K, s.alpha, ai, lda, bi, ldb, s.beta, ci, ldc);
    };
    // Two loops, not one with an `if` clause: a parallel region switched off
    // by `if` still opens a (one-thread) region, and OpenBLAS's own threads
    // inside it form a nested team, which libgomp builds from new threads at
    // every call (measured: 10x slower steps at 2 threads on a busy machine).
    if (s.batch > 1 && s.M * s.N * s.K < kOpenBlasSingleThreaded) {
#pragma omp parallel for schedule(static)
      for (int64_t i = 0; i < s.batch; ++i) product(i);
    } else {
      for (int64_t i = 0; i < s.batch; ++i) product(i);
    }
  });
}

}  // namespace ag::cpu
