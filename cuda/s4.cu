// S4D on CUDA: cuda/s4_kernels.cuh's kernels launched, and the long convolution's transforms by
// cuFFT (complex-to-complex transforms of the zero-padded channels, as core/cpu/s4.cpp does with
// KissFFT). Formulas: core/s4_math.h.
#include <cufft.h>

#include <map>
#include <optional>
#include <type_traits>
#include <utility>

#include "cuda/cuda.h"
#include "cuda/launch.cuh"
#include "cuda/s4_kernels.cuh"

// Every cuFFT call, checked: a failure becomes ag::Error naming the call, file:line and the status.
#define AG_CUFFT_CHECK(call)                                                                      \
  do {                                                                                            \
    const cufftResult ag_status_ = (call);                                                        \
    if (ag_status_ != CUFFT_SUCCESS)                                                              \
      ::ag::cuda::throw_cuda_error(#call, __FILE__, __LINE__,                                     \
                                   "cufftResult " + std::to_string(static_cast<int>(ag_status_))); \
  } while (0)

namespace ag::cuda {

namespace {

using math::Complex;

template <class T>
math::S4dParams<T> params_of(const Tensor& log_dt, const Tensor& log_A_re, const Tensor& A_im, const Tensor& B,
                             const Tensor& C) {
  return {ptr<const T>(log_dt), ptr<const T>(log_A_re), ptr<const T>(A_im), ptr<const T>(B), ptr<const T>(C),
          A_im.size(1)};
}

// The cuFFT plan for `batch` complex transforms of length n, made once per (dtype, n, batch) and
// thread and kept for the process's life (making one costs more than a transform), with 64-bit
// sizes (n·batch passes 2^31 at T = 131072 from 8192 rows). Its work area is not cuFFT's own:
// auto-allocated, each plan would keep a cudaMalloc of its own for the process's life, beside the
// caching allocator, which could not give its cached blocks back for it (a new plan at an eval's
// or a sampler's shape would fail for want of memory the cache holds). So a plan says how much it
// needs, and each use takes that from the allocator (Scratch: stream-ordered, from a CUDA graph's
// pool during a capture) and hands it over with cufftSetWorkArea.
struct FftPlan {
  cufftHandle handle = 0;
  size_t work_bytes = 0;
};
template <class T> const FftPlan& fft_plan(int64_t n, int64_t batch) {
  thread_local std::map<std::pair<int64_t, int64_t>, FftPlan> plans;
  auto it = plans.find({n, batch});
  if (it == plans.end()) {
    FftPlan plan;
    AG_CUFFT_CHECK(cufftCreate(&plan.handle));
    try {
      AG_CUFFT_CHECK(cufftSetAutoAllocation(plan.handle, 0));
      long long length = n;  // the basic layout (no embeds): stride 1, one transform every n elements
      AG_CUFFT_CHECK(cufftMakePlanMany64(plan.handle, 1, &length, nullptr, 1, length, nullptr, 1, length,
                                         std::is_same_v<T, double> ? CUFFT_Z2Z : CUFFT_C2C, batch, &plan.work_bytes));
      it = plans.emplace(std::pair{n, batch}, plan).first;
    } catch (...) {
      cufftDestroy(plan.handle);
      throw;
    }
  }
  return it->second;
}

// The transforms of cuda/s4_kernels.cuh's long convolution: `rows` in place, by cuFFT.
template <class T> struct CuFft {
  void operator()(Complex<T>* z, int64_t n, int64_t rows, bool inverse) const {
    const FftPlan& plan = fft_plan<T>(n, rows);
    std::optional<Scratch<unsigned char>> work;  // freed after the transform, in stream order
    if (plan.work_bytes > 0) {
      work.emplace(static_cast<int64_t>(plan.work_bytes));
      AG_CUFFT_CHECK(cufftSetWorkArea(plan.handle, work->data()));
    }
    AG_CUFFT_CHECK(cufftSetStream(plan.handle, current_stream()));
    const int direction = inverse ? CUFFT_INVERSE : CUFFT_FORWARD;
    if constexpr (std::is_same_v<T, double>) {
      auto* data = reinterpret_cast<cufftDoubleComplex*>(z);
      AG_CUFFT_CHECK(cufftExecZ2Z(plan.handle, data, data, direction));
    } else {
      auto* data = reinterpret_cast<cufftComplex*>(z);
      AG_CUFFT_CHECK(cufftExecC2C(plan.handle, data, data, direction));
    }
  }
};

}  // namespace

void s4d_kernel(const Tensor& log_dt, const Tensor& log_A_re, const Tensor& A_im, const Tensor& B, const Tensor& C,
                Tensor& K) {
  visit_floating(K.dtype(), "s4d_kernel", [&](auto zero) {
    using T = decltype(zero);
    s4d_kernel_launch(Gpu(), params_of<T>(log_dt, log_A_re, A_im, B, C), K.size(0), K.size(1), ptr<T>(K));
  });
}

void s4d_kernel_backward(const Tensor& log_dt, const Tensor& log_A_re, const Tensor& A_im, const Tensor& B,
                         const Tensor& C, const Tensor& dK, Tensor& dLog_dt, Tensor& dLog_A_re, Tensor& dA_im,
                         Tensor& dB, Tensor& dC) {
  visit_floating(dK.dtype(), "s4d_kernel_backward", [&](auto zero) {
    using T = decltype(zero);
    Gpu gpu;
    s4d_kernel_backward_launch(gpu, params_of<T>(log_dt, log_A_re, A_im, B, C), dK.size(0), dK.size(1),
                               ptr<const T>(dK), ptr<T>(dLog_dt), ptr<T>(dLog_A_re), ptr<T>(dA_im), ptr<T>(dB),
                               ptr<T>(dC));
  });
}

void long_conv(const Tensor& u, const Tensor& K, Tensor& y) {
  visit_floating(u.dtype(), "long_conv", [&](auto zero) {
    using T = decltype(zero);
    Gpu gpu;
    long_conv_launch(gpu, CuFft<T>(), ptr<const T>(u), ptr<const T>(K), ptr<T>(y), u.size(0), u.size(1), u.size(2));
  });
}

void long_conv_backward(const Tensor& u, const Tensor& K, const Tensor& dY, Tensor& dU, Tensor& dK) {
  visit_floating(u.dtype(), "long_conv_backward", [&](auto zero) {
    using T = decltype(zero);
    Gpu gpu;
    long_conv_backward_launch(gpu, CuFft<T>(), ptr<const T>(u), ptr<const T>(K), ptr<const T>(dY), ptr<T>(dU),
                              ptr<T>(dK), u.size(0), u.size(1), u.size(2));
  });
}

void s4d_recurrence(const Tensor& log_dt, const Tensor& log_A_re, const Tensor& A_im, const Tensor& B,
                    const Tensor& C, const Tensor& u, Tensor& state, Tensor& y) {
  visit_floating(u.dtype(), "s4d_recurrence", [&](auto zero) {
    using T = decltype(zero);
    s4d_recurrence_launch(Gpu(), params_of<T>(log_dt, log_A_re, A_im, B, C), ptr<const T>(u), u.size(0),
                          u.size(1), u.size(2), ptr<T>(state), ptr<T>(y));
  });
}

}  // namespace ag::cuda
