// S4D on CUDA: the kernel K one thread per (h, ℓ), its backward one thread per mode (h, n) with
// each channel's ∂L/∂Δ summed over its modes in order by one thread per channel, the recurrence
// one thread per (b, h); the long convolution by cuFFT (complex-to-complex transforms of the
// zero-padded channels, as core/cpu/s4.cpp does with KissFFT). Formulas: core/s4_math.h.
#include <cufft.h>

#include <map>
#include <type_traits>
#include <utility>

#include "cuda/cuda.h"
#include "cuda/launch.cuh"

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

template <class T> struct KernelAt {
  math::S4dParams<T> p;
  T* K;
  int64_t T_;
  __device__ void operator()(int64_t i) const { K[i] = math::s4d_kernel_at(p, i / T_, i % T_); }
};

template <class T> struct ModeGrad {
  math::S4dParams<T> p;
  const T* dK;
  T *dare, *daim, *dB, *dC, *d_dt;  // d_dt: each mode's share of ∂L/∂Δ [H, N/2]
  int64_t T_;
  __device__ void operator()(int64_t i) const {
    const int64_t h = i / p.modes, n = i % p.modes;
    const math::S4dModeGrad<T> g = math::s4d_mode_backward(p, dK + h * T_, h, n, T_);
    dare[i] = g.A.re * -exp(p.log_A_re[i]);  // Re A = −exp(log_A_re)
    daim[i] = g.A.im;
    dB[2 * i] = g.B.re, dB[2 * i + 1] = g.B.im;
    dC[2 * i] = g.C.re, dC[2 * i + 1] = g.C.im;
    d_dt[i] = g.dt;
  }
};

template <class T> struct StepGrad {
  const T *log_dt, *d_dt;
  T* dLog_dt;
  int64_t modes;
  __device__ void operator()(int64_t h) const {
    T acc = 0;
    for (int64_t n = 0; n < modes; ++n) acc += d_dt[h * modes + n];
    dLog_dt[h] = acc * exp(log_dt[h]);  // Δ = exp(log_dt)
  }
};

template <class T> struct Recurrence {
  math::S4dParams<T> p;
  const T* u;
  T *state, *y;
  int64_t T_, H;
  __device__ void operator()(int64_t row) const {
    const int64_t b = row / H, h = row % H;
    T* st = state + row * p.modes * 2;
    for (int64_t t = 0; t < T_; ++t) {
      const T ut = u[(b * T_ + t) * H + h];
      T acc = 0;
      for (int64_t n = 0; n < p.modes; ++n) {
        Complex<T> x{st[2 * n], st[2 * n + 1]};
        acc += math::s4d_step(math::s4d_mode(p, h, n), x, ut);
        st[2 * n] = x.re, st[2 * n + 1] = x.im;
      }
      y[(b * T_ + t) * H + h] = acc;
    }
  }
};

// Channel h of entry b of x [B, T, H] (or row h of K [H, T]: B = 1 and H's stride 1 along T taken
// as the row) into row (b·H + h) of the padded complex buffer [rows, n].
template <class T> struct Pad {
  const T* x;
  Complex<T>* out;
  int64_t T_, H, n;
  bool rows_of_T;  // x is [H, T] (K) rather than [B, T, H]
  __device__ void operator()(int64_t i) const {
    const int64_t f = i % n, row = i / n;
    T v = 0;
    if (f < T_) v = rows_of_T ? x[row * T_ + f] : x[((row / H) * T_ + f) * H + row % H];
    out[i] = {v, T(0)};
  }
};

// The first T entries of each row of the (unnormalised) inverse transform, divided by n, back to
// [B, T, H] (or [H, T]).
template <class T> struct Unpad {
  const Complex<T>* in;
  T* x;
  int64_t T_, H, n;
  bool rows_of_T;
  __device__ void operator()(int64_t i) const {
    if (rows_of_T) {
      x[i] = in[(i / T_) * n + i % T_].re / T(n);
    } else {
      const int64_t h = i % H, t = (i / H) % T_, b = i / (H * T_);
      x[i] = in[(b * H + h) * n + t].re / T(n);
    }
  }
};

// Z_{b,h,f} ← Z_{b,h,f} · K_{h,f}, or · conj(K_{h,f}).
template <class T> struct TimesSpectrum {
  Complex<T>* Z;
  const Complex<T>* K;
  int64_t H, n;
  bool conjugate;
  __device__ void operator()(int64_t i) const {
    const Complex<T> k = K[((i / n) % H) * n + i % n];
    Z[i] = Z[i] * (conjugate ? math::conj(k) : k);
  }
};

// dK_{h,f} = Σ_b G_{b,h,f} · conj(U_{b,h,f}), the batch summed in order.
template <class T> struct CorrelationSpectrum {
  const Complex<T>*G, *U;
  Complex<T>* dK;
  int64_t B, H, n;
  __device__ void operator()(int64_t i) const {
    Complex<T> acc{0, 0};
    for (int64_t b = 0; b < B; ++b) acc = acc + G[b * H * n + i] * math::conj(U[b * H * n + i]);
    dK[i] = acc;
  }
};

// The cuFFT plan for `batch` complex transforms of length n, made once per (dtype, n, batch) and
// thread and kept for the process's life: a plan's work area must outlive the transforms queued
// on the stream, and making one costs more than a transform. Set to the current stream per use.
template <class T> cufftHandle fft_plan(int64_t n, int64_t batch) {
  thread_local std::map<std::pair<int64_t, int64_t>, cufftHandle> plans;
  auto [it, made] = plans.try_emplace({n, batch}, cufftHandle{});
  if (made) {
    try {
      AG_CUFFT_CHECK(cufftPlan1d(&it->second, static_cast<int>(n),
                                 std::is_same_v<T, double> ? CUFFT_Z2Z : CUFFT_C2C, static_cast<int>(batch)));
    } catch (...) {
      plans.erase(it);
      throw;
    }
  }
  AG_CUFFT_CHECK(cufftSetStream(it->second, current_stream()));
  return it->second;
}

// In place, `batch` rows of n: direction CUFFT_FORWARD or CUFFT_INVERSE (unnormalised).
template <class T> void fft(Tensor& buffer, int64_t n, int64_t batch, int direction) {
  const cufftHandle plan = fft_plan<T>(n, batch);
  if constexpr (std::is_same_v<T, double>) {
    auto* z = reinterpret_cast<cufftDoubleComplex*>(buffer.raw_data());
    AG_CUFFT_CHECK(cufftExecZ2Z(plan, z, z, direction));
  } else {
    auto* z = reinterpret_cast<cufftComplex*>(buffer.raw_data());
    AG_CUFFT_CHECK(cufftExecC2C(plan, z, z, direction));
  }
}

template <class T> Complex<T>* spectrum(Tensor& t) { return static_cast<Complex<T>*>(t.raw_data()); }

// The padded transform of x: [rows, n, 2] (re, im), rows = B·H (u, dY) or H (K).
template <class T> Tensor transformed(const Tensor& x, int64_t T_, int64_t H, int64_t n, bool rows_of_T) {
  const int64_t rows = rows_of_T ? H : x.size(0) * H;
  Tensor out = Tensor::empty({rows, n, 2}, x.dtype(), Device::CUDA);
  for_each_index(rows * n, Pad<T>{ptr<const T>(x), spectrum<T>(out), T_, H, n, rows_of_T});
  fft<T>(out, n, rows, CUFFT_FORWARD);
  return out;
}

}  // namespace

void s4d_kernel(const Tensor& log_dt, const Tensor& log_A_re, const Tensor& A_im, const Tensor& B, const Tensor& C,
                Tensor& K) {
  visit_floating(K.dtype(), "s4d_kernel", [&](auto zero) {
    using T = decltype(zero);
    for_each_index(K.numel(), KernelAt<T>{params_of<T>(log_dt, log_A_re, A_im, B, C), ptr<T>(K), K.size(1)});
  });
}

void s4d_kernel_backward(const Tensor& log_dt, const Tensor& log_A_re, const Tensor& A_im, const Tensor& B,
                         const Tensor& C, const Tensor& dK, Tensor& dLog_dt, Tensor& dLog_A_re, Tensor& dA_im,
                         Tensor& dB, Tensor& dC) {
  visit_floating(dK.dtype(), "s4d_kernel_backward", [&](auto zero) {
    using T = decltype(zero);
    const auto p = params_of<T>(log_dt, log_A_re, A_im, B, C);
    const Tensor d_dt = Tensor::empty(A_im.shape(), A_im.dtype(), Device::CUDA);
    for_each_index(A_im.numel(), ModeGrad<T>{p, ptr<const T>(dK), ptr<T>(dLog_A_re), ptr<T>(dA_im), ptr<T>(dB),
                                             ptr<T>(dC), ptr<T>(d_dt), dK.size(1)});
    for_each_index(log_dt.numel(), StepGrad<T>{ptr<const T>(log_dt), ptr<const T>(d_dt), ptr<T>(dLog_dt), p.modes});
  });
}

void long_conv(const Tensor& u, const Tensor& K, Tensor& y) {
  visit_floating(u.dtype(), "long_conv", [&](auto zero) {
    using T = decltype(zero);
    const int64_t B = u.size(0), T_ = u.size(1), H = u.size(2), n = math::long_conv_fft_size(T_);
    Tensor U = transformed<T>(u, T_, H, n, false);
    const Tensor Kf = transformed<T>(K, T_, H, n, true);
    for_each_index(B * H * n, TimesSpectrum<T>{spectrum<T>(U), ptr<const Complex<T>>(Kf), H, n, false});
    fft<T>(U, n, B * H, CUFFT_INVERSE);
    for_each_index(y.numel(), Unpad<T>{spectrum<T>(U), ptr<T>(y), T_, H, n, false});
  });
}

void long_conv_backward(const Tensor& u, const Tensor& K, const Tensor& dY, Tensor& dU, Tensor& dK) {
  visit_floating(u.dtype(), "long_conv_backward", [&](auto zero) {
    using T = decltype(zero);
    const int64_t B = u.size(0), T_ = u.size(1), H = u.size(2), n = math::long_conv_fft_size(T_);
    const Tensor U = transformed<T>(u, T_, H, n, false), Kf = transformed<T>(K, T_, H, n, true);
    Tensor G = transformed<T>(dY, T_, H, n, false);
    Tensor dKf = Tensor::empty({H, n, 2}, u.dtype(), Device::CUDA);
    for_each_index(H * n, CorrelationSpectrum<T>{ptr<const Complex<T>>(G), ptr<const Complex<T>>(U), spectrum<T>(dKf),
                                                 B, H, n});
    for_each_index(B * H * n, TimesSpectrum<T>{spectrum<T>(G), ptr<const Complex<T>>(Kf), H, n, true});
    fft<T>(G, n, B * H, CUFFT_INVERSE);
    fft<T>(dKf, n, H, CUFFT_INVERSE);
    for_each_index(dU.numel(), Unpad<T>{spectrum<T>(G), ptr<T>(dU), T_, H, n, false});
    for_each_index(dK.numel(), Unpad<T>{spectrum<T>(dKf), ptr<T>(dK), T_, H, n, true});
  });
}

void s4d_recurrence(const Tensor& log_dt, const Tensor& log_A_re, const Tensor& A_im, const Tensor& B,
                    const Tensor& C, const Tensor& u, Tensor& state, Tensor& y) {
  visit_floating(u.dtype(), "s4d_recurrence", [&](auto zero) {
    using T = decltype(zero);
    for_each_index(u.size(0) * u.size(2), Recurrence<T>{params_of<T>(log_dt, log_A_re, A_im, B, C), ptr<const T>(u),
                                                        ptr<T>(state), ptr<T>(y), u.size(1), u.size(2)});
  });
}

}  // namespace ag::cuda
