// Optimizer updates: one thread per element, in place, over the per-element
// updates of core/optimizer_math.h that the CPU kernels use too.
#include <cmath>

#include "core/optimizer_math.h"
#include "cuda/cuda.h"
#include "cuda/launch.cuh"

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
}  // namespace

void adam_step(Tensor& param, const Tensor& grad, Tensor& m, Tensor& v, const kernel::AdamHyper& hyper) {
  const int64_t n = param.numel();
  if (n == 0) return;
  visit_floating(param.dtype(), "adam_step", [&](auto zero) {
    using T = decltype(zero);
    adam_kernel<T><<<blocks_for(n), kThreads, 0, current_stream()>>>(n, ptr<T>(param), ptr<const T>(grad), ptr<T>(m),
                                                                       ptr<T>(v), hyper);
    AG_CUDA_CHECK_LAUNCH();
  });
}

void sgd_step(Tensor& param, const Tensor& grad, Tensor& momentum_buffer, const kernel::SgdHyper& hyper) {
  const bool use_momentum = hyper.momentum != 0.0;
  visit_floating(param.dtype(), "sgd_step", [&](auto zero) {
    using T = decltype(zero);
    const math::SgdUpdate<T> update(ptr<T>(param), ptr<const T>(grad), use_momentum ? ptr<T>(momentum_buffer) : nullptr,
                                    hyper, false, hyper.lr);
    for_each_index(param.numel(), unless_non_finite(SgdAtCount<T>{update, hyper.applied_steps, hyper.lr_on_device},
                                                    hyper.skip_unless_finite));
  });
}

void count_applied_step(Tensor& applied_steps, const double* skip_unless_finite) {
  count_applied_step_kernel<<<1, 1, 0, current_stream()>>>(ptr<int64_t>(applied_steps), skip_unless_finite);
  AG_CUDA_CHECK_LAUNCH();
}

// Σ x² in double on the device, in sum_all's fixed order; it stays there.
void sum_of_squares(const Tensor& x, Tensor& total) {
  visit_floating(x.dtype(), "sum_of_squares", [&](auto zero) {
    using T = decltype(zero);
    sum_all(x.numel(), Square<T>{ptr<const T>(x)}, ptr<double>(total));
  });
}

void clip_by_norm(Tensor& x, const Tensor& sum_of_squares, double max_norm) {
  visit_floating(x.dtype(), "clip_by_norm", [&](auto zero) {
    using T = decltype(zero);
    for_each_index(x.numel(), ClipByNorm<T>{ptr<T>(x), ptr<const double>(sum_of_squares), max_norm});
  });
}

}  // namespace ag::cuda
