// The optimizer's kernels on CUDA and their launches on any device (cuda/optimizer.cu runs them
// on the GPU). Device code that a host build compiles too: tests/test_cuda_on_host.cpp runs them on the host against the
// CPU's kernels, a skipped step among the steps (issue 47: t does not advance).
#pragma once
#include <cmath>
#include <cstdint>

#include "core/kernel_args.h"
#include "core/optimizer_math.h"
#include "cuda/grid.cuh"

namespace ag::cuda {
namespace {

// An update that every thread skips when the guard (a device scalar) is not finite.
template <class Update> struct UnlessNonFinite {
  Update update;
  const double* guard;
  __device__ void operator()(int64_t i) const {
    if (guard && !isfinite(*guard)) return;
    update(i);
  }
};
template <class Update> UnlessNonFinite<Update> unless_non_finite(const Update& update, const double* guard) {
  return {update, guard};
}

// Adam over n elements at step t = *applied_steps + 1, read where the count lives:
// the step's scalars (two pow) once per block, in shared memory, then one element
// per thread, grid-stride.
template <class T> __global__ void adam_kernel(int64_t n, T* p, const T* g, T* m, T* v, kernel::AdamHyper hyper) {
  if (hyper.skip_unless_finite && !isfinite(*hyper.skip_unless_finite)) return;  // the same for every thread
  __shared__ math::AdamStep at;
  if (threadIdx.x == 0) at = math::adam_step_at(hyper, *hyper.applied_steps + 1);
  __syncthreads();
  const math::AdamUpdate<T> update(p, g, m, v, hyper, at);
  for (int64_t i = thread_index(); i < n; i += thread_count()) update(i);
}

// SGD's update, first step or not as the count in device memory says, at the rate
// in device memory when it lives there (loads every thread shares).
template <class T> struct SgdAtCount {
  math::SgdUpdate<T> update;
  const int64_t* applied_steps;
  const double* lr_on_device;
  __device__ void operator()(int64_t i) const {
    math::SgdUpdate<T> at = update;
    at.first_step = *applied_steps == 0;
    if (lr_on_device) at.lr = static_cast<T>(*lr_on_device);
    at(i);
  }
};

__global__ void count_applied_step_kernel(int64_t* applied_steps, const double* guard) {
  if (!guard || isfinite(*guard)) ++*applied_steps;
}

template <class T> struct Square {
  const T* x;
  __device__ double operator()(int64_t i) const { return static_cast<double>(x[i]) * static_cast<double>(x[i]); }
};

// x *= the clip coefficient, computed by every thread from the sum of squares in
// device memory (the same arithmetic as the CPU: core/optimizer_math.h).
template <class T> struct ClipByNorm {
  T* x;
  const double* sum_of_squares;
  double max_norm;
  __device__ void operator()(int64_t i) const {
    const double coef = math::clip_coefficient(*sum_of_squares, max_norm);
    if (coef < 1.0) x[i] *= static_cast<T>(coef);
  }
};

// --- the launches on a device `dev` (cuda/launch.cuh's Gpu; the host tests' Device) ----------
// Contracts: core/kernels.inc.
template <class T, class Device>
void adam_step_launch(const Device& dev, int64_t n, T* p, const T* g, T* m, T* v, const kernel::AdamHyper& hyper) {
  if (n == 0) return;
  dev.blocks(adam_kernel<T>, (n + kThreads - 1) / kThreads, kThreads, 0, n, p, g, m, v, hyper);
}

template <class T, class Device>
void sgd_step_launch(const Device& dev, int64_t n, T* p, const T* g, T* momentum_buffer,
                     const kernel::SgdHyper& hyper) {
  const math::SgdUpdate<T> update(p, g, hyper.momentum != 0.0 ? momentum_buffer : nullptr, hyper, false, hyper.lr);
  dev(n, unless_non_finite(SgdAtCount<T>{update, hyper.applied_steps, hyper.lr_on_device}, hyper.skip_unless_finite));
}

template <class Device>
void count_applied_step_launch(const Device& dev, int64_t* applied_steps, const double* guard) {
  dev.blocks(count_applied_step_kernel, 1, 1, 0, applied_steps, guard);
}

template <class T, class Device>
void clip_by_norm_launch(const Device& dev, int64_t n, T* x, const double* sum_of_squares, double max_norm) {
  dev(n, ClipByNorm<T>{x, sum_of_squares, max_norm});
}

}  // namespace
}  // namespace ag::cuda
