// S4D's kernels on CUDA (cuda/s4.cu calls their launches below, with cuFFT): the kernel K
// one thread per (h, ℓ), its backward one thread per mode (h, n) with each channel's ∂L/∂Δ summed
// over its modes in order by one thread per channel, the recurrence one thread per (b, h), and
// the long convolution's steps around the transforms. Device code that a host build compiles
// too: tests/test_cuda_on_host.cpp runs it on the host, with a plain DFT where cuFFT runs here.
// Formulas: core/s4_math.h; the CPU's loops: core/cpu/s4.cpp.
#pragma once
#include <cstdint>

#include "core/s4_math.h"

namespace ag::cuda {
namespace {

using math::Complex;

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

// The launches on a device `dev` (cuda/launch.cuh's Gpu; the host tests' Device): dev(count, f) calls
// f(i) for every i < count, dev.scratch<T>(count) gives memory held while dev lives. K [H, T]; u, y
// [B, T, H], state [B, H, N/2, 2]. Contracts: core/kernels.inc.
template <class T, class Device>
void s4d_kernel_launch(const Device& dev, const math::S4dParams<T>& p, int64_t H, int64_t T_, T* K) {
  dev(H * T_, KernelAt<T>{p, K, T_});
}

// d_dt [H, N/2]: each mode's share of ∂L/∂Δ, summed per channel in mode order.
template <class T, class Device>
void s4d_kernel_backward_launch(Device& dev, const math::S4dParams<T>& p, int64_t H, int64_t T_, const T* dK,
                                T* dLog_dt, T* dLog_A_re, T* dA_im, T* dB, T* dC) {
  T* d_dt = dev.template scratch<T>(H * p.modes);
  dev(H * p.modes, ModeGrad<T>{p, dK, dLog_A_re, dA_im, dB, dC, d_dt, T_});
  dev(H, StepGrad<T>{p.log_dt, d_dt, dLog_dt, p.modes});
}

template <class T, class Device>
void s4d_recurrence_launch(const Device& dev, const math::S4dParams<T>& p, const T* u, int64_t B, int64_t T_,
                           int64_t H, T* state, T* y) {
  dev(B * H, Recurrence<T>{p, u, state, y, T_, H});
}

// The long convolution and its backward, on `dev` with the transforms by `fft`:
//   fft(z, n, rows, inverse): `rows` transforms of length n in place, unnormalised (cuFFT's
//     C2C / Z2Z: forward Σ_t z_t e^(−2πi·ft/n), inverse with +).

// The padded transform of x: `rows` rows of n, rows = B·H (u, dY: x [B, T, H]) or H (K: x [H, T]).
template <class T, class Device, class Fft>
Complex<T>* transformed(Device& dev, const Fft& fft, const T* x, int64_t T_, int64_t H, int64_t n, int64_t rows,
                        bool rows_of_T) {
  Complex<T>* out = dev.template scratch<Complex<T>>(rows * n);
  dev(rows * n, Pad<T>{x, out, T_, H, n, rows_of_T});
  fft(out, n, rows, false);
  return out;
}

// y = ifft(fft(u) · fft(K)) / n per (b, h), the first T entries; u, y [B, T, H], K [H, T].
template <class T, class Device, class Fft>
void long_conv_launch(Device& dev, const Fft& fft, const T* u, const T* K, T* y, int64_t B, int64_t T_, int64_t H) {
  const int64_t n = math::long_conv_fft_size(T_);
  Complex<T>* U = transformed(dev, fft, u, T_, H, n, B * H, false);
  const Complex<T>* Kf = transformed(dev, fft, K, T_, H, n, H, true);
  dev(B * H * n, TimesSpectrum<T>{U, Kf, H, n, false});
  fft(U, n, B * H, true);
  dev(B * T_ * H, Unpad<T>{U, y, T_, H, n, false});
}

// The correlations by FFT (a zero-padded circular correlation of length n ≥ 2T never wraps):
//   dU = ifft(fft(dY) · conj(fft(K))) / n,   dK = ifft(Σ_b fft(dY_b) · conj(fft(u_b))) / n.
template <class T, class Device, class Fft>
void long_conv_backward_launch(Device& dev, const Fft& fft, const T* u, const T* K, const T* dY, T* dU, T* dK,
                               int64_t B, int64_t T_, int64_t H) {
  const int64_t n = math::long_conv_fft_size(T_);
  const Complex<T>* U = transformed(dev, fft, u, T_, H, n, B * H, false);
  const Complex<T>* Kf = transformed(dev, fft, K, T_, H, n, H, true);
  Complex<T>* G = transformed(dev, fft, dY, T_, H, n, B * H, false);
  Complex<T>* dKf = dev.template scratch<Complex<T>>(H * n);
  dev(H * n, CorrelationSpectrum<T>{G, U, dKf, B, H, n});
  dev(B * H * n, TimesSpectrum<T>{G, Kf, H, n, true});
  fft(G, n, B * H, true);
  fft(dKf, n, H, true);
  dev(B * T_ * H, Unpad<T>{G, dU, T_, H, n, false});
  dev(H * T_, Unpad<T>{dKf, dK, T_, H, n, true});
}

}  // namespace
}  // namespace ag::cuda
