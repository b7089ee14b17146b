// State-space attention on CUDA: the decayed product, chunked (Mamba-2's SSD
// algorithm, the CPU's: three launches of cuda/chunked_product.cuh, whose
// header gives the blocks, the shared memory and why), and the decay's
// gradient (one thread per problem running math::DecayGradient,
// core/ssd_math.h, as the CPU does).
// Reference: core/cpu/ssd.cpp; contract: core/ssd_math.h (DecayedProduct).
//
// The operands below tell the chunked product where problem n = b·heads + h
// finds its rows: A, B and C through their own head mappings (a query head
// reads its kv head in place), λ and Δ through how.decay. Both directions,
// weighted or not, and decoding's state (causal: the scan starts from it and
// leaves the last one in it) run the same three launches, T = 1 included.
#include "cuda/chunked_product.cuh"
#include "cuda/cuda.h"
#include "cuda/launch.cuh"

namespace ag::cuda {

namespace {

template <class T> struct SsdOperands {
  const T *A, *B, *C, *dt, *log_a;
  T* Out;
  DecayedProduct how;
  __device__ int64_t groups() const { return 1; }
  __device__ const T* a(int64_t n, int64_t i) const {
    return A + how.a.at(n / how.heads, how.a_head(n % how.heads), i);
  }
  __device__ const T* b(int64_t n, int64_t, int64_t j) const {
    return B + how.b.at(n / how.heads, how.b_head(n % how.heads), j);
  }
  __device__ const T* c(int64_t n, int64_t, int64_t j) const {
    return C + how.c.at(n / how.heads, how.c_head(n % how.heads), j);
  }
  __device__ T* out(int64_t n, int64_t i) const { return Out + how.out.at(n / how.heads, n % how.heads, i); }
  __device__ T log_decay(int64_t n, int64_t j) const { return log_a[how.decay.at(n / how.heads, n % how.heads, j)]; }
  __device__ T weight(int64_t n, int64_t j) const {
    return how.weighted ? dt[how.decay.at(n / how.heads, n % how.heads, j)] : T(1);
  }
};

}  // namespace

void ssd_product(const Tensor& A, const Tensor& B, const Tensor& C, const Tensor& dt, const Tensor& log_a,
                 const DecayedProduct& how, Tensor& Out, Tensor* state) {
  visit_floating(A.dtype(), "ssd_product", [&](auto zero) {
    using T = decltype(zero);
    const chunked::Plan plan =
        chunked::make_plan(how.direction, how.batch * how.heads, how.T, how.r, how.e, how.chunk, state != nullptr);
    const SsdOperands<T> operands{ptr<const T>(A),     ptr<const T>(B), ptr<const T>(C), ptr<const T>(dt),
                                  ptr<const T>(log_a), ptr<T>(Out),    how};
    chunked::product<T>(operands, plan, A.dtype(), state ? ptr<T>(*state) : nullptr);
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
