// cuda/context.h for builds without CUDA: no device, and a clear error for
// anything that needs one.
#include "core/error.h"
#include "cuda/context.h"

namespace ag::cuda {

namespace {
[[noreturn]] void built_without_cuda(const char* what) {
  throw Error(std::string(what) + ": attograd was built without CUDA (nvcc was not found at configure time)");
}
}  // namespace

bool available() { return false; }
std::string describe_device() { return "no CUDA device: built without CUDA"; }
void* allocate(size_t) { built_without_cuda("cuda::allocate"); }
void deallocate(void*, size_t) {}
void copy_host_to_device(void*, const void*, size_t) { built_without_cuda("cuda::copy_host_to_device"); }
void copy_device_to_host(void*, const void*, size_t) { built_without_cuda("cuda::copy_device_to_host"); }
void* cublas_handle() { built_without_cuda("cuda::cublas_handle"); }

}  // namespace ag::cuda
