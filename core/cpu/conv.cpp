// The causal depthwise convolution on the CPU. Sums: core/conv_math.h.
// Rows (batch entry, position) run in parallel for y and dx; dweight and dbias
// sum over the batch entries in order, so the bits do not depend on the threads.
#include <algorithm>

#include "core/cpu/cpu.h"
#include "core/cpu/loops.h"

namespace ag::cpu {

void causal_conv1d(const Tensor& x, const Tensor& weight, const Tensor& bias, Tensor& y) {
  visit_floating(x.dtype(), "causal_conv1d", [&](auto zero) {
    using T = decltype(zero);
    const int64_t B = x.size(0), T_ = x.size(1), C = x.size(2), W = weight.size(0);
    const T *in = x.data<T>(), *w = weight.data<T>(), *b = bias.defined() ? bias.data<T>() : nullptr;
    T* out = y.data<T>();
    for_rows(B * T_, C * W, [&](int64_t row) {
      const int64_t n = row / T_, t = row % T_;
      for (int64_t c = 0; c < C; ++c)
        out[row * C + c] = (b ? b[c] : T(0)) + math::causal_conv(in + n * T_ * C, w, t, c, C, W);
    });
  });
}

void causal_conv1d_backward(const Tensor& x, const Tensor& weight, const Tensor& dY, Tensor& dX, Tensor& dWeight,
                            Tensor* dBias) {
  visit_floating(x.dtype(), "causal_conv1d_backward", [&](auto zero) {
    using T = decltype(zero);
    const int64_t B = x.size(0), T_ = x.size(1), C = x.size(2), W = weight.size(0);
    const T *in = x.data<T>(), *w = weight.data<T>(), *dy = dY.data<T>();
    T *dx = dX.data<T>(), *dw = dWeight.data<T>();
    for_rows(B * T_, C * W, [&](int64_t row) {
      const int64_t n = row / T_, t = row % T_;
      for (int64_t c = 0; c < C; ++c) dx[row * C + c] = math::causal_conv_input_grad(dy + n * T_ * C, w, t, c, C, W, T_);
    });
    for_rows(W, B * T_ * C, [&](int64_t s) {
      for (int64_t c = 0; c < C; ++c) {
        T acc = 0;
        for (int64_t n = 0; n < B; ++n) acc += math::causal_conv_weight_grad(in + n * T_ * C, dy + n * T_ * C, s, c, C, W, T_);
        dw[s * C + c] = acc;
      }
    });
    if (!dBias) return;
    T* db = dBias->data<T>();
    std::fill_n(db, C, T(0));
    for (int64_t row = 0; row < B * T_; ++row)
      for (int64_t c = 0; c < C; ++c) db[c] += dy[row * C + c];
  });
}

}  // namespace ag::cpu
