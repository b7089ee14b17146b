// Linear attention on CUDA: the feature maps φ and their backward, and the
// prefix product. Reference: core/cpu/linear_attention.cpp; formulas:
// core/linear_attention_math.h.
//
// The product runs as the recurrence its chunked CPU form computes in blocks:
// one thread block per problem (batch entry × head of Out), each thread owning
// columns c of the running state Σ_j B_jᵀ C_j [r, e] (in global scratch) and
// of Out. Position by position it adds B_iᵀ C_i[c] to its columns, then reads
// Out_i[c] = A_i · state[:, c]: no thread reads what another writes, so no
// synchronisation and no atomics, and the same bits every run. The CPU's
// chunk length does not apply (the result equals the chunked one but for
// rounding); a tiled form with the intra-chunk products as GEMMs is the way
// to speed, once a GPU run has checked this one.
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

// Block n is head n % out_heads of batch entry n / out_heads; thread c owns column c.
template <class T>
__global__ void prefix_product_kernel(const T* A, const T* B, const T* C, T* Out, T* state, PrefixProduct how) {
  const int64_t problems = how.batch * how.out_heads, r = how.r, e = how.e, summed = how.heads_summed();
  for (int64_t n = blockIdx.x; n < problems; n += gridDim.x) {
    const int64_t b = n / how.out_heads, h = n % how.out_heads, first = how.first_in_head(h);
    T* st = state + n * r * e;
    for (int64_t c = threadIdx.x; c < e; c += blockDim.x) {
      for (int64_t p = 0; p < r; ++p) st[p * e + c] = T(0);
      const auto add = [&](int64_t j) {
        for (int64_t g = 0; g < summed; ++g) {
          const T *bj = B + how.b.at(b, first + g, j), *cj = C + how.c.at(b, first + g, j);
          for (int64_t p = 0; p < r; ++p) st[p * e + c] += bj[p] * cj[c];
        }
      };
      const auto read = [&](int64_t i) {
        const T* ai = A + how.a.at(b, h, i);
        T acc = 0;
        for (int64_t p = 0; p < r; ++p) acc += ai[p] * st[p * e + c];
        Out[how.out.at(b, h, i) + c] = acc;
      };
      if (how.direction == PrefixDirection::All) {
        for (int64_t j = 0; j < how.T; ++j) add(j);
        for (int64_t i = 0; i < how.T; ++i) read(i);
        continue;
      }
      for (int64_t step = 0; step < how.T; ++step) {
        const int64_t i = how.direction == PrefixDirection::Causal ? step : how.T - 1 - step;
        add(i);  // position i sees itself
        read(i);
      }
    }
  }
}

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
    const int64_t problems = how.batch * how.out_heads;
    const Tensor state = Tensor::empty({problems, how.r, how.e}, A.dtype(), Device::CUDA);
    launch_rows(prefix_product_kernel<T>, problems, how.e, ptr<const T>(A), ptr<const T>(B), ptr<const T>(C),
                ptr<T>(Out), ptr<T>(state), how);
  });
}

}  // namespace ag::cuda
