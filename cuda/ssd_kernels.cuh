// State-space attention's kernels on CUDA: the decayed product, chunked (Mamba-2's SSD
// algorithm, the CPU's: cuda/chunked_kernels.cuh's product(), whose header gives the blocks,
// the shared memory and why), and the decay's gradient, a suffix sum over T in spans of 64
// positions (each span summed by math::DecayGradient, core/ssd_math.h, the CPU's loop; then the
// spans' totals); with their launches, written once for any device (cuda/ssd.cu runs them on
// the GPU, tests/test_cuda_on_host.cpp on the host). Reference: core/cpu/ssd.cpp; contract:
// core/ssd_math.h (DecayedProduct).
//
// The operands below tell the chunked product where problem n = b·heads + h
// finds its rows: A, B and C through their own head mappings (a query head
// reads its kv head in place), λ and Δ through how.decay. Both directions,
// weighted or not, and decoding's state (causal: the scan starts from it and
// leaves the last one in it) run the same three launches, T = 1 included.
#pragma once
#include <cstdint>

#include "core/ssd_math.h"
#include "cuda/chunked_kernels.cuh"

namespace ag::cuda {
namespace {

template <class T> struct SsdOperands {
  const T *A, *B, *C, *dt, *log_a;
  T* Out;
  DecayedProduct how;
  __device__ int64_t groups() const { return 1; }
  __device__ chunked::Rows<const T> a(int64_t n, int64_t j) const {
    return {A + how.a.at(n / how.heads, how.a_head(n % how.heads), j), how.a.row};
  }
  __device__ chunked::Rows<const T> b(int64_t n, int64_t, int64_t j) const {
    return {B + how.b.at(n / how.heads, how.b_head(n % how.heads), j), how.b.row};
  }
  __device__ chunked::Rows<const T> c(int64_t n, int64_t, int64_t j) const {
    return {C + how.c.at(n / how.heads, how.c_head(n % how.heads), j), how.c.row};
  }
  __device__ chunked::Rows<T> out(int64_t n, int64_t j) const {
    return {Out + how.out.at(n / how.heads, n % how.heads, j), how.out.row};
  }
  __device__ T log_decay(int64_t n, int64_t j) const { return log_a[how.decay.at(n / how.heads, n % how.heads, j)]; }
  __device__ T weight(int64_t n, int64_t j) const {
    return how.weighted ? dt[how.decay.at(n / how.heads, n % how.heads, j)] : T(1);
  }
};

// --- the decay's gradient ----------------------------------------------------------------------------
constexpr int64_t kDecaySpan = 64;

// Thread i = n · spans + s: span s of problem n, its suffix sums in dλ and its total in totals[i].
template <class T> struct DecaySpans {
  math::DecayGradient<T> gradient;
  T* totals;
  int64_t spans;
  __device__ void operator()(int64_t i) const {
    const int64_t t0 = i % spans * kDecaySpan;
    const int64_t t1 = t0 + kDecaySpan < gradient.how.T ? t0 + kDecaySpan : gradient.how.T;
    totals[i] = gradient.suffix_sums(i / spans, t0, t1);
  }
};
// Thread n: each span's total replaced by the sum of the totals after it (0 for the last), from the end.
template <class T> struct DecayLaterSpans {
  T* totals;
  int64_t spans;
  __device__ void operator()(int64_t n) const {
    T later = 0;
    for (int64_t s = spans - 1; s >= 0; --s) {
      const T own = totals[n * spans + s];
      totals[n * spans + s] = later;
      later += own;
    }
  }
};
// Thread i = n · T + t: dλ_t += what the spans after t's add.
template <class T> struct DecayAddLater {
  T* d_log_a;
  const T* totals;
  int64_t spans;
  DecayedProduct how;
  __device__ void operator()(int64_t i) const {
    const int64_t n = i / how.T, t = i % how.T;
    d_log_a[how.decay.at(n / how.heads, n % how.heads, t)] += totals[n * spans + t / kDecaySpan];
  }
};

// The launches on a device `dev` (cuda/launch.cuh's Gpu; the host tests' Device). Shapes and
// contracts: core/kernels.inc, ssd_product and ssd_decay_gradient.
template <class T, class Device>
void ssd_product_launch(Device& dev, const T* A, const T* B, const T* C, const T* dt, const T* log_a,
                        const DecayedProduct& how, T* Out, T* state) {
  const chunked::Plan plan =
      chunked::make_plan(how.direction, how.batch * how.heads, how.T, how.r, how.e, how.chunk, state != nullptr);
  chunked::product<T>(dev, SsdOperands<T>{A, B, C, dt, log_a, Out, how}, plan, state);
}

// dλ in spans of kDecaySpan positions: each span's own suffix sums and total in parallel
// (math::DecayGradient::suffix_sums, one thread per (problem, span)), then per problem the totals
// of the spans after each (one thread, T / kDecaySpan steps), added to its positions.
template <class T, class Device>
void ssd_decay_gradient_launch(Device& dev, const T* dY, const T* Y, const T* dt, const T* d_dt,
                               const DecayedProduct& how, T* d_log_a) {
  const int64_t problems = how.batch * how.heads, spans = (how.T + kDecaySpan - 1) / kDecaySpan;
  if (problems == 0 || how.T == 0) return;
  T* totals = dev.template scratch<T>(problems * spans);
  const math::DecayGradient<T> gradient{dY, Y, dt, d_dt, d_log_a, how};
  dev(problems * spans, DecaySpans<T>{gradient, totals, spans});
  dev(problems, DecayLaterSpans<T>{totals, spans});
  dev(problems * how.T, DecayAddLater<T>{d_log_a, totals, spans, how});
}

}  // namespace
}  // namespace ag::cuda
