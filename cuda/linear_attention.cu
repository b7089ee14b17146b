// Linear attention on CUDA: the feature maps φ and their backward, and the
// prefix product. Reference: core/cpu/linear_attention.cpp; formulas:
// core/linear_attention_math.h.
//
// The product is the chunked one of cuda/chunked_product.cuh (the CPU's
// algorithm; its kernels' header gives the blocks, the shared memory and why) with every
// decay 1: chunk states Σ_g B_gcᵀ C_gc in parallel, a short scan over the
// chunks, then each chunk's masked A_c B_gcᵀ C_gc plus A_c times the state
// entering it. Causal (the forward, dφ(Q)), Anticausal (dφ(K), dV) and All
// (non-causal: every position reads the total state). A kv head's gradient sums
// its query heads' rows in the kernel (the operands' groups).
#include "cuda/chunked_product.cuh"
#include "cuda/cuda.h"
#include "cuda/launch.cuh"

namespace ag::cuda {

namespace {

// Phi [rows, r]: element i is feature i % r of row i / r.
template <class T> struct Features {
  const T* x;
  const T* omega;
  T* phi;
  int64_t d, r;
  FeatureMap map;
  __device__ void operator()(int64_t i) const {
    const int64_t n = i / r, f = i % r;
    const T* xr = x + n * d;
    if (map == FeatureMap::Elu1) {
      phi[i] = math::elu1(xr[f]);
      return;
    }
    const T s = math::favor_input_scale<T>(d);
    phi[i] = math::favor_feature(math::favor_omega_dot(omega + f * d, xr, d, s), math::favor_half_norm_sq(xr, d, s),
                                 math::favor_output_scale<T>(r));
  }
};

// dX [rows, d]: element i is input c = i % d of row n = i / d.
template <class T> struct FeaturesBackward {
  const T* x;
  const T* omega;
  const T* phi;
  const T* dphi;
  T* dx;
  int64_t d, r;
  FeatureMap map;
  __device__ void operator()(int64_t i) const {
    const int64_t n = i / d, c = i % d;
    if (map == FeatureMap::Elu1) {
      dx[i] = dphi[n * r + c] * math::elu1_derivative(x[i], phi[n * r + c]);
      return;
    }
    const T s = math::favor_input_scale<T>(d);
    T weight_sum = 0, acc = 0;  // Σ_r dφ_r φ_r and Σ_r dφ_r φ_r ω_rc
    for (int64_t f = 0; f < r; ++f) {
      const T w = dphi[n * r + f] * phi[n * r + f];
      weight_sum += w;
      acc += w * omega[f * d + c];
    }
    dx[i] = math::favor_input_gradient(acc, weight_sum, x[i], s);
  }
};

// Where problem n (head n % out_heads of batch entry n / out_heads) finds its rows: in-head g of the
// heads_summed() it reads from first_in_head(h) on. Nothing decays (λ = 0, every a = 1) and w = 1.
template <class T> struct PrefixOperands {
  const T *A, *B, *C;
  T* Out;
  PrefixProduct how;
  __device__ int64_t groups() const { return how.heads_summed(); }
  __device__ chunked::Rows<const T> a(int64_t n, int64_t j) const {
    return {A + how.a.at(n / how.out_heads, n % how.out_heads, j), how.a.row};
  }
  __device__ chunked::Rows<const T> b(int64_t n, int64_t g, int64_t j) const {
    return {B + how.b.at(n / how.out_heads, how.first_in_head(n % how.out_heads) + g, j), how.b.row};
  }
  __device__ chunked::Rows<const T> c(int64_t n, int64_t g, int64_t j) const {
    return {C + how.c.at(n / how.out_heads, how.first_in_head(n % how.out_heads) + g, j), how.c.row};
  }
  __device__ chunked::Rows<T> out(int64_t n, int64_t j) const {
    return {Out + how.out.at(n / how.out_heads, n % how.out_heads, j), how.out.row};
  }
  __device__ T log_decay(int64_t, int64_t) const { return T(0); }
  __device__ T weight(int64_t, int64_t) const { return T(1); }
};

}  // namespace

void attention_features(const Tensor& X, const Tensor& omega, FeatureMap map, Tensor& Phi) {
  visit_floating(X.dtype(), "attention_features", [&](auto zero) {
    using T = decltype(zero);
    const int64_t d = X.size(-1), r = Phi.size(-1);
    for_each_index(Phi.numel(), Features<T>{ptr<const T>(X), omega.defined() ? ptr<const T>(omega) : nullptr,
                                            ptr<T>(Phi), d, r, map});
  });
}

void attention_features_backward(const Tensor& X, const Tensor& omega, FeatureMap map, const Tensor& Phi,
                                 const Tensor& dPhi, Tensor& dX) {
  visit_floating(X.dtype(), "attention_features_backward", [&](auto zero) {
    using T = decltype(zero);
    const int64_t d = X.size(-1), r = Phi.size(-1);
    for_each_index(dX.numel(), FeaturesBackward<T>{ptr<const T>(X), omega.defined() ? ptr<const T>(omega) : nullptr,
                                                   ptr<const T>(Phi), ptr<const T>(dPhi), ptr<T>(dX), d, r, map});
  });
}

void linear_attention_product(const Tensor& A, const Tensor& B, const Tensor& C, const PrefixProduct& how,
                              Tensor& Out) {
  visit_floating(A.dtype(), "linear_attention_product", [&](auto zero) {
    using T = decltype(zero);
    const chunked::Plan plan =
        chunked::make_plan(how.direction, how.batch * how.out_heads, how.T, how.r, how.e, how.chunk, false);
    chunked::product<T>(PrefixOperands<T>{ptr<const T>(A), ptr<const T>(B), ptr<const T>(C), ptr<T>(Out), how}, plan,
                        A.dtype(), nullptr);
  });
}

}  // namespace ag::cuda
