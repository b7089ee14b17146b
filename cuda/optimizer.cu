// Optimizer updates: one thread per element, in place, over the per-element
// updates of core/optimizer_math.h that the CPU kernels use too.
#include <cmath>

#include "core/optimizer_math.h"
#include "cuda/cuda.h"
#include "cuda/launch.cuh"

namespace ag::cuda {

namespace {

template <class T> struct Square {
  const T* x;
  __device__ double operator()(int64_t i) const { return static_cast<double>(x[i]) * static_cast<double>(x[i]); }
};

template <class T> struct Scale {
  T* x;
  T factor;
  __device__ void operator()(int64_t i) const { x[i] *= factor; }
};
}  // namespace

void adam_step(Tensor& param, const Tensor& grad, Tensor& m, Tensor& v, const kernel::AdamHyper& hyper) {
  visit_floating(param.dtype(), "adam_step", [&](auto zero) {
    using T = decltype(zero);
    for_each_index(param.numel(), math::AdamUpdate<T>(ptr<T>(param), ptr<const T>(grad), ptr<T>(m), ptr<T>(v), hyper));
  });
}

void sgd_step(Tensor& param, const Tensor& grad, Tensor& momentum_buffer, const kernel::SgdHyper& hyper) {
  const bool use_momentum = hyper.momentum != 0.0;
  visit_floating(param.dtype(), "sgd_step", [&](auto zero) {
    using T = decltype(zero);
    for_each_index(param.numel(), math::SgdUpdate<T>(ptr<T>(param), ptr<const T>(grad),
                                                     use_momentum ? ptr<T>(momentum_buffer) : nullptr, hyper));
  });
}

// Σ x² in double on the device (sum_all's fixed order), then the one number to the host.
double sum_of_squares(const Tensor& x) {
  return visit_floating(x.dtype(), "sum_of_squares", [&](auto zero) {
    using T = decltype(zero);
    const Tensor total = Tensor::empty({}, DType::Float64, Device::CUDA);
    sum_all(x.numel(), Square<T>{ptr<const T>(x)}, ptr<double>(total));
    double result = 0;
    copy_device_to_host(&result, total.raw_data(), sizeof(result));
    return result;
  });
}

void scale_inplace(Tensor& x, double factor) {
  visit_floating(x.dtype(), "scale_inplace", [&](auto zero) {
    using T = decltype(zero);
    for_each_index(x.numel(), Scale<T>{ptr<T>(x), static_cast<T>(factor)});
  });
}

}  // namespace ag::cuda
