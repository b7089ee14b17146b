// The causal depthwise convolution on CUDA: one thread per output element of
// y and dX, per weight of dWeight (summing over the batch entries and
// positions), per channel of dBias. Sums: core/conv_math.h, shared with the
// CPU (core/cpu/conv.cpp).
#include "cuda/cuda.h"
#include "cuda/launch.cuh"

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

}  // namespace

void causal_conv1d(const Tensor& x, const Tensor& weight, const Tensor& bias, Tensor& y) {
  visit_floating(x.dtype(), "causal_conv1d", [&](auto zero) {
    using T = decltype(zero);
    for_each_index(y.numel(), Conv<T>{ptr<const T>(x), ptr<const T>(weight),
                                      bias.defined() ? ptr<const T>(bias) : nullptr, ptr<T>(y), x.size(1), x.size(2),
                                      weight.size(0)});
  });
}

void causal_conv1d_backward(const Tensor& x, const Tensor& weight, const Tensor& dY, Tensor& dX, Tensor& dWeight,
                            Tensor* dBias) {
  visit_floating(x.dtype(), "causal_conv1d_backward", [&](auto zero) {
    using T = decltype(zero);
    const int64_t B = x.size(0), T_ = x.size(1), C = x.size(2), W = weight.size(0);
    for_each_index(dX.numel(), ConvInputGrad<T>{ptr<const T>(dY), ptr<const T>(weight), ptr<T>(dX), T_, C, W});
    for_each_index(dWeight.numel(), ConvWeightGrad<T>{ptr<const T>(x), ptr<const T>(dY), ptr<T>(dWeight), B, T_, C, W});
    if (dBias) for_each_index(C, ConvBiasGrad<T>{ptr<const T>(dY), ptr<T>(*dBias), B * T_, C});
  });
}

}  // namespace ag::cuda
