// The causal depthwise convolution on the CPU: the sums of core/conv_math.h
// (y and dx in the same order), taken a row of channels at a time so that the
// inner loops read contiguous channels. Rows (batch entry, position) run in
// parallel for y and dx; dweight and dbias in parallel over their taps and
// blocks of channels, each summing the rows in order, so the bits do not
// depend on the threads.
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
      const int64_t t = row % T_;
      T* y_row = out + row * C;
      std::fill_n(y_row, C, T(0));
      for (int64_t s = W - 1 - std::min(t, W - 1); s < W; ++s) {
        const T *tap = w + s * C, *x_row = in + (row - W + 1 + s) * C;
        for (int64_t c = 0; c < C; ++c) y_row[c] += tap[c] * x_row[c];
      }
      for (int64_t c = 0; c < C; ++c) y_row[c] = (b ? b[c] : T(0)) + y_row[c];
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
      const int64_t t = row % T_;
      T* dx_row = dx + row * C;
      std::fill_n(dx_row, C, T(0));
      for (int64_t s = std::max<int64_t>(0, t + W - T_); s < W; ++s) {  // the outputs t + W − 1 − s < T
        const T *tap = w + s * C, *dy_row = dy + (row + W - 1 - s) * C;
        for (int64_t c = 0; c < C; ++c) dx_row[c] += tap[c] * dy_row[c];
      }
    });
    // dweight[s, ·] and dbias (tap s = W) per block of channels, summed over
    // the batch's rows.
    constexpr int64_t kChannels = 64;
    const int64_t blocks = (C + kChannels - 1) / kChannels, taps = dBias ? W + 1 : W;
    T* db = dBias ? dBias->data<T>() : nullptr;
    for_rows(taps * blocks, B * T_ * kChannels, [&](int64_t task) {
      const int64_t s = task / blocks, c0 = task % blocks * kChannels, width = std::min(kChannels, C - c0);
      T acc[kChannels] = {};
      for (int64_t n = 0; n < B; ++n)
        for (int64_t t = s < W ? W - 1 - s : 0; t < T_; ++t) {
          const T* g = dy + (n * T_ + t) * C + c0;
          if (s == W) {
            for (int64_t j = 0; j < width; ++j) acc[j] += g[j];
          } else {
            const T* input = in + (n * T_ + t - W + 1 + s) * C + c0;
            for (int64_t j = 0; j < width; ++j) acc[j] += g[j] * input[j];
          }
        }
      std::copy_n(acc, width, (s == W ? db : dw + s * C) + c0);
    });
  });
}

}  // namespace ag::cpu
