// Every CUDA runtime and cuBLAS call goes through AG_CUDA_CHECK / AG_CUBLAS_CHECK,
// which turn a failure into ag::Error naming the call, file:line and the error.
#pragma once
#include <cuda_runtime.h>

#include <string>

#include "core/error.h"
#include "cuda/cublas.h"

namespace ag::cuda {

[[noreturn]] inline void throw_cuda_error(const char* call, const char* file, int line,
                                          const std::string& message) {
  throw Error(std::string(call) + " failed at " + file + ":" + std::to_string(line) + ": " + message);
}

}  // namespace ag::cuda

#define AG_CUDA_CHECK(call)                                                          \
  do {                                                                               \
    const cudaError_t ag_status_ = (call);                                           \
    if (ag_status_ != cudaSuccess)                                                   \
      ::ag::cuda::throw_cuda_error(#call, __FILE__, __LINE__,                        \
                                   cudaGetErrorString(ag_status_));                  \
  } while (0)

#define AG_CUBLAS_CHECK(call)                                                        \
  do {                                                                               \
    const cublasStatus_t ag_status_ = (call);                                        \
    if (ag_status_ != CUBLAS_STATUS_SUCCESS)                                         \
      ::ag::cuda::throw_cuda_error(#call, __FILE__, __LINE__,                        \
                                   ::ag::cuda::cublas().status_string(ag_status_));               \
  } while (0)
