// The two reductions the kernels combine values with (cuda/launch.cuh's block reductions,
// the flash kernels' warp reductions): a header of its own, so that device code a host build
// compiles too (cuda/flash_kernels.cuh) need not include launch.cuh.
#pragma once

namespace ag::cuda {

struct SumOp {
  template <class T> __device__ T operator()(T a, T b) const { return a + b; }
};
struct MaxOp {
  template <class T> __device__ T operator()(T a, T b) const { return a < b ? b : a; }  // std::max's order
};

}  // namespace ag::cuda
