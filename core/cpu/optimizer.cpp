// Optimizer-update CPU kernels: one flat, in-place loop per parameter tensor.
// The arithmetic follows torch.optim's single-tensor code line by line (see the
// contracts in core/dispatch.h), so float64 runs agree with PyTorch to rounding.
#include <cmath>
#include <initializer_list>

#include "core/cpu/cpu.h"
#include "core/cpu/loops.h"

namespace ag::cpu {

namespace {
// Every tensor of one update holds the same number of elements as the param.
void check_numel(const char* kernel, const Tensor& param, std::initializer_list<const Tensor*> others) {
  for (const Tensor* t : others)
    AG_CHECK(t->numel() == param.numel(), kernel << ": param " << describe(param) << " and "
                                                 << describe(*t) << " differ in size");
}
}  // namespace

void adam_step(Tensor& param, const Tensor& grad, Tensor& m, Tensor& v, const kernel::AdamHyper& hyper) {
  check_numel("adam_step", param, {&grad, &m, &v});
  AG_CHECK(hyper.step >= 1, "adam_step: step must be >= 1, got " << hyper.step);
  visit_floating(param.dtype(), "adam_step", [&](auto zero) {
    using T = decltype(zero);
    // The per-step scalars are computed once, in double, as torch computes them in Python.
    const double t = static_cast<double>(hyper.step);
    const double bias_correction1 = 1.0 - std::pow(hyper.beta1, t);
    const double bias_correction2 = 1.0 - std::pow(hyper.beta2, t);
    const T step_size = static_cast<T>(hyper.lr / bias_correction1);
    const T bias_correction2_sqrt = static_cast<T>(std::sqrt(bias_correction2));
    const T beta1 = static_cast<T>(hyper.beta1), one_minus_beta1 = static_cast<T>(1.0 - hyper.beta1);
    const T beta2 = static_cast<T>(hyper.beta2), one_minus_beta2 = static_cast<T>(1.0 - hyper.beta2);
    const T eps = static_cast<T>(hyper.eps);
    // AdamW shrinks the param before the update; Adam adds wd·p to the gradient.
    const T shrink = static_cast<T>(hyper.decoupled ? 1.0 - hyper.lr * hyper.weight_decay : 1.0);
    const T l2 = static_cast<T>(hyper.decoupled ? 0.0 : hyper.weight_decay);

    T* p = param.data<T>();
    const T* g = grad.data<T>();
    T* pm = m.data<T>();
    T* pv = v.data<T>();
    const int64_t n = param.numel();
#pragma omp parallel for simd schedule(static) if (n > kParallelGrain)
    for (int64_t i = 0; i < n; ++i) {
      const T gi = g[i] + l2 * p[i];
      const T pi = p[i] * shrink;
      pm[i] = pm[i] * beta1 + one_minus_beta1 * gi;
      pv[i] = pv[i] * beta2 + one_minus_beta2 * (gi * gi);
      const T denom = std::sqrt(pv[i]) / bias_correction2_sqrt + eps;
      p[i] = pi - step_size * (pm[i] / denom);
    }
  });
}

void sgd_step(Tensor& param, const Tensor& grad, Tensor& momentum_buffer, const kernel::SgdHyper& hyper) {
  // With momentum 0 there is no buffer (as in torch): the argument is never read.
  const bool use_momentum = hyper.momentum != 0.0;
  if (use_momentum) check_numel("sgd_step", param, {&grad, &momentum_buffer});
  else check_numel("sgd_step", param, {&grad});
  visit_floating(param.dtype(), "sgd_step", [&](auto zero) {
    using T = decltype(zero);
    const T lr = static_cast<T>(hyper.lr), weight_decay = static_cast<T>(hyper.weight_decay);
    const T mu = static_cast<T>(hyper.momentum), one_minus_dampening = static_cast<T>(1.0 - hyper.dampening);
    const bool nesterov = hyper.nesterov, first_step = hyper.first_step;

    T* p = param.data<T>();
    const T* g = grad.data<T>();
    T* b = use_momentum ? momentum_buffer.data<T>() : nullptr;
    const int64_t n = param.numel();
#pragma omp parallel for simd schedule(static) if (n > kParallelGrain)
    for (int64_t i = 0; i < n; ++i) {
      T d = g[i] + weight_decay * p[i];
      if (use_momentum) {
        // The first step copies the gradient into the buffer, undamped.
        b[i] = first_step ? d : b[i] * mu + one_minus_dampening * d;
        d = nesterov ? d + mu * b[i] : b[i];
      }
      p[i] = p[i] - lr * d;
    }
  });
}

double sum_of_squares(const Tensor& x) {
  return visit_floating(x.dtype(), "sum_of_squares", [&](auto zero) {
    using T = decltype(zero);
    const T* p = x.data<T>();
    const int64_t n = x.numel();
    // In double: a float32 sum over millions of squares would lose digits.
    double total = 0.0;
#pragma omp parallel for simd schedule(static) reduction(+ : total) if (n > kParallelGrain)
    for (int64_t i = 0; i < n; ++i) total += static_cast<double>(p[i]) * static_cast<double>(p[i]);
    return total;
  });
}

void scale_inplace(Tensor& x, double factor) {
  visit_floating(x.dtype(), "scale_inplace", [&](auto zero) {
    using T = decltype(zero);
    T* p = x.data<T>();
    const T f = static_cast<T>(factor);
    const int64_t n = x.numel();
#pragma omp parallel for simd schedule(static) if (n > kParallelGrain)
    for (int64_t i = 0; i < n; ++i) p[i] *= f;
  });
}

}  // namespace ag::cpu
