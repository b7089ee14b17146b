// The chunked decayed product's launches: the three kernels of cuda/chunked_kernels.cuh
// (whose header gives the algorithm, the blocks and the shared memory) with their scratch.
#pragma once
#include <algorithm>

#include "cuda/chunked_kernels.cuh"
#include "cuda/launch.cuh"

namespace ag::cuda::chunked {

// kernel<<<blocks, kBlockThreads, bytes>>>(args...), the block's shared-memory limit raised past 48 KB when needed.
template <class... Params, class... Args>
void launch_blocks(void (*kernel)(Params...), int64_t tasks, size_t bytes, Args... args) {
  if (bytes > 48 * 1024)
    AG_CUDA_CHECK(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, static_cast<int>(bytes)));
  const unsigned blocks = grid_for(tasks);
  kernel<<<blocks, kBlockThreads, bytes, current_stream()>>>(args...);
  AG_CUDA_CHECK_LAUNCH();
}

// The whole product: Out through p, `state` [problems, r, e] read and overwritten when plan.from_state.
template <class T, class P> void product(const P& p, const Plan& plan, DType dtype, T* state) {
  if (plan.problems == 0 || plan.T == 0) return;
  const Tensor states = Tensor::empty({plan.problems, plan.chunks, plan.r, plan.e}, dtype, Device::CUDA);
  const Tensor decays = Tensor::empty({plan.problems, plan.chunks}, dtype, Device::CUDA);
  const int64_t tasks = plan.problems * plan.chunks;
  launch_blocks(chunk_states_kernel<T, P>, tasks, (4 * kChunk + 2 * kChunk * (kTile + 1)) * sizeof(T), p, plan,
                ptr<T>(states), ptr<T>(decays));
  for_each_index(plan.problems * plan.r * plan.e,
                 StatePassing<T>{ptr<T>(states), ptr<const T>(decays), plan.from_state ? state : nullptr, plan});
  launch_blocks(chunk_outputs_kernel<T, P>, tasks,
                (4 * kChunk + kChunk * (kChunk + 1) + 2 * kChunk * (kSlice + 1)) * sizeof(T), p, plan,
                ptr<const T>(states));
}

}  // namespace ag::cuda::chunked
