// S4D (Gu et al. 2022): a diagonal state space per channel, trained as one long causal
// convolution. With the modes' discretisation of core/s4_math.h,
//   K_ℓ = 2·Re Σ_n W_n exp(ℓ s_n),  s_n = Δ A_n,  W_n = C_n (exp(s_n) − 1)/A_n · B_n
//   y_t = Σ_{j≤t} K_{t−j} u_j + D u_t
// Two ops of the graph: the kernel's generation (K from log Δ, A, B, C) and the convolution
// (y from u and K); D's skip is a product and a sum of the ops around them.
//
// Backward (docs/backprop.md, "S4D: a long convolution by a generated kernel"):
//   long_conv:   dU_j = Σ_{t≥j} K_{t−j} dY_t        (the convolution's adjoint: the correlation)
//                dK_ℓ = Σ_{b,t} dY_t u_{t−ℓ}
//                both by FFT with the conjugated spectrum; saves u and K.
//   s4d_kernel:  per mode, from G = Σ_ℓ dK_ℓ exp(ℓ s) and Q = Σ_ℓ ℓ dK_ℓ exp(ℓ s), the complex
//                chain rule of core/s4_math.h (s4d_mode_backward); saves the parameters only.
#include <cmath>

#include "core/ops/common.h"

namespace ag {

namespace {

// Checks the parameters' shapes against each other and returns (H, N/2).
std::pair<int64_t, int64_t> s4d_sizes(const char* op, const S4dParameters& p, bool with_D) {
  const auto where = [&] {
    return std::string(op) + ": log_dt " + to_string(p.log_dt.shape()) + ", log_A_re " +
           to_string(p.log_A_re.shape()) + ", A_im " + to_string(p.A_im.shape()) + ", B " + to_string(p.B.shape()) +
           ", C " + to_string(p.C.shape());
  };
  AG_CHECK(p.log_dt.defined() && p.log_A_re.defined() && p.A_im.defined() && p.B.defined() && p.C.defined(),
           op << ": every S4D parameter (log_dt, log_A_re, A_im, B, C) must be given");
  detail::check_compatible(op, {&p.log_dt, &p.log_A_re, &p.A_im, &p.B, &p.C});
  AG_CHECK(p.log_dt.dim() == 1 && p.log_A_re.dim() == 2, where() << ": expected log_dt [H] and log_A_re [H, N/2]");
  const int64_t H = p.log_dt.size(0), N2 = p.log_A_re.size(1);
  AG_CHECK(N2 >= 1, where() << ": the state size N/2 (log_A_re's last dim) must be >= 1");
  AG_CHECK(p.log_A_re.shape() == (Shape{H, N2}) && p.A_im.shape() == (Shape{H, N2}) &&
               p.B.shape() == (Shape{H, N2, 2}) && p.C.shape() == (Shape{H, N2, 2}),
           where() << ": expected log_A_re, A_im [H, N/2] and B, C [H, N/2, 2] (re, im) with H = " << H);
  if (with_D) {
    AG_CHECK(p.D.defined() && p.D.shape() == Shape{H},
             op << ": D must be [H] = [" << H << "], got " << (p.D.defined() ? to_string(p.D.shape()) : "none"));
    detail::check_compatible(op, {&p.log_dt, &p.D});
  }
  return {H, N2};
}

void check_input(const char* op, const Tensor& u, int64_t H) {
  AG_CHECK(u.dim() == 3 && u.size(2) == H, op << ": u " << to_string(u.shape()) << ": expected [B, T, H] with H = " << H);
}

}  // namespace

S4dParameters s4d_init(int64_t H, int64_t N, double dt_min, double dt_max, DType dtype, Generator* gen) {
  AG_CHECK(H >= 1, "s4d_init: the channel count H must be >= 1, got " << H);
  AG_CHECK(N >= 2 && N % 2 == 0,
           "s4d_init: the state size N must be even and >= 2 (N/2 complex modes), got " << N);
  AG_CHECK(std::isfinite(dt_min) && std::isfinite(dt_max) && dt_min > 0 && dt_min <= dt_max,
           "s4d_init: the Δ range must satisfy 0 < dt_min <= dt_max, got dt_min = " << dt_min << ", dt_max = "
                                                                                   << dt_max);
  const int64_t N2 = N / 2;
  S4dParameters p;
  p.log_dt = Tensor::uniform({H}, std::log(dt_min), std::log(dt_max), dtype, gen);
  p.log_A_re = Tensor::full({H, N2}, std::log(0.5), dtype);  // Re A = −½
  std::vector<double> im(H * N2), b(H * N2 * 2, 0.0);
  for (int64_t i = 0; i < H * N2; ++i) im[i] = M_PI * static_cast<double>(i % N2), b[2 * i] = 1.0;  // iπn; B_n = 1
  p.A_im = Tensor::from_vector(im, {H, N2}, dtype);
  p.B = Tensor::from_vector(b, {H, N2, 2}, dtype);
  p.C = Tensor::randn({H, N2, 2}, dtype, gen) * std::sqrt(0.5);  // a complex N(0, 1)
  p.D = Tensor::randn({H}, dtype, gen);
  return p;
}

Tensor s4d_kernel(const S4dParameters& p, int64_t T) {
  const int64_t H = s4d_sizes("s4d_kernel", p, false).first;
  AG_CHECK(T >= 1, "s4d_kernel: the length T must be >= 1, got " << T);
  Tensor K = detail::empty_as({H, T}, p.log_dt);
  const Tensor Dt = p.log_dt.detach(), Are = p.log_A_re.detach(),
               Aim = p.A_im.detach(), Bp = p.B.detach(), Cp = p.C.detach();
  kernel::s4d_kernel(Dt, Are, Aim, Bp, Cp, K);
  return record("s4d_kernel", {p.log_dt, p.log_A_re, p.A_im, p.B, p.C}, K,
                [Dt, Are, Aim, Bp, Cp](const Tensor& dK) -> Gradients {
                  Tensor dDt = detail::empty_like(Dt), dAre = detail::empty_like(Are), dAim = detail::empty_like(Aim),
                         dB = detail::empty_like(Bp), dC = detail::empty_like(Cp);
                  kernel::s4d_kernel_backward(Dt, Are, Aim, Bp, Cp, dK, dDt, dAre, dAim, dB, dC);
                  return {dDt, dAre, dAim, dB, dC};
                });
}

Tensor long_conv(const Tensor& u, const Tensor& K) {
  detail::check_compatible("long_conv", {&u, &K});
  AG_CHECK(u.dim() == 3 && K.dim() == 2 && K.size(0) == u.size(2) && K.size(1) == u.size(1),
           "long_conv: u " << to_string(u.shape()) << ", K " << to_string(K.shape())
                           << ": expected u [B, T, H] and K [H, T]");
  const Tensor U = u.detach(), Kd = K.detach();
  Tensor y = detail::empty_like(U);
  kernel::long_conv(U, Kd, y);
  return record("long_conv", {u, K}, y, [U, Kd](const Tensor& dY) -> Gradients {
    Tensor dU = detail::empty_like(U), dK = detail::empty_like(Kd);
    kernel::long_conv_backward(U, Kd, dY, dU, dK);  // the correlations (above)
    return {dU, dK};
  });
}

Tensor s4d(const Tensor& u, const S4dParameters& p) {
  const int64_t H = s4d_sizes("s4d", p, true).first;
  check_input("s4d", u, H);
  return long_conv(u, s4d_kernel(p, u.size(1))) + u * p.D.reshape({1, 1, H});
}

Tensor s4d_recurrent(const Tensor& u, const S4dParameters& p, Tensor& state) {
  const auto [H, N2] = s4d_sizes("s4d_recurrent", p, true);
  check_input("s4d_recurrent", u, H);
  const Shape state_shape{u.size(0), H, N2, 2};
  if (!state.defined()) state = Tensor::zeros(state_shape, u.dtype(), u.device());
  AG_CHECK(state.shape() == state_shape, "s4d_recurrent: state " << to_string(state.shape()) << ": expected [B, H, N/2, 2] = "
                                                                 << to_string(state_shape));
  detail::check_compatible("s4d_recurrent", {&u, &state, &p.log_dt});
  NoGradGuard no_grad;
  const Tensor x = u.detach();
  Tensor y = detail::empty_like(x);
  kernel::s4d_recurrence(p.log_dt.detach(), p.log_A_re.detach(), p.A_im.detach(),
                         p.B.detach(), p.C.detach(), x, state, y);
  return y + x * p.D.detach().reshape({1, 1, H});
}

}  // namespace ag
