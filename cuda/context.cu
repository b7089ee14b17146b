#include "cuda/check.h"
#include "cuda/context.h"

namespace ag::cuda {

bool available() {
  int count = 0;
  return cudaGetDeviceCount(&count) == cudaSuccess && count > 0;
}

std::string describe_device() {
  int count = 0;
  const cudaError_t status = cudaGetDeviceCount(&count);
  if (status != cudaSuccess) return std::string("no CUDA device: ") + cudaGetErrorString(status);
  if (count == 0) return "no CUDA device";
  cudaDeviceProp prop{};
  AG_CUDA_CHECK(cudaGetDeviceProperties(&prop, 0));
  return std::string(prop.name) + " (sm_" + std::to_string(prop.major) + std::to_string(prop.minor) +
         ", " + std::to_string(prop.totalGlobalMem >> 30) + " GiB)";
}

void* allocate(size_t nbytes) {
  void* ptr = nullptr;
  AG_CUDA_CHECK(cudaMalloc(&ptr, nbytes));
  return ptr;
}

void deallocate(void* ptr, size_t) { cudaFree(ptr); }  // destructors must not throw

void copy_host_to_device(void* dst, const void* src, size_t nbytes) {
  AG_CUDA_CHECK(cudaMemcpy(dst, src, nbytes, cudaMemcpyHostToDevice));
}

void copy_device_to_host(void* dst, const void* src, size_t nbytes) {
  AG_CUDA_CHECK(cudaMemcpy(dst, src, nbytes, cudaMemcpyDeviceToHost));
}

void* cublas_handle() {
  static cublasHandle_t handle = [] {
    cublasHandle_t h = nullptr;
    AG_CUBLAS_CHECK(cublasCreate(&h));
    return h;
  }();
  return handle;
}

}  // namespace ag::cuda
