// The two reductions the kernels combine values with, and block_reduce, which combines a
// block's: a header of its own, so that device code a host build compiles too
// (cuda/flash_kernels.cuh, softmax_kernels.cuh, …; tests/cuda_on_host.h) need not include
// launch.cuh.
#pragma once

namespace ag::cuda {

struct SumOp {
  template <class T> __device__ T operator()(T a, T b) const { return a + b; }
};
struct MaxOp {
  template <class T> __device__ T operator()(T a, T b) const { return a < b ? b : a; }  // std::max's order
};

// op over v of every thread in the block; every thread gets the result. All
// threads must call it, blockDim.x must be a multiple of 32, and `scratch` is
// 32 elements of shared memory, free again when it returns. Warp shuffles
// first, then every thread folds the per-warp values in warp order: a fixed
// order, so the same bits every run.
template <class T, class Op> __device__ T block_reduce(T v, Op op, T* scratch) {
  for (int offset = 16; offset > 0; offset /= 2) v = op(v, __shfl_xor_sync(0xffffffffu, v, offset));
  const int lane = threadIdx.x % 32, warp = threadIdx.x / 32, warps = blockDim.x / 32;
  if (lane == 0) scratch[warp] = v;
  __syncthreads();
  v = scratch[0];
  for (int w = 1; w < warps; ++w) v = op(v, scratch[w]);
  __syncthreads();
  return v;
}

}  // namespace ag::cuda
