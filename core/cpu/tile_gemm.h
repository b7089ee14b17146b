// One small row-major GEMM on the calling thread, for kernels that multiply
// tiles inside their own OpenMP loops (flash attention, the SSD chunks):
//   C[M, N] = op(A)[M, K] · op(B)[K, N] + beta · C, each with its row stride.
// Inside our OpenMP loops OpenBLAS (OpenMP build) runs it on the calling thread.
#pragma once
#include <cblas.h>

#include <cstdint>
#include <type_traits>

namespace ag::cpu {

template <class T>
void tile_gemm(bool trans_a, bool trans_b, int64_t M, int64_t N, int64_t K, const T* a, int64_t lda, const T* b,
               int64_t ldb, T beta, T* c, int64_t ldc) {
  const CBLAS_TRANSPOSE ta = trans_a ? CblasTrans : CblasNoTrans, tb = trans_b ? CblasTrans : CblasNoTrans;
  const int m = static_cast<int>(M), n = static_cast<int>(N), k = static_cast<int>(K);
  const int lda_ = static_cast<int>(lda), ldb_ = static_cast<int>(ldb), ldc_ = static_cast<int>(ldc);
  if constexpr (std::is_same_v<T, float>)
    cblas_sgemm(CblasRowMajor, ta, tb, m, n, k, 1.0f, a, lda_, b, ldb_, beta, c, ldc_);
  else
    cblas_dgemm(CblasRowMajor, ta, tb, m, n, k, 1.0, a, lda_, b, ldb_, beta, c, ldc_);
}

}  // namespace ag::cpu
