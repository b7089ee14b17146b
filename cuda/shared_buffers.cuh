// A block's dynamic shared memory handed out in order, for the kernels that carve several
// buffers out of it (cuda/flash_kernels.cuh, cuda/chunked_kernels.cuh). A host build
// (tests/test_cuda_on_host.cpp) defines ag::cuda::shared_bytes as the one buffer its
// blocks, run one at a time, share.
#pragma once
#include <cstdint>

namespace ag::cuda {

template <class T> struct SharedBuffers {
  T* next;
  __device__ SharedBuffers() {
    extern __shared__ __align__(16) unsigned char shared_bytes[];
    next = reinterpret_cast<T*>(shared_bytes);
  }
  __device__ T* take(int64_t count) {
    T* buffer = next;
    next += count;
    return buffer;
  }
};

}  // namespace ag::cuda
