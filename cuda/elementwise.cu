// Elementwise kernels on CUDA: cuda/elementwise_kernels.cuh's launches on the GPU. Reference:
// core/cpu/elementwise.cpp.
#include "cuda/cuda.h"
#include "cuda/elementwise_kernels.cuh"
#include "cuda/launch.cuh"

namespace ag::cuda {

namespace {
void check_activation(const char* kernel, UnaryOp op) {
  if (op != UnaryOp::Relu && op != UnaryOp::GeluErf && op != UnaryOp::GeluTanh && op != UnaryOp::Silu &&
      op != UnaryOp::Softplus && op != UnaryOp::Elu)
    throw Error(std::string(kernel) + ": no kernel for this op (its derivative is an expression of y)");
}
}  // namespace

void unary(UnaryOp op, const Tensor& x, Tensor& y) {
  visit_floating(x.dtype(), "unary", [&](auto zero) {
    using T = decltype(zero);
    unary_launch(Gpu(), op, ptr<const T>(x), x.numel(), ptr<T>(y));
  });
}

void unary_backward(UnaryOp op, const Tensor& x, const Tensor& dY, Tensor& dX) {
  visit_floating(x.dtype(), "unary_backward", [&](auto zero) {
    using T = decltype(zero);
    check_activation("unary_backward", op);
    unary_backward_launch(Gpu(), op, ptr<const T>(x), ptr<const T>(dY), x.numel(), ptr<T>(dX));
  });
}

void bias_activation(UnaryOp op, const Tensor& x, const Tensor& bias, Tensor& y, Tensor* derivative) {
  visit_floating(x.dtype(), "bias_activation", [&](auto zero) {
    using T = decltype(zero);
    check_activation("bias_activation", op);
    bias_activation_launch(Gpu(), op, ptr<const T>(x), ptr<const T>(bias), x.numel(), bias.numel(), ptr<T>(y),
                           derivative ? ptr<T>(*derivative) : nullptr);
  });
}

void bias_activation_backward(const Tensor& derivative, const Tensor& dY, Tensor& dX, Tensor& dBias) {
  visit_floating(dX.dtype(), "bias_activation_backward", [&](auto zero) {
    using T = decltype(zero);
    Gpu gpu;
    bias_activation_backward_launch(gpu, ptr<const T>(derivative), ptr<const T>(dY), dX.shape(), dBias.shape(),
                                    ptr<T>(dX), ptr<T>(dBias));
  });
}

void affine(const Tensor& x, double scale, double shift, Tensor& y) {
  visit_floating(x.dtype(), "affine", [&](auto zero) {
    using T = decltype(zero);
    affine_launch(Gpu(), ptr<const T>(x), x.numel(), static_cast<T>(scale), static_cast<T>(shift), ptr<T>(y));
  });
}

void leaky_relu(const Tensor& x, double slope, Tensor& y) {
  visit_floating(x.dtype(), "leaky_relu", [&](auto zero) {
    using T = decltype(zero);
    leaky_relu_launch(Gpu(), ptr<const T>(x), x.numel(), static_cast<T>(slope), ptr<T>(y));
  });
}

void leaky_relu_backward(const Tensor& x, const Tensor& dY, double slope, Tensor& dX) {
  visit_floating(x.dtype(), "leaky_relu_backward", [&](auto zero) {
    using T = decltype(zero);
    leaky_relu_backward_launch(Gpu(), ptr<const T>(x), ptr<const T>(dY), x.numel(), static_cast<T>(slope), ptr<T>(dX));
  });
}

void pow_scalar(const Tensor& x, double exponent, Tensor& y) {
  visit_floating(x.dtype(), "pow", [&](auto zero) {
    using T = decltype(zero);
    pow_scalar_launch(Gpu(), ptr<const T>(x), x.numel(), static_cast<T>(exponent), ptr<T>(y));
  });
}

void binary(BinaryOp op, const Tensor& a, const Tensor& b, Tensor& out) {
  visit_floating(a.dtype(), "binary", [&](auto zero) {
    using T = decltype(zero);
    binary_launch(Gpu(), op, ptr<const T>(a), a.shape(), ptr<const T>(b), b.shape(), out.shape(), ptr<T>(out));
  });
}

}  // namespace ag::cuda
