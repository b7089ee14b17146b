// Row-wise softmax on CUDA: cuda/softmax_kernels.cuh's launches on the GPU. Reference:
// core/cpu/softmax.cpp.
#include "cuda/cuda.h"
#include "cuda/launch.cuh"
#include "cuda/softmax_kernels.cuh"

namespace ag::cuda {

namespace {
int64_t row_length(const Tensor& t) { return t.dim() == 0 ? 1 : t.shape().back(); }
int64_t row_count(const Tensor& t) { return t.numel() / std::max<int64_t>(row_length(t), 1); }
}  // namespace

void softmax(const Tensor& x, Tensor& y) {
  visit_floating(x.dtype(), "softmax", [&](auto zero) {
    using T = decltype(zero);
    const int64_t C = row_length(x), N = row_count(x);
    softmax_launch(Gpu(), ptr<const T>(x), N, C, ptr<T>(y));
  });
}

void softmax_backward(const Tensor& y, const Tensor& dY, Tensor& dX) {
  visit_floating(y.dtype(), "softmax_backward", [&](auto zero) {
    using T = decltype(zero);
    const int64_t C = row_length(y), N = row_count(y);
    softmax_backward_launch(Gpu(), ptr<const T>(y), ptr<const T>(dY), N, C, ptr<T>(dX));
  });
}

void log_softmax(const Tensor& x, Tensor& y) {
  visit_floating(x.dtype(), "log_softmax", [&](auto zero) {
    using T = decltype(zero);
    const int64_t C = row_length(x), N = row_count(x);
    log_softmax_launch(Gpu(), ptr<const T>(x), N, C, ptr<T>(y));
  });
}

void log_softmax_backward(const Tensor& y, const Tensor& dY, Tensor& dX) {
  visit_floating(y.dtype(), "log_softmax_backward", [&](auto zero) {
    using T = decltype(zero);
    const int64_t C = row_length(y), N = row_count(y);
    log_softmax_backward_launch(Gpu(), ptr<const T>(y), ptr<const T>(dY), N, C, ptr<T>(dX));
  });
}

void cross_entropy(const Tensor& logits, const Tensor& targets, int64_t ignore_index, Tensor& loss, Tensor& lse,
                   Tensor& scored) {
  const int64_t V = row_length(logits), N = targets.numel();
  check_indices_later(targets, V, true, ignore_index, [V, ignore_index](int64_t position, int64_t value) {
    return "cross_entropy: target " + std::to_string(value) + " at position " + std::to_string(position) +
           " out of range [0, " + std::to_string(V) + ") (ignore_index " + std::to_string(ignore_index) + ")";
  });
  visit_floating(logits.dtype(), "cross_entropy", [&](auto zero) {
    using T = decltype(zero);
    cross_entropy_launch(Gpu(), ptr<const T>(logits), ptr<const int64_t>(targets), ignore_index, N, V, ptr<T>(loss),
                         ptr<T>(lse), ptr<T>(scored));
  });
}

void cross_entropy_backward(const Tensor& logits, const Tensor& targets, const Tensor& lse, int64_t ignore_index,
                            const Tensor& scale, Tensor& dLogits) {
  const int64_t V = row_length(logits), N = targets.numel();
  visit_floating(logits.dtype(), "cross_entropy_backward", [&](auto zero) {
    using T = decltype(zero);
    cross_entropy_backward_launch(Gpu(), ptr<const T>(logits), ptr<const int64_t>(targets), ptr<const T>(lse),
                                  ignore_index, ptr<const T>(scale), N, V, ptr<T>(dLogits));
  });
}

}  // namespace ag::cuda
