// Where a thread is in a flat grid, for the grid-stride loops (cuda/launch.cuh's
// for_each_index, and kernels that loop alike). Device code a host build compiles too
// (tests/cuda_on_host.h).
#pragma once
#include <cstdint>

namespace ag::cuda {

__device__ inline int64_t thread_index() { return blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; }
__device__ inline int64_t thread_count() { return gridDim.x * static_cast<int64_t>(blockDim.x); }

}  // namespace ag::cuda
