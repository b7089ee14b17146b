// The causal depthwise convolution on CUDA: cuda/conv_kernels.cuh's launches on the GPU.
// Reference: core/cpu/conv.cpp.
#include "cuda/conv_kernels.cuh"
#include "cuda/cuda.h"
#include "cuda/launch.cuh"

namespace ag::cuda {

void causal_conv1d(const Tensor& x, const Tensor& weight, const Tensor& bias, Tensor& y) {
  visit_floating(x.dtype(), "causal_conv1d", [&](auto zero) {
    using T = decltype(zero);
    causal_conv1d_launch(Gpu(), ptr<const T>(x), ptr<const T>(weight), bias.defined() ? ptr<const T>(bias) : nullptr,
                         x.size(0), x.size(1), x.size(2), weight.size(0), ptr<T>(y));
  });
}

void causal_conv1d_backward(const Tensor& x, const Tensor& weight, const Tensor& dY, Tensor& dX, Tensor& dWeight,
                            Tensor* dBias) {
  visit_floating(x.dtype(), "causal_conv1d_backward", [&](auto zero) {
    using T = decltype(zero);
    causal_conv1d_backward_launch(Gpu(), ptr<const T>(x), ptr<const T>(weight), ptr<const T>(dY), x.size(0),
                                  x.size(1), x.size(2), weight.size(0), ptr<T>(dX), ptr<T>(dWeight),
                                  dBias ? ptr<T>(*dBias) : nullptr);
  });
}

}  // namespace ag::cuda
