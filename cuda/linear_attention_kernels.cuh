// Linear attention's kernels on CUDA: the feature maps φ and their backward, and the prefix
// product; with their launches, written once for any device (cuda/linear_attention.cu runs them
// on the GPU, tests/test_cuda_on_host.cpp on the host). Reference: core/cpu/linear_attention.cpp;
// formulas: core/linear_attention_math.h.
//
// The product is the chunked one of cuda/chunked_kernels.cuh (the CPU's
// algorithm; its header gives the blocks, the shared memory and why) with every
// decay 1: chunk states Σ_g B_gcᵀ C_gc in parallel, a short scan over the
// chunks, then each chunk's masked A_c B_gcᵀ C_gc plus A_c times the state
// entering it. Causal (the forward, dφ(Q)), Anticausal (dφ(K), dV) and All
// (non-causal: every position reads the total state). A kv head's gradient sums
// its query heads' rows in the kernel (the operands' groups).
#pragma once
#include <cstdint>

#include "core/linear_attention_math.h"
#include "cuda/chunked_kernels.cuh"

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

// The launches on a device `dev` (cuda/launch.cuh's Gpu; the host tests' Device). X [rows, d],
// Phi [rows, r], omega [r, d] (FAVOR+) or null. Contracts: core/kernels.inc.
template <class T, class Device>
void attention_features_launch(const Device& dev, const T* X, const T* omega, FeatureMap map, int64_t rows, int64_t d,
                               int64_t r, T* Phi) {
  dev(rows * r, Features<T>{X, omega, Phi, d, r, map});
}

template <class T, class Device>
void attention_features_backward_launch(const Device& dev, const T* X, const T* omega, FeatureMap map, const T* Phi,
                                        const T* dPhi, int64_t rows, int64_t d, int64_t r, T* dX) {
  dev(rows * d, FeaturesBackward<T>{X, omega, Phi, dPhi, dX, d, r, map});
}

template <class T, class Device>
void linear_attention_product_launch(Device& dev, const T* A, const T* B, const T* C, const PrefixProduct& how,
                                     T* Out) {
  const chunked::Plan plan =
      chunked::make_plan(how.direction, how.batch * how.out_heads, how.T, how.r, how.e, how.chunk, false);
  chunked::product<T>(dev, PrefixOperands<T>{A, B, C, Out, how}, plan, nullptr);
}

}  // namespace
}  // namespace ag::cuda
