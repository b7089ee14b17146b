// Optimizer updates: one thread per element, in place, over the per-element
// updates of core/optimizer_math.h that the CPU kernels use too (the kernels:
// cuda/optimizer_kernels.cuh).
#include <cmath>

#include "cuda/cuda.h"
#include "cuda/launch.cuh"
#include "cuda/optimizer_kernels.cuh"
#include "cuda/reduce_kernels.cuh"

namespace ag::cuda {

void adam_step(Tensor& param, const Tensor& grad, Tensor& m, Tensor& v, const kernel::AdamHyper& hyper) {
  visit_floating(param.dtype(), "adam_step", [&](auto zero) {
    using T = decltype(zero);
    adam_step_launch(Gpu(), param.numel(), ptr<T>(param), ptr<const T>(grad), ptr<T>(m), ptr<T>(v), hyper);
  });
}

void sgd_step(Tensor& param, const Tensor& grad, Tensor& momentum_buffer, const kernel::SgdHyper& hyper) {
  visit_floating(param.dtype(), "sgd_step", [&](auto zero) {
    using T = decltype(zero);
    sgd_step_launch(Gpu(), param.numel(), ptr<T>(param), ptr<const T>(grad),
                    momentum_buffer.defined() ? ptr<T>(momentum_buffer) : nullptr, hyper);
  });
}

void count_applied_step(Tensor& applied_steps, const double* skip_unless_finite) {
  count_applied_step_launch(Gpu(), ptr<int64_t>(applied_steps), skip_unless_finite);
}

// Σ x² in double on the device, in sum_all_launch's fixed order (cuda/reduce_kernels.cuh); it stays there.
void sum_of_squares(const Tensor& x, Tensor& total) {
  visit_floating(x.dtype(), "sum_of_squares", [&](auto zero) {
    using T = decltype(zero);
    Gpu gpu;
    sum_all_launch(gpu, x.numel(), Square<T>{ptr<const T>(x)}, ptr<double>(total));
  });
}

void clip_by_norm(Tensor& x, const Tensor& sum_of_squares, double max_norm) {
  visit_floating(x.dtype(), "clip_by_norm", [&](auto zero) {
    using T = decltype(zero);
    clip_by_norm_launch(Gpu(), x.numel(), ptr<T>(x), ptr<const double>(sum_of_squares), max_norm);
  });
}

}  // namespace ag::cuda
