// gemm through cuBLAS: the one GEMM wrapper. Reference: core/cpu/matmul.cpp.
//
// Row-major to column-major. cuBLAS reads matrices column-major; attograd stores
// them row-major. A row-major [R, C] matrix is, byte for byte, the column-major
// [C, R] matrix: its transpose. So the row-major product C = op(A)·op(B) is, in
// cuBLAS's eyes, the column-major product
//     Cᵀ = op(B)ᵀ · op(A)ᵀ        ([N, M] = [N, K] · [K, M])
// which cuBLAS computes with the operands swapped (B first), M and N swapped,
// and each operand's transpose flag and leading dimension unchanged: B stored
// [K, N] (trans_b false) is read as column-major [N, K] with ld = N, exactly
// op(B)ᵀ, so CUBLAS_OP_N; stored [N, K] (trans_b) it is column-major [K, N]
// with ld = K and needs CUBLAS_OP_T. Likewise for A, and C comes out as
// column-major [N, M] with ld = N, which is row-major [M, N]. No data moves.
//
// Precision (cuda/context.h, set_gemm_precision): a float32 GEMM runs in FP32 or
// TF32 through cublasSgemmStridedBatched (the handle's math mode), or in BF16:
// A and B are rounded to bfloat16 into scratch copies with the same layout (so
// leading dimensions and strides carry over unchanged), and
// cublasGemmStridedBatchedEx multiplies them with float32 accumulation into the
// float32 C, alpha and beta in float32 — llm.c's and PyTorch autocast's GEMM.
// The error bound is in docs/backprop.md, "Mixed precision".
#include <cuda_bf16.h>

#include <climits>
#include <type_traits>

#include "cuda/bf16.cuh"
#include "cuda/cublas.h"
#include "cuda/cuda.h"
#include "cuda/launch.cuh"
#include "cuda/memory_kernels.cuh"

namespace ag::cuda {

namespace {
// cuBLAS takes int dims and batch counts.
int as_int(const char* what, int64_t value) {
  AG_CHECK(value <= INT_MAX, "gemm: " << what << " = " << value << " exceeds cuBLAS's int range");
  return static_cast<int>(value);
}

// cuBLAS launches batched GEMMs with the batch on a grid dim that stops at
// 65535 on some paths, so larger batches go in chunks of this many.
constexpr int64_t kMaxBatch = 65535;

template <class T>
void strided_batched(cublasHandle_t handle, cublasOperation_t op_b, cublasOperation_t op_a, int n, int m, int k,
                     const T* alpha, const T* b, int ldb, long long stride_b, const T* a, int lda,
                     long long stride_a, const T* beta, T* c, int ldc, long long stride_c, int batch) {
  if constexpr (std::is_same_v<T, float>)
    AG_CUBLAS_CHECK(cublas().sgemm_strided_batched(handle, op_b, op_a, n, m, k, alpha, b, ldb, stride_b, a, lda,
                                              stride_a, beta, c, ldc, stride_c, batch));
  else
    AG_CUBLAS_CHECK(cublas().dgemm_strided_batched(handle, op_b, op_a, n, m, k, alpha, b, ldb, stride_b, a, lda,
                                              stride_a, beta, c, ldc, stride_c, batch));
}
// The elements a strided batch of `count` row-major [rows, cols] matrices (row
// stride ld, batch stride `stride`) reaches from its first: the span a bf16 copy
// (cuda/bf16.cuh) takes so that it keeps the layout.
int64_t strided_span(int64_t rows, int64_t cols, int64_t ld, int64_t stride, int64_t count) {
  return (count - 1) * stride + (rows - 1) * ld + cols;
}

// The chunk's C_bᵀ = op(B_b)ᵀ op(A_b)ᵀ with A and B rounded to bf16, float32
// accumulation (CUBLAS_COMPUTE_32F) and float32 C. Its arguments are those of
// the float32 call; stored A is [M, K] ([K, M] when transposed), B [K, N] ([N, K]).
void bf16_strided_batched(cublasHandle_t handle, const GemmShape& s, cublasOperation_t op_b, cublasOperation_t op_a,
                          int n, int m, int k, const float* alpha, const float* b, int ldb, const float* a, int lda,
                          const float* beta, float* c, int ldc, int count) {
  const Bf16Span a16(a, strided_span(s.trans_a ? s.K : s.M, s.trans_a ? s.M : s.K, lda, s.a_batch_stride, count));
  const Bf16Span b16(b, strided_span(s.trans_b ? s.N : s.K, s.trans_b ? s.K : s.N, ldb, s.b_batch_stride, count));
  a16.round();
  b16.round();
  AG_CUBLAS_CHECK(cublas().gemm_strided_batched_ex(handle, op_b, op_a, n, m, k, alpha, b16.data(), CUDA_R_16BF, ldb,
                                                   s.b_batch_stride, a16.data(), CUDA_R_16BF, lda, s.a_batch_stride,
                                                   beta, c, CUDA_R_32F, ldc, s.c_batch_stride, count,
                                                   CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT));
}
}  // namespace

void gemm(const GemmShape& s, const Tensor& A, const Tensor& B, Tensor& C) {
  if (s.groups > 1) {
    GemmShape whole = s;  // groups that continue the batch's strides are one longer batch
    whole.groups = 1;
    whole.batch = s.groups * s.batch;
    if (s.a_group_stride == s.batch * s.a_batch_stride && s.b_group_stride == s.batch * s.b_batch_stride &&
        s.c_group_stride == s.batch * s.c_batch_stride)
      return cuda::gemm(whole, A, B, C);
    if (s.batch > 0 && s.groups > s.batch) return cuda::gemm(s.levels_swapped(), A, B, C);  // the fewer calls
    for (int64_t g = 0; g < s.groups; ++g) {  // else one strided batch per group
      GemmShape group = s;
      group.groups = 1;
      group.a_offset += g * s.a_group_stride;
      group.b_offset += g * s.b_group_stride;
      group.c_offset += g * s.c_group_stride;
      cuda::gemm(group, A, B, C);
    }
    return;
  }
  if (s.batch == 0 || s.M == 0 || s.N == 0) return;
  const int M = as_int("M", s.M), N = as_int("N", s.N), K = as_int("K", s.K);
  // Leading dimensions of the stored row-major matrices, as the CPU passes them.
  const int lda = as_int("lda", s.row_stride_a());
  const int ldb = as_int("ldb", s.row_stride_b());
  const int ldc = as_int("ldc", s.row_stride_c());
  const cublasOperation_t op_a = s.trans_a ? CUBLAS_OP_T : CUBLAS_OP_N;
  const cublasOperation_t op_b = s.trans_b ? CUBLAS_OP_T : CUBLAS_OP_N;
  const auto handle = static_cast<cublasHandle_t>(cublas_handle());
  visit_floating(A.dtype(), "gemm", [&](auto zero) {
    using T = decltype(zero);
    const T alpha = static_cast<T>(s.alpha), beta = static_cast<T>(s.beta);
    if (s.K == 0) {
      // cuBLAS has been seen to leave C untouched for k = 0 (cuda/memory_kernels.cuh)
      scale_batches_launch(Gpu(), ptr<T>(C) + s.c_offset, s.batch, s.M, s.N, ldc, s.c_batch_stride, beta);
      return;
    }
    for (int64_t first = 0; first < s.batch; first += kMaxBatch) {
      const int count = static_cast<int>(std::min(kMaxBatch, s.batch - first));
      const T* a = ptr<const T>(A) + s.a_offset + first * s.a_batch_stride;
      const T* b = ptr<const T>(B) + s.b_offset + first * s.b_batch_stride;
      T* c = ptr<T>(C) + s.c_offset + first * s.c_batch_stride;
      // C_bᵀ = op(B_b)ᵀ op(A_b)ᵀ: B first, N before M (see the top of the file).
      if constexpr (std::is_same_v<T, float>) {
        if (gemm_precision() == Precision::BF16) {
          bf16_strided_batched(handle, s, op_b, op_a, N, M, K, &alpha, b, ldb, a, lda, &beta, c, ldc, count);
          continue;
        }
      }
      strided_batched<T>(handle, op_b, op_a, N, M, K, &alpha, b, ldb, s.b_batch_stride, a, lda, s.a_batch_stride,
                         &beta, c, ldc, s.c_batch_stride, count);
    }
  });
}

}  // namespace ag::cuda
