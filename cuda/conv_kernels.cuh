// The causal depthwise convolution's kernels on CUDA: one thread per output element of y and dX,
// per weight of dWeight (summing over the batch entries and positions), per channel of dBias;
// with their launches, written once for any device (cuda/conv.cu runs them on the GPU,
// tests/test_cuda_on_host.cpp on the host). Sums: core/conv_math.h, shared with the CPU
// (core/cpu/conv.cpp).
#pragma once
#include <cstdint>

#include "core/conv_math.h"

namespace ag::cuda {
namespace {

template <class T> struct Conv {
  const T *x, *w, *bias;
  T* y;
  int64_t T_, C, W;
  __device__ void operator()(int64_t i) const {
    const int64_t c = i % C, t = (i / C) % T_, n = i / (C * T_);
    y[i] = (bias ? bias[c] : T(0)) + math::causal_conv(x + n * T_ * C, w, t, c, C, W);
  }
};

template <class T> struct ConvInputGrad {
  const T *dy, *w;
  T* dx;
  int64_t T_, C, W;
  __device__ void operator()(int64_t i) const {
    const int64_t c = i % C, t = (i / C) % T_, n = i / (C * T_);
    dx[i] = math::causal_conv_input_grad(dy + n * T_ * C, w, t, c, C, W, T_);
  }
};

template <class T> struct ConvWeightGrad {
  const T *x, *dy;
  T* dw;
  int64_t B, T_, C, W;
  __device__ void operator()(int64_t i) const {
    const int64_t c = i % C, s = i / C;
    T acc = 0;
    for (int64_t n = 0; n < B; ++n) acc += math::causal_conv_weight_grad(x + n * T_ * C, dy + n * T_ * C, s, c, C, W, T_);
    dw[i] = acc;
  }
};

template <class T> struct ConvBiasGrad {
  const T* dy;
  T* db;
  int64_t rows, C;
  __device__ void operator()(int64_t c) const {
    T acc = 0;
    for (int64_t row = 0; row < rows; ++row) acc += dy[row * C + c];
    db[c] = acc;
  }
};

// The launches on a device `dev` (cuda/launch.cuh's Gpu; the host tests' Device): x, y [B, T, C],
// weight [W, C], bias [C] or null. Contracts: core/kernels.inc.
template <class T, class Device>
void causal_conv1d_launch(const Device& dev, const T* x, const T* weight, const T* bias, int64_t B, int64_t T_,
                          int64_t C, int64_t W, T* y) {
  dev(B * T_ * C, Conv<T>{x, weight, bias, y, T_, C, W});
}

// dBias null: no bias.
template <class T, class Device>
void causal_conv1d_backward_launch(const Device& dev, const T* x, const T* weight, const T* dY, int64_t B, int64_t T_,
                                   int64_t C, int64_t W, T* dX, T* dWeight, T* dBias) {
  dev(B * T_ * C, ConvInputGrad<T>{dY, weight, dX, T_, C, W});
  dev(W * C, ConvWeightGrad<T>{x, dY, dWeight, B, T_, C, W});
  if (dBias) dev(C, ConvBiasGrad<T>{dY, dBias, B * T_, C});
}

}  // namespace
}  // namespace ag::cuda
