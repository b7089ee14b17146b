// The causal depthwise convolution's sums, written once for the CPU loops
// (core/cpu/conv.cpp) and the CUDA kernels (cuda/conv.cu). x, y, dy are one
// batch entry's rows [T, C]; weight [W, C]. Derivation: docs/backprop.md,
// "The causal depthwise convolution".
#pragma once
#include <cstdint>

#include "core/random.h"  // AG_HOST_DEVICE

namespace ag::math {

// y_{t,c} − bias_c = Σ_{s<W} weight[s, c] · x_{t−W+1+s, c}, x before t = 0 being 0.
template <class T>
AG_HOST_DEVICE inline T causal_conv(const T* x, const T* weight, int64_t t, int64_t c, int64_t C, int64_t W) {
  T acc = 0;
  for (int64_t s = W - 1 - (t < W - 1 ? t : W - 1); s < W; ++s) acc += weight[s * C + c] * x[(t - W + 1 + s) * C + c];
  return acc;
}

// dx_{t,c} = Σ_s weight[s, c] · dy_{t+W−1−s, c} over the outputs t + W − 1 − s < T that read x_t.
template <class T>
AG_HOST_DEVICE inline T causal_conv_input_grad(const T* dy, const T* weight, int64_t t, int64_t c, int64_t C, int64_t W,
                                              int64_t T_) {
  T acc = 0;
  for (int64_t s = 0; s < W; ++s) {
    const int64_t out = t + W - 1 - s;
    if (out < T_) acc += weight[s * C + c] * dy[out * C + c];
  }
  return acc;
}

// One batch entry's share of dweight[s, c] = Σ_t dy_{t,c} · x_{t−W+1+s, c}.
template <class T>
AG_HOST_DEVICE inline T causal_conv_weight_grad(const T* x, const T* dy, int64_t s, int64_t c, int64_t C, int64_t W,
                                               int64_t T_) {
  T acc = 0;
  for (int64_t t = W - 1 - s; t < T_; ++t) acc += dy[t * C + c] * x[(t - W + 1 + s) * C + c];
  return acc;
}

}  // namespace ag::math
