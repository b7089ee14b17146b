// The per-element optimizer updates, written once for the CPU loops
// (core/cpu/optimizer.cpp) and the CUDA kernels (cuda/optimizer.cu). Each is a
// small functor: built on the host from the step's hyperparameters, then called
// for every element index i. The arithmetic is torch.optim's single-tensor code's,
// so float64 runs agree with PyTorch to rounding; not rounding for rounding:
// torch >= 2.0 forms Adam's m by lerp, m + (1 − β1)(g − m), here β1·m + (1 − β1)·g.
#pragma once
#include <cmath>

#include "core/kernel_args.h"  // AdamHyper, SgdHyper
#include "core/random.h"  // AG_HOST_DEVICE

namespace ag::math {

// clip_grad_norm's factor: max_norm / (norm + 1e-6), at most 1 (so gradients
// under the threshold are left bit for bit). The 1e-6 keeps a zero norm finite.
AG_HOST_DEVICE inline double clip_coefficient(double sum_of_squares, double max_norm) {
  const double coef = max_norm / (std::sqrt(sum_of_squares) + 1e-6);
  return coef < 1.0 ? coef : 1.0;
}

// Adam's per-step scalars at step t, in double, as torch computes them in Python:
// lr / (1 − β1^t) and √(1 − β2^t). Computed once per step (the CPU) or per block
// (CUDA, which reads t where the count lives: kernel::AdamHyper::applied_steps).
struct AdamStep {
  double step_size, bias_correction2_sqrt;
};
AG_HOST_DEVICE inline AdamStep adam_step_at(const kernel::AdamHyper& h, int64_t t) {
  return {h.rate() / (1.0 - std::pow(h.beta1, static_cast<double>(t))),
          std::sqrt(1.0 - std::pow(h.beta2, static_cast<double>(t)))};
}

// Adam / AdamW (contract in core/kernel_args.h) at the step whose scalars are `at`.
template <class T> struct AdamUpdate {
  T *p, *m, *v;
  const T* g;
  T step_size, bias_correction2_sqrt, beta1, one_minus_beta1, beta2, one_minus_beta2, eps;
  T shrink, l2;  // AdamW shrinks the param before the update; Adam adds wd·p to the gradient

  AG_HOST_DEVICE AdamUpdate(T* param, const T* grad, T* exp_avg, T* exp_avg_sq, const kernel::AdamHyper& h, AdamStep at)
      : p(param), m(exp_avg), v(exp_avg_sq), g(grad),
        step_size(static_cast<T>(at.step_size)),
        bias_correction2_sqrt(static_cast<T>(at.bias_correction2_sqrt)),
        beta1(static_cast<T>(h.beta1)), one_minus_beta1(static_cast<T>(1.0 - h.beta1)),
        beta2(static_cast<T>(h.beta2)), one_minus_beta2(static_cast<T>(1.0 - h.beta2)), eps(static_cast<T>(h.eps)),
        shrink(static_cast<T>(h.decoupled ? 1.0 - h.rate() * h.weight_decay : 1.0)),
        l2(static_cast<T>(h.decoupled ? 0.0 : h.weight_decay)) {}

  AG_HOST_DEVICE void operator()(int64_t i) const { apply(p[i], g[i], m[i], v[i]); }

  // One element. The CPU loop calls this on its own restrict pointers: reading
  // p, g, m, v through the struct kept the compiler from seeing unit strides.
  AG_HOST_DEVICE void apply(T& p_i, T g_i, T& m_i, T& v_i) const {
    const T gi = g_i + l2 * p_i;
    const T pi = p_i * shrink;
    m_i = m_i * beta1 + one_minus_beta1 * gi;
    v_i = v_i * beta2 + one_minus_beta2 * (gi * gi);
    const T denom = std::sqrt(v_i) / bias_correction2_sqrt + eps;
    p_i = pi - step_size * (m_i / denom);
  }
};

// SGD with optional momentum and Nesterov (contract in core/kernel_args.h), at the
// first step or a later one (read from the count where it lives: the CPU once, CUDA
// per thread), at the learning rate `rate` (h.rate(), read where it lives likewise).
// Without momentum there is no buffer (as in torch): b is null and never read.
template <class T> struct SgdUpdate {
  T* p;
  const T* g;
  T* b;
  T lr, weight_decay, mu, one_minus_dampening;
  bool nesterov, first_step;

  AG_HOST_DEVICE SgdUpdate(T* param, const T* grad, T* momentum_buffer, const kernel::SgdHyper& h, bool first, double rate)
      : p(param), g(grad), b(h.momentum != 0.0 ? momentum_buffer : nullptr), lr(static_cast<T>(rate)),
        weight_decay(static_cast<T>(h.weight_decay)), mu(static_cast<T>(h.momentum)),
        one_minus_dampening(static_cast<T>(1.0 - h.dampening)), nesterov(h.nesterov), first_step(first) {}

  AG_HOST_DEVICE void operator()(int64_t i) const {
    T unused = 0;
    apply(p[i], g[i], b ? b[i] : unused);
  }

  // One element (b_i is read only with momentum).
  AG_HOST_DEVICE void apply(T& p_i, T g_i, T& b_i) const {
    T d = g_i + weight_decay * p_i;
    if (b) {
      // The first step copies the gradient into the buffer, undamped.
      b_i = first_step ? d : b_i * mu + one_minus_dampening * d;
      d = nesterov ? d + mu * b_i : b_i;
    }
    p_i = p_i - lr * d;
  }
};

}  // namespace ag::math
