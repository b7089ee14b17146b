// The CUDA context: the one place that owns the device, its memory and the
// cuBLAS handle. Built from cuda/context.cu when nvcc is found, otherwise from
// cuda/disabled.cpp, whose functions report "no device" or throw a clear
// "built without CUDA" error, so callers never need #ifdefs.
#pragma once
#include <cstddef>
#include <string>

namespace ag::cuda {

// True when the build has CUDA and a usable device is present. Anything but a
// successful cudaGetDeviceCount with n > 0 counts as "no device" (without a
// driver it returns error 35 and leaves n unset).
bool available();
// "NVIDIA H200 (sm_90, 139 GiB)", or why there is none.
std::string describe_device();

void* allocate(size_t nbytes);
void deallocate(void* ptr, size_t nbytes);
void copy_host_to_device(void* dst, const void* src, size_t nbytes);
void copy_device_to_host(void* dst, const void* src, size_t nbytes);

// The process's cuBLAS handle (a cublasHandle_t), created on first use.
void* cublas_handle();

}  // namespace ag::cuda
