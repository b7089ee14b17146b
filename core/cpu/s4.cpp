// S4D on the CPU: the kernel K and its backward from core/s4_math.h, the long
// convolution by KissFFT (kissfft.hh, the header-only template, so float64 runs
// in float64: Debian's libkissfft builds only float), and the recurrence.
// Channels run in parallel; every sum runs in a fixed order, so the bits do not
// depend on the threads.
#include <kissfft.hh>

#include <algorithm>
#include <complex>
#include <vector>

#include "core/cpu/cpu.h"
#include "core/cpu/loops.h"

namespace ag::cpu {

namespace {

template <class T>
math::S4dParams<T> params_of(const Tensor& log_dt, const Tensor& log_A_re, const Tensor& A_im, const Tensor& B,
                             const Tensor& C) {
  return {log_dt.data<T>(), log_A_re.data<T>(), A_im.data<T>(), B.data<T>(), C.data<T>(), A_im.size(1)};
}

// Channel h of a [B, T, H] tensor's entry b, zero-padded to the FFT length, transformed.
template <class T>
void transform_channel(const kissfft<T>& fft, const T* x, int64_t T_, int64_t H, int64_t h,
                       std::vector<std::complex<T>>& in, std::vector<std::complex<T>>& out) {
  std::fill(in.begin(), in.end(), std::complex<T>(0));
  for (int64_t t = 0; t < T_; ++t) in[t] = x[t * H + h];
  fft.transform(in.data(), out.data());
}

}  // namespace

void s4d_kernel(const Tensor& log_dt, const Tensor& log_A_re, const Tensor& A_im, const Tensor& B, const Tensor& C,
                Tensor& K) {
  visit_floating(K.dtype(), "s4d_kernel", [&](auto zero) {
    using T = decltype(zero);
    const auto p = params_of<T>(log_dt, log_A_re, A_im, B, C);
    const int64_t H = K.size(0), T_ = K.size(1), runs = (T_ + math::kExactPower - 1) / math::kExactPower;
    T* k = K.data<T>();
    // One task per channel and run of kExactPower positions: K_ℓ = 2·Re Σ_n W_n exp(ℓ s_n), the modes
    // summed in order (as math::s4d_kernel_at, the device's), exp(ℓ s_n) by products along the run.
    for_rows(H * runs, p.modes * math::kExactPower, [&](int64_t task) {
      const int64_t h = task / runs, l0 = task % runs * math::kExactPower,
                    length = std::min(math::kExactPower, T_ - l0);
      T* k_run = k + h * T_ + l0;
      std::fill_n(k_run, length, T(0));
      for (int64_t n = 0; n < p.modes; ++n) {
        const math::S4dMode<T> m = math::s4d_mode(p, h, n);
        if (T(l0) * m.s.re < math::kLogSmallestNormal<T>) continue;  // decayed past T's normal numbers
        const math::Complex<T> z = math::exp(m.s);
        math::Complex<T> term = m.W * math::exp(T(l0) * m.s);  // W exp(ℓ s) at ℓ = l0
        for (int64_t j = 0; j < length; ++j, term = term * z) k_run[j] += T(2) * term.re;
      }
    });
  });
}

void s4d_kernel_backward(const Tensor& log_dt, const Tensor& log_A_re, const Tensor& A_im, const Tensor& B,
                         const Tensor& C, const Tensor& dK, Tensor& dLog_dt, Tensor& dLog_A_re, Tensor& dA_im,
                         Tensor& dB, Tensor& dC) {
  visit_floating(dK.dtype(), "s4d_kernel_backward", [&](auto zero) {
    using T = decltype(zero);
    const auto p = params_of<T>(log_dt, log_A_re, A_im, B, C);
    const int64_t H = dK.size(0), T_ = dK.size(1), N2 = p.modes;
    const T* dk = dK.data<T>();
    T *ddt = dLog_dt.data<T>(), *dare = dLog_A_re.data<T>(), *daim = dA_im.data<T>(), *db = dB.data<T>(),
      *dc = dC.data<T>();
    for_rows(H, N2 * T_, [&](int64_t h) {
      T d_dt = 0;  // ∂L/∂Δ_h, summed over the modes in order
      for (int64_t n = 0; n < N2; ++n) {
        const int64_t i = h * N2 + n;
        const math::S4dModeGrad<T> g = math::s4d_mode_backward(p, dk + h * T_, h, n, T_);
        dare[i] = g.A.re * -std::exp(p.log_A_re[i]);  // Re A = −exp(log_A_re)
        daim[i] = g.A.im;
        db[2 * i] = g.B.re, db[2 * i + 1] = g.B.im;
        dc[2 * i] = g.C.re, dc[2 * i + 1] = g.C.im;
        d_dt += g.dt;
      }
      ddt[h] = d_dt * std::exp(p.log_dt[h]);  // Δ = exp(log_dt)
    });
  });
}

// y = ifft(fft(u) · fft(K)) / n per (b, h), the first T entries.
void long_conv(const Tensor& u, const Tensor& K, Tensor& y) {
  visit_floating(u.dtype(), "long_conv", [&](auto zero) {
    using T = decltype(zero);
    using Cx = std::complex<T>;
    const int64_t B = u.size(0), T_ = u.size(1), H = u.size(2), n = math::long_conv_fft_size(T_);
    const kissfft<T> forward(n, false), inverse(n, true);
    const T *x = u.data<T>(), *k = K.data<T>();
    T* out = y.data<T>();
    for_rows(H, B * n, [&](int64_t h) {
      std::vector<Cx> in(n), Kf(n), U(n), Y(n);
      transform_channel(forward, k + h * T_, T_, 1, 0, in, Kf);
      for (int64_t b = 0; b < B; ++b) {
        transform_channel(forward, x + b * T_ * H, T_, H, h, in, U);
        for (int64_t f = 0; f < n; ++f) in[f] = U[f] * Kf[f];
        inverse.transform(in.data(), Y.data());
        for (int64_t t = 0; t < T_; ++t) out[(b * T_ + t) * H + h] = Y[t].real() / T(n);
      }
    });
  });
}

// The correlations by FFT: a zero-padded circular correlation of length n ≥ 2T never wraps, so
//   dU = ifft(fft(dY) · conj(fft(K))) / n,   dK = ifft(Σ_b fft(dY_b) · conj(fft(u_b))) / n,
// each the first T entries.
void long_conv_backward(const Tensor& u, const Tensor& K, const Tensor& dY, Tensor& dU, Tensor& dK) {
  visit_floating(u.dtype(), "long_conv_backward", [&](auto zero) {
    using T = decltype(zero);
    using Cx = std::complex<T>;
    const int64_t B = u.size(0), T_ = u.size(1), H = u.size(2), n = math::long_conv_fft_size(T_);
    const kissfft<T> forward(n, false), inverse(n, true);
    const T *x = u.data<T>(), *k = K.data<T>(), *dy = dY.data<T>();
    T *du = dU.data<T>(), *dk = dK.data<T>();
    for_rows(H, B * n, [&](int64_t h) {
      std::vector<Cx> in(n), Kf(n), U(n), G(n), out(n), dKf(n, Cx(0));
      transform_channel(forward, k + h * T_, T_, 1, 0, in, Kf);
      for (int64_t b = 0; b < B; ++b) {
        transform_channel(forward, x + b * T_ * H, T_, H, h, in, U);
        transform_channel(forward, dy + b * T_ * H, T_, H, h, in, G);
        for (int64_t f = 0; f < n; ++f) {
          in[f] = G[f] * std::conj(Kf[f]);
          dKf[f] += G[f] * std::conj(U[f]);
        }
        inverse.transform(in.data(), out.data());
        for (int64_t t = 0; t < T_; ++t) du[(b * T_ + t) * H + h] = out[t].real() / T(n);
      }
      inverse.transform(dKf.data(), out.data());
      for (int64_t l = 0; l < T_; ++l) dk[h * T_ + l] = out[l].real() / T(n);
    });
  });
}

void s4d_recurrence(const Tensor& log_dt, const Tensor& log_A_re, const Tensor& A_im, const Tensor& B,
                    const Tensor& C, const Tensor& u, Tensor& state, Tensor& y) {
  visit_floating(u.dtype(), "s4d_recurrence", [&](auto zero) {
    using T = decltype(zero);
    const auto p = params_of<T>(log_dt, log_A_re, A_im, B, C);
    const int64_t Bn = u.size(0), T_ = u.size(1), H = u.size(2), N2 = p.modes;
    const T* x = u.data<T>();
    T *s = state.data<T>(), *out = y.data<T>();
    for_rows(Bn * H, T_ * N2, [&](int64_t row) {
      const int64_t b = row / H, h = row % H;
      std::vector<math::S4dMode<T>> modes(N2);
      for (int64_t n = 0; n < N2; ++n) modes[n] = math::s4d_mode(p, h, n);
      T* st = s + row * N2 * 2;
      for (int64_t t = 0; t < T_; ++t) {
        const T ut = x[(b * T_ + t) * H + h];
        T acc = 0;
        for (int64_t n = 0; n < N2; ++n) {
          math::Complex<T> xn{st[2 * n], st[2 * n + 1]};
          acc += math::s4d_step(modes[n], xn, ut);
          st[2 * n] = xn.re, st[2 * n + 1] = xn.im;
        }
        out[(b * T_ + t) * H + h] = acc;
      }
    });
  });
}

}  // namespace ag::cpu
