// State-space attention on CUDA: the decayed product and the decay's gradient
// (one thread per problem running math::DecayGradient, core/ssd_math.h, as the
// CPU does).
// Reference: core/cpu/ssd.cpp; contract: core/ssd_math.h (DecayedProduct).
//
// The product runs as the recurrence the CPU's chunks compute in blocks: one
// thread block per problem (batch entry × head), each thread owning columns c
// of the state [r, e] (in global scratch, or the caller's state) and of Out.
// Position by position, with a = exp(λ):
//   Causal:     S_i = a_i S_{i−1} + w_i B_i C_iᵀ,          Out_i = A_i · S_i
//   Anticausal: R_i = a_{i+1} R_{i+1} + w_i B_i C_iᵀ,      Out_i = A_i · R_i
// (unrolled, both are Σ_j exp(σ(i, j)) w_j (A_i·B_j) C_j). No thread reads what
// another writes: no synchronisation, no atomics, the same bits every run. The
// CPU's chunk length does not apply (the result equals the chunked one but for
// rounding); the chunked form with its products as GEMMs is the way to speed,
// once a GPU run has checked this one.
#include "cuda/cuda.h"
#include "cuda/launch.cuh"

namespace ag::cuda {

namespace {

template <class T>
__global__ void decayed_product_kernel(const T* A, const T* B, const T* C, const T* dt, const T* log_a, T* Out,
                                       T* state, bool from_state, DecayedProduct how) {
  const int64_t problems = how.batch * how.heads, r = how.r, e = how.e, T_ = how.T;
  const bool causal = how.causal();
  for (int64_t n = blockIdx.x; n < problems; n += gridDim.x) {
    const int64_t b = n / how.heads, h = n % how.heads;
    const int64_t ha = how.a_head(h), hb = how.b_head(h), hc = how.c_head(h);
    T* st = state + n * r * e;
    for (int64_t c = threadIdx.x; c < e; c += blockDim.x) {
      if (!from_state)
        for (int64_t p = 0; p < r; ++p) st[p * e + c] = T(0);
      for (int64_t step = 0; step < T_; ++step) {
        const int64_t i = causal ? step : T_ - 1 - step;
        const int64_t decay_at = causal ? i : i + 1;  // the a that carries the state to i
        const T decay = decay_at < T_ ? exp(log_a[how.decay.at(b, h, decay_at)]) : T(0);
        const T w = how.weighted ? dt[how.decay.at(b, h, i)] : T(1);
        const T* bi = B + how.b.at(b, hb, i);
        const T wc = w * C[how.c.at(b, hc, i) + c];
        for (int64_t p = 0; p < r; ++p) st[p * e + c] = decay * st[p * e + c] + bi[p] * wc;
        const T* ai = A + how.a.at(b, ha, i);
        T acc = 0;
        for (int64_t p = 0; p < r; ++p) acc += ai[p] * st[p * e + c];
        Out[how.out.at(b, h, i) + c] = acc;
      }
    }
  }
}

}  // namespace

void ssd_product(const Tensor& A, const Tensor& B, const Tensor& C, const Tensor& dt, const Tensor& log_a,
                 const DecayedProduct& how, Tensor& Out, Tensor* state) {
  visit_floating(A.dtype(), "ssd_product", [&](auto zero) {
    using T = decltype(zero);
    const int64_t problems = how.batch * how.heads;
    const Tensor scratch = state ? *state : Tensor::empty({problems, how.r, how.e}, A.dtype(), Device::CUDA);
    launch_rows(decayed_product_kernel<T>, problems, how.e, ptr<const T>(A), ptr<const T>(B), ptr<const T>(C),
                ptr<const T>(dt), ptr<const T>(log_a), ptr<T>(Out), ptr<T>(scratch), state != nullptr, how);
  });
}

void ssd_decay_gradient(const Tensor& dY, const Tensor& Y, const Tensor& dt, const Tensor& d_dt,
                        const DecayedProduct& how, Tensor& d_log_a) {
  visit_floating(Y.dtype(), "ssd_decay_gradient", [&](auto zero) {
    using T = decltype(zero);
    for_each_index(how.batch * how.heads, math::DecayGradient<T>{ptr<const T>(dY), ptr<const T>(Y), ptr<const T>(dt),
                                                                 ptr<const T>(d_dt), ptr<T>(d_log_a), how});
  });
}

}  // namespace ag::cuda
