// A block's dynamic shared memory: dynamic_shared_bytes(), and SharedBuffers, which hands
// it out in order to the kernels that carve several buffers out of it
// (cuda/flash_kernels.cuh, cuda/chunked_kernels.cuh; cuda/flash_mma_kernels.cuh takes the
// bytes whole). The one `extern __shared__` declaration: a host build
// (tests/test_cuda_on_host.cpp) defines ag::cuda::shared_bytes as the one buffer its blocks,
// run one at a time, share, and spells __shared__ `static` for the kernels' fixed arrays.
#pragma once
#include <cstdint>

namespace ag::cuda {

__device__ inline unsigned char* dynamic_shared_bytes() {
#ifdef __CUDACC__
  extern __shared__ __align__(16) unsigned char shared_bytes[];
#else
  extern unsigned char shared_bytes[];
#endif
  return shared_bytes;
}

template <class T> struct SharedBuffers {
  T* next;
  __device__ SharedBuffers() : next(reinterpret_cast<T*>(dynamic_shared_bytes())) {}
  __device__ T* take(int64_t count) {
    T* buffer = next;
    next += count;
    return buffer;
  }
};

}  // namespace ag::cuda
