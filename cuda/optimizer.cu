// Optimizer updates: one thread per element, in place, with the CPU kernel's
// arithmetic line by line (the per-step scalars computed once on the host, in
// double, as torch does). Reference: core/cpu/optimizer.cpp.
#include <cmath>
#include <initializer_list>

#include "cuda/cuda.h"
#include "cuda/launch.cuh"

namespace ag::cuda {

namespace {
// Every tensor of one update holds the same number of elements as the param.
void check_numel(const char* kernel, const Tensor& param, std::initializer_list<const Tensor*> others) {
  for (const Tensor* t : others)
    AG_CHECK(t->numel() == param.numel(), kernel << ": param " << describe(param) << " and " << describe(*t)
                                                 << " differ in size");
}

template <class T> struct AdamStep {
  T *p, *m, *v;
  const T* g;
  T step_size, bias_correction2_sqrt, beta1, one_minus_beta1, beta2, one_minus_beta2, eps, shrink, l2;
  __device__ void operator()(int64_t i) const {
    const T gi = g[i] + l2 * p[i];
    const T pi = p[i] * shrink;
    m[i] = m[i] * beta1 + one_minus_beta1 * gi;
    v[i] = v[i] * beta2 + one_minus_beta2 * (gi * gi);
    const T denom = std::sqrt(v[i]) / bias_correction2_sqrt + eps;
    p[i] = pi - step_size * (m[i] / denom);
  }
};

template <class T> struct SgdStep {
  T* p;
  const T* g;
  T* b;  // the momentum buffer; unused (and possibly aliasing p) without momentum
  T lr, weight_decay, mu, one_minus_dampening;
  bool use_momentum, nesterov, first_step;
  __device__ void operator()(int64_t i) const {
    T d = g[i] + weight_decay * p[i];
    if (use_momentum) {
      b[i] = first_step ? d : b[i] * mu + one_minus_dampening * d;
      d = nesterov ? d + mu * b[i] : b[i];
    }
    p[i] = p[i] - lr * d;
  }
};

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
  check_numel("adam_step", param, {&grad, &m, &v});
  AG_CHECK(hyper.step >= 1, "adam_step: step must be >= 1, got " << hyper.step);
  visit_floating(param.dtype(), "adam_step", [&](auto zero) {
    using T = decltype(zero);
    const double t = static_cast<double>(hyper.step);
    const double bias_correction1 = 1.0 - std::pow(hyper.beta1, t);
    const double bias_correction2 = 1.0 - std::pow(hyper.beta2, t);
    AdamStep<T> f{};
    f.p = ptr<T>(param);
    f.m = ptr<T>(m);
    f.v = ptr<T>(v);
    f.g = ptr<const T>(grad);
    f.step_size = static_cast<T>(hyper.lr / bias_correction1);
    f.bias_correction2_sqrt = static_cast<T>(std::sqrt(bias_correction2));
    f.beta1 = static_cast<T>(hyper.beta1);
    f.one_minus_beta1 = static_cast<T>(1.0 - hyper.beta1);
    f.beta2 = static_cast<T>(hyper.beta2);
    f.one_minus_beta2 = static_cast<T>(1.0 - hyper.beta2);
    f.eps = static_cast<T>(hyper.eps);
    // AdamW shrinks the param before the update; Adam adds wd·p to the gradient.
    f.shrink = static_cast<T>(hyper.decoupled ? 1.0 - hyper.lr * hyper.weight_decay : 1.0);
    f.l2 = static_cast<T>(hyper.decoupled ? 0.0 : hyper.weight_decay);
    for_each_index(param.numel(), f);
  });
}

void sgd_step(Tensor& param, const Tensor& grad, Tensor& momentum_buffer, const kernel::SgdHyper& hyper) {
  const bool use_momentum = hyper.momentum != 0.0;
  if (use_momentum) check_numel("sgd_step", param, {&grad, &momentum_buffer});
  else check_numel("sgd_step", param, {&grad});
  visit_floating(param.dtype(), "sgd_step", [&](auto zero) {
    using T = decltype(zero);
    SgdStep<T> f{};
    f.p = ptr<T>(param);
    f.g = ptr<const T>(grad);
    f.b = use_momentum ? ptr<T>(momentum_buffer) : nullptr;
    f.lr = static_cast<T>(hyper.lr);
    f.weight_decay = static_cast<T>(hyper.weight_decay);
    f.mu = static_cast<T>(hyper.momentum);
    f.one_minus_dampening = static_cast<T>(1.0 - hyper.dampening);
    f.use_momentum = use_momentum;
    f.nesterov = hyper.nesterov;
    f.first_step = hyper.first_step;
    for_each_index(param.numel(), f);
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
