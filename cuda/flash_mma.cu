// FlashAttention-2 on tensor cores, the host side: cuda/flash_mma_kernels.cuh's launches
// (the operands rounded into compact copies, the kernels for the head width) on the GPU for
// the format that --precision chose (bf16 or tf32), and flash_mma_takes, the one place that
// decides which problems they take (cuda/flash_mma.cuh).
#include <algorithm>
#include <cstdint>
#include <type_traits>

#include "cuda/cuda.h"
#include "cuda/flash_mma.cuh"
#include "cuda/flash_mma_kernels.cuh"
#include "cuda/launch.cuh"

namespace ag::cuda {

namespace flash_mma {
namespace {

// --- the host side: the launches are cuda/flash_mma_kernels.cuh's ----------------------------

// f(Tf32{}) under --precision tf32, f(Bf16{}) under bf16 (flash_mma_takes admits no other).
template <class Fn> void with_format(Fn&& f) {
  if (gemm_precision() == Precision::TF32) return f(Tf32{});
  return f(Bf16{});
}

// The shared memory the largest of the three kernels asks for, for F and d_h = D.
template <class F, int D> constexpr size_t largest_bytes() {
  return std::max({forward_bytes<F, D>, query_bytes<F, D>, key_bytes<F, D>});
}

struct DeviceLimits {
  bool has_mma;             // sm_80 or later
  size_t shared_per_block;  // the most dynamic shared memory one block may opt in to
};
const DeviceLimits& device_limits() {
  static const DeviceLimits limits = [] {
    int device = 0, major = 0, shared = 0;
    AG_CUDA_CHECK(cudaGetDevice(&device));
    AG_CUDA_CHECK(cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, device));
    AG_CUDA_CHECK(cudaDeviceGetAttribute(&shared, cudaDevAttrMaxSharedMemoryPerBlockOptin, device));
    return DeviceLimits{major >= 8, static_cast<size_t>(shared)};
  }();
  return limits;
}

// Whether this device runs the kernels of the current format at head width d: tf32's
// shared tiles are twice bf16's (the dQ kernel's 132 KB at d_h = 128, more than the
// 99 KB of an sm_86 or sm_89 block; an A100's 163 KB and an H100's 227 KB hold it).
bool device_takes(int64_t d) {
  const DeviceLimits& limits = device_limits();
  if (!limits.has_mma) return false;
  size_t bytes = 0;
  with_format([&](auto format) {
    using F = decltype(format);
    bytes = d == 64 ? largest_bytes<F, 64>() : largest_bytes<F, 128>();
  });
  return bytes <= limits.shared_per_block;
}

// flash_attention_mma's and flash_attention_backward_mma's bodies (cuda/flash_mma.cuh).
void forward(const Tensor& Q, const Tensor& K, const Tensor& V, const AttentionShape& shape, Tensor& Z,
             Tensor& lse) {
  with_format([&](auto format) {
    Gpu gpu;
    forward_launch<decltype(format)>(gpu, ptr<const float>(Q), ptr<const float>(K), ptr<const float>(V), shape,
                                     ptr<float>(Z), ptr<double>(lse));
  });
}

void backward(const Tensor& Q, const Tensor& K, const Tensor& V, const Tensor& lse,
              const Tensor& dZ, const Tensor& given_D, const AttentionShape& shape,
              bool accumulate, Tensor& dQ, Tensor& dK, Tensor& dV) {
  with_format([&](auto format) {
    Gpu gpu;
    backward_launch<decltype(format)>(gpu, ptr<const float>(Q), ptr<const float>(K), ptr<const float>(V),
                                      ptr<const double>(lse), ptr<const float>(dZ),
                                      given_D.defined() ? ptr<float>(given_D) : nullptr, shape, accumulate,
                                      ptr<float>(dQ), ptr<float>(dK), ptr<float>(dV));
  });
}

}  // namespace
}  // namespace flash_mma

bool flash_mma_takes(const Tensor& Q, const AttentionShape& shape) {
  const Precision precision = gemm_precision();
  return (precision == Precision::BF16 || precision == Precision::TF32) && Q.dtype() == DType::Float32 &&
         (shape.d == 64 || shape.d == 128) && !shape.mask.has_mask_function() && !shape.mods.any() &&
         flash_mma::device_takes(shape.d);
}

void flash_attention_mma(const Tensor& Q, const Tensor& K, const Tensor& V, const AttentionShape& shape, Tensor& Z,
                         Tensor& lse) {
  flash_mma::forward(Q, K, V, shape, Z, lse);
}

void flash_attention_backward_mma(const Tensor& Q, const Tensor& K, const Tensor& V, const Tensor& lse,
                                  const Tensor& dZ, const Tensor& given_D, const AttentionShape& shape,
                                  bool accumulate, Tensor& dQ, Tensor& dK, Tensor& dV) {
  flash_mma::backward(Q, K, V, lse, dZ, given_D, shape, accumulate, dQ, dK, dV);
}

}  // namespace ag::cuda
