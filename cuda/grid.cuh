// Where a thread is in a flat grid, for the grid-stride loops (cuda/launch.cuh's
// for_each_index, and kernels that loop alike), and the grids the launches choose. Code a host
// build compiles too (tests/cuda_on_host.h).
#pragma once
#include <algorithm>
#include <cstdint>

namespace ag::cuda {

constexpr int kThreads = 256;            // threads per block for flat loops
constexpr int64_t kMaxBlocks = 1 << 16;  // grid cap; grid-stride loops do the rest

// Blocks for `tasks` block-sized tasks: one each up to the cap, the kernel's grid-stride loop past it.
inline unsigned grid_for(int64_t tasks) { return static_cast<unsigned>(std::min<int64_t>(tasks, kMaxBlocks)); }

inline unsigned blocks_for(int64_t n, int threads = kThreads) { return grid_for((n + threads - 1) / threads); }

// Threads for one block per row of `cols` elements: a whole number of warps
// (block_reduce needs it), 32 to 256. Longer rows loop.
inline int row_threads(int64_t cols) { return static_cast<int>(std::clamp<int64_t>((cols + 31) / 32 * 32, 32, 256)); }

__device__ inline int64_t thread_index() { return blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; }
__device__ inline int64_t thread_count() { return gridDim.x * static_cast<int64_t>(blockDim.x); }

}  // namespace ag::cuda
