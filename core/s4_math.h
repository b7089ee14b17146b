// S4D's per-mode formulas (Gu et al. 2022, "On the Parameterization and
// Initialization of Diagonal State Space Models"), written once for the CPU
// loops (core/cpu/s4.cpp) and the CUDA kernels (cuda/s4.cu). Derivation:
// docs/backprop.md, "S4D: a long convolution by a generated kernel".
//
// Channel h has N/2 complex modes n. The parameters are real tensors:
//   log_dt [H]            Δ_h = exp(log_dt_h)                 (the step, > 0)
//   log_A_re [H, N/2]     Re A_n = −exp(log_A_re_n)            (< 0: every mode decays)
//   A_im [H, N/2]         Im A_n
//   B, C [H, N/2, 2]      B_n, C_n as (re, im)
// Zero-order hold: s_n = Δ A_n, Ā_n = exp(s_n), B̄_n = E_n B_n with E_n = (Ā_n − 1)/A_n,
// and the kernel  K_ℓ = 2·Re Σ_n W_n exp(ℓ s_n),  W_n = C_n B̄_n  (Vandermonde form).
#pragma once
#include <cmath>
#include <cstdint>

#include "core/random.h"  // AG_HOST_DEVICE

namespace ag::math {

// A complex number with just what S4D needs, the same on the host and the device.
template <class T> struct Complex {
  T re, im;
};
template <class T> AG_HOST_DEVICE inline Complex<T> operator+(Complex<T> a, Complex<T> b) {
  return {a.re + b.re, a.im + b.im};
}
template <class T> AG_HOST_DEVICE inline Complex<T> operator-(Complex<T> a, Complex<T> b) {
  return {a.re - b.re, a.im - b.im};
}
template <class T> AG_HOST_DEVICE inline Complex<T> operator*(Complex<T> a, Complex<T> b) {
  return {a.re * b.re - a.im * b.im, a.re * b.im + a.im * b.re};
}
template <class T> AG_HOST_DEVICE inline Complex<T> operator*(T x, Complex<T> a) { return {x * a.re, x * a.im}; }
template <class T> AG_HOST_DEVICE inline Complex<T> operator/(Complex<T> a, Complex<T> b) {
  const T norm = b.re * b.re + b.im * b.im;
  return {(a.re * b.re + a.im * b.im) / norm, (a.im * b.re - a.re * b.im) / norm};
}
template <class T> AG_HOST_DEVICE inline Complex<T> conj(Complex<T> a) { return {a.re, -a.im}; }
template <class T> AG_HOST_DEVICE inline Complex<T> exp(Complex<T> a) {
  const T r = std::exp(a.re);
  return {r * std::cos(a.im), r * std::sin(a.im)};
}

// Where a channel's parameters lie: pointers to the tensors above and N/2.
template <class T> struct S4dParams {
  const T *log_dt, *log_A_re, *A_im, *B, *C;
  int64_t modes;  // N/2
};

// One mode's discretisation, with what the backward reuses.
template <class T> struct S4dMode {
  T dt;                  // Δ
  Complex<T> A, s, E;    // A, s = ΔA, E = (exp(s) − 1)/A
  Complex<T> B, C, W;    // B, C, W = C·E·B (= C·B̄)
};

template <class T> AG_HOST_DEVICE inline S4dMode<T> s4d_mode(const S4dParams<T>& p, int64_t h, int64_t n) {
  const int64_t i = h * p.modes + n;
  S4dMode<T> m;
  m.dt = std::exp(p.log_dt[h]);
  m.A = {-std::exp(p.log_A_re[i]), p.A_im[i]};
  m.s = m.dt * m.A;
  m.E = (exp(m.s) - Complex<T>{T(1), T(0)}) / m.A;
  m.B = {p.B[2 * i], p.B[2 * i + 1]};
  m.C = {p.C[2 * i], p.C[2 * i + 1]};
  m.W = m.C * m.E * m.B;
  return m;
}

// exp(ℓ s) along ℓ: formed exactly every kExactPower positions and by one complex product with
// exp(s) between, so a run of ℓ costs a multiplication each instead of an exp, a cos and a sin
// (at T = 16384, 64 channels and 32 modes, float32 on this CPU: K in 0.44 s instead of 2.0 s), and the products' rounding,
// an ulp or so a step, never compounds past kExactPower steps.
constexpr int64_t kExactPower = 32;

// log of T's smallest normal number. Past ℓ·Re s below it, |exp(ℓ s)| is subnormal: the mode has
// decayed below anything the sums can hold beside their first terms, and every product after it
// would run in subnormal arithmetic, many times slower on x86 (float32 at T = 16384, 64 channels,
// 32 modes: K 0.44 s with them, 0.12 s without). The sums leave the mode there.
template <class T> constexpr T kLogSmallestNormal = sizeof(T) == 4 ? T(-87.33654) : T(-708.3964);

// K_ℓ = 2·Re Σ_n W_n exp(ℓ s_n) for channel h, each exp(ℓ s) formed directly: the device's form,
// one thread per (h, ℓ). The CPU forms the same sum along runs of kExactPower (core/cpu/s4.cpp).
template <class T> AG_HOST_DEVICE inline T s4d_kernel_at(const S4dParams<T>& p, int64_t h, int64_t l) {
  T acc = 0;
  for (int64_t n = 0; n < p.modes; ++n) {
    const S4dMode<T> m = s4d_mode(p, h, n);
    if (T(l) * m.s.re < kLogSmallestNormal<T>) continue;
    acc += T(2) * (m.W * exp(T(l) * m.s)).re;
  }
  return acc;
}

// The backward of K for mode (h, n), from dK_h [T] (docs/backprop.md). For a real loss L and a
// complex z, g_z = ∂L/∂Re z + i·∂L/∂Im z (PyTorch's .grad); u = f(z) holomorphic gives
// g_z = conj(f'(z))·g_u, and a real r with z(r) gives ∂L/∂r = Re(conj(g_z)·z'(r)).
//   G = Σ_ℓ dK_ℓ exp(ℓ s),  Q = Σ_ℓ ℓ dK_ℓ exp(ℓ s)
//   g_W = 2·conj(G);  g_C = conj(E B) g_W,  g_B = conj(C E) g_W,  g_E = conj(C B) g_W
//   g_s = 2·conj(W Q) + conj(exp(s)/A) g_E           (through exp(ℓ s), and E's numerator)
//   g_A = Δ g_s − conj(E/A) g_E                      (s = ΔA, and E's 1/A)
//   ∂L/∂Δ (this mode's share) = Re(g_s · conj(A))
// Returns g_A, g_B, g_C and ∂L/∂Δ through out-parameters.
template <class T> struct S4dModeGrad {
  Complex<T> A, B, C;
  T dt;
};
template <class T>
AG_HOST_DEVICE inline S4dModeGrad<T> s4d_mode_backward(const S4dParams<T>& p, const T* dK, int64_t h, int64_t n,
                                                       int64_t T_) {
  const S4dMode<T> m = s4d_mode(p, h, n);
  const Complex<T> z = exp(m.s);
  Complex<T> G{0, 0}, Q{0, 0}, z_l{1, 0};  // z_l = exp(ℓ s) (kExactPower)
  for (int64_t l = 0; l < T_ && T(l) * m.s.re >= kLogSmallestNormal<T>; ++l) {
    if (l % kExactPower == 0) z_l = exp(T(l) * m.s);
    G = G + dK[l] * z_l;
    Q = Q + (T(l) * dK[l]) * z_l;
    z_l = z_l * z;
  }
  const Complex<T> g_W = T(2) * conj(G);
  const Complex<T> g_E = conj(m.C * m.B) * g_W;
  const Complex<T> g_s = T(2) * conj(m.W * Q) + conj(exp(m.s) / m.A) * g_E;
  S4dModeGrad<T> g;
  g.C = conj(m.E * m.B) * g_W;
  g.B = conj(m.C * m.E) * g_W;
  g.A = m.dt * g_s - conj(m.E / m.A) * g_E;
  g.dt = (g_s * conj(m.A)).re;
  return g;
}

// One step of the recurrent form for channel h, mode n: x ← exp(s) x + B̄ u; the output's share is
// 2·Re(C x). (x_t = Σ_{j≤t} exp((t−j) s) B̄ u_j, so Σ_n 2·Re(C_n x_t) = Σ_j K_{t−j} u_j.)
template <class T> AG_HOST_DEVICE inline T s4d_step(const S4dMode<T>& m, Complex<T>& x, T u) {
  x = exp(m.s) * x + u * (m.E * m.B);
  return T(2) * (m.C * x).re;
}

// The FFT length of the long convolution of T positions: a power of two ≥ 2T, so that the
// circular convolution of two zero-padded length-T sequences never wraps around.
inline int64_t long_conv_fft_size(int64_t T_) {
  int64_t n = 2;
  while (n < 2 * T_) n *= 2;
  return n;
}

}  // namespace ag::math
