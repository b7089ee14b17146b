// cuBLAS, opened with dlopen on first use instead of linked. Linking it makes
// the dynamic loader map and relocate libcublasLt (540 MB) in every process at
// start-up: about 200 MB resident before main(), a CPU-only run included (a
// `char_lm train` at block size 4096 peaked at 297 MB with flash attention, of
// which 206 MB were cuBLAS). Opened on demand, only a process that uses a CUDA
// device pays for it. The table holds the few entry points attograd calls, typed
// from cublas_v2.h's own declarations so a signature change fails to compile.
#pragma once
#include <cublasLt.h>
#include <cublas_v2.h>

namespace ag::cuda {

struct CublasLibrary {
  decltype(&cublasCreate_v2) create;
  decltype(&cublasSetStream_v2) set_stream;
  decltype(&cublasSetMathMode) set_math_mode;
  decltype(&cublasSetWorkspace_v2) set_workspace;
  decltype(&cublasSgemmStridedBatched) sgemm_strided_batched;
  decltype(&cublasDgemmStridedBatched) dgemm_strided_batched;
  // The bf16 GEMMs (cuda/matmul.cu). C++ overloads the name (a legacy inline
  // taking a cudaDataType compute type), so the exported one is picked by its type.
  decltype(static_cast<cublasStatus_t (*)(cublasHandle_t, cublasOperation_t, cublasOperation_t, int, int, int,
                                          const void*, const void*, cudaDataType, int, long long, const void*,
                                          cudaDataType, int, long long, const void*, void*, cudaDataType, int,
                                          long long, int, cublasComputeType_t, cublasGemmAlgo_t)>(
      &cublasGemmStridedBatchedEx)) gemm_strided_batched_ex;
  decltype(&cublasGetStatusString) status_string;
};

// Opens libcublas.so.<the major version built against> on the first call; throws
// ag::Error naming the library and dlerror()'s reason when it can't be opened.
const CublasLibrary& cublas();

// cuBLASLt, for the GEMMs with fused epilogues (cuda/mlp.cu: bias + GELU forward,
// GELU' + bias gradient backward), opened the same way: libcublasLt.so.<major>, on
// first use. Unlike cuBLAS it is optional: null when it cannot be opened or lacks
// an entry point, and its callers then run their unfused kernels. `handle` is the
// process's one cublasLtHandle_t (cuBLASLt handles hold no stream: each matmul names one).
struct CublasLtLibrary {
  decltype(&cublasLtCreate) create;
  decltype(&cublasLtMatmulDescCreate) desc_create;
  decltype(&cublasLtMatmulDescDestroy) desc_destroy;
  decltype(&cublasLtMatmulDescSetAttribute) desc_set;
  decltype(&cublasLtMatrixLayoutCreate) layout_create;
  decltype(&cublasLtMatrixLayoutDestroy) layout_destroy;
  decltype(&cublasLtMatmulPreferenceCreate) preference_create;
  decltype(&cublasLtMatmulPreferenceDestroy) preference_destroy;
  decltype(&cublasLtMatmulPreferenceSetAttribute) preference_set;
  decltype(&cublasLtMatmulAlgoGetHeuristic) heuristic;
  decltype(&cublasLtMatmul) matmul;
  cublasLtHandle_t handle;
};
const CublasLtLibrary* cublas_lt();

}  // namespace ag::cuda
