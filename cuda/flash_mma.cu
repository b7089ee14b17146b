// FlashAttention-2 on tensor cores, the host side: the operands rounded into compact
// copies, the kernels of cuda/flash_mma_kernels.cuh launched for the format that
// --precision chose (bf16 or tf32) and the head width, and flash_mma_takes, the one
// place that decides which problems they take (cuda/flash_mma.cuh).
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

// --- the host side --------------------------------------------------------------------------

// dst[(b·H + h)·T + t][e] = F::operand(src[at(b, h, t) + e]): one entry per thread.
template <class F> struct RoundRows {
  const float* src;
  typename F::Element* dst;
  HeadStrides at;
  int64_t H, T, d;
  __device__ void operator()(int64_t idx) const {
    const int64_t e = idx % d, t = idx / d % T, h = idx / (d * T) % H, b = idx / (d * T * H);
    dst[idx] = F::operand(src[at.at(b, h, t) + e]);
  }
};

// A compact copy [B, H, T, d] of rows laid out by `at`, rounded to F's operands, for the
// life of the call; the caching allocator reuses the block only for work queued after it
// (one stream).
template <class F> class OperandRows {
 public:
  using E = typename F::Element;
  OperandRows(const Tensor& X, const HeadStrides& at, int64_t B, int64_t H, int64_t T, int64_t d)
      : elements_(B * H * T * d), data_(static_cast<E*>(allocate(bytes()))) {
    for_each_index(elements_, RoundRows<F>{ptr<const float>(X), data_, at, H, T, d});
  }
  ~OperandRows() { deallocate(data_, bytes()); }
  OperandRows(const OperandRows&) = delete;
  OperandRows& operator=(const OperandRows&) = delete;
  const E* data() const { return data_; }

 private:
  size_t bytes() const { return static_cast<size_t>(std::max<int64_t>(elements_, 1)) * sizeof(E); }
  int64_t elements_;
  E* data_;
};

// kernel<<<tasks (capped), 128 threads, `bytes` of shared memory>>>(args...), the
// kernel allowed more than the default 48 KB of dynamic shared memory first.
template <class... Params, class... Args>
void launch(void (*kernel)(Params...), int64_t tasks, size_t bytes, Args... args) {
  if (tasks == 0) return;
  AG_CUDA_CHECK(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, static_cast<int>(bytes)));
  kernel<<<grid_for(tasks), kBlockThreads, bytes, current_stream()>>>(args...);
  AG_CUDA_CHECK_LAUNCH();
}

// f(std::integral_constant<int, D>{}) for d_h = D ∈ {64, 128}.
template <class Fn> void with_head_width(int64_t d, Fn&& f) {
  if (d == 64) return f(std::integral_constant<int, 64>{});
  if (d == 128) return f(std::integral_constant<int, 128>{});
  throw Error("flash_attention (tensor cores): head width d = " + std::to_string(d) + " is not 64 or 128");
}
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
    using F = decltype(format);
    const OperandRows<F> q(Q, shape.q, shape.B, shape.Hq, shape.Tq, shape.d),
        k(K, shape.kv, shape.B, shape.Hkv, shape.Tk, shape.d), v(V, shape.kv, shape.B, shape.Hkv, shape.Tk, shape.d);
    with_head_width(shape.d, [&](auto width) {
      constexpr int D = decltype(width)::value;
      launch(masked(shape) ? forward_kernel<F, D, true> : forward_kernel<F, D, false>,
             shape.B * shape.Hq * tiles_of(shape.Tq, kRows), forward_bytes<F, D>, q.data(), k.data(), v.data(), shape,
             ptr<float>(Z), ptr<double>(lse));
    });
  });
}

void backward(const Tensor& Q, const Tensor& K, const Tensor& V, const Tensor& lse,
              const Tensor& dZ, const Tensor& given_D, const AttentionShape& shape,
              bool accumulate, Tensor& dQ, Tensor& dK, Tensor& dV) {
  // D = rowsum(P ∘ dP) [B, Hq, Tq] fp32: the dQ kernel's, or the caller's
  const Tensor D = given_D.defined() ? given_D : Tensor::empty(lse.shape(), DType::Float32, Device::CUDA);
  with_format([&](auto format) {
    using F = decltype(format);
    const OperandRows<F> q(Q, shape.q, shape.B, shape.Hq, shape.Tq, shape.d),
        dz(dZ, shape.q, shape.B, shape.Hq, shape.Tq, shape.d), k(K, shape.kv, shape.B, shape.Hkv, shape.Tk, shape.d),
        v(V, shape.kv, shape.B, shape.Hkv, shape.Tk, shape.d);
    with_head_width(shape.d, [&](auto width) {
      constexpr int Dh = decltype(width)::value;
      const bool mask = masked(shape);
      launch(mask ? backward_query_kernel<F, Dh, true> : backward_query_kernel<F, Dh, false>,
             shape.B * shape.Hq * tiles_of(shape.Tq, kRows), query_bytes<F, Dh>, q.data(), k.data(), v.data(),
             dz.data(), ptr<const double>(lse), shape, given_D.defined(), accumulate, ptr<float>(D), ptr<float>(dQ));
      launch(mask ? backward_key_kernel<F, Dh, true> : backward_key_kernel<F, Dh, false>,
             shape.B * shape.Hkv * tiles_of(shape.Tk, kCols), key_bytes<F, Dh>, q.data(), k.data(), v.data(),
             dz.data(), ptr<const double>(lse), ptr<const float>(D), shape, accumulate, ptr<float>(dK),
             ptr<float>(dV));
    });
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
