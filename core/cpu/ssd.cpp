// State-space attention's kernels on the CPU: the chunked decayed product
// (Mamba-2's SSD algorithm) that every sum of the forward and the backward is,
// and the decay's gradient (its loop shared with CUDA: math::DecayGradient in
// core/ssd_math.h). Contract: core/ssd_math.h (DecayedProduct);
// derivations: docs/backprop.md, "State-space attention".
//
// Thread mapping: OpenMP over the problems (batch entry × head); each
// problem's sums run in order on one thread (its GEMMs too), so the bits do
// not depend on the thread count.
#include <algorithm>
#include <cmath>
#include <vector>

#include "core/cpu/cpu.h"
#include "core/cpu/loops.h"
#include "core/cpu/tile_gemm.h"

namespace ag::cpu {
namespace {

// Per-thread scratch: the state [r, e]; for one chunk the scores G [chunk,
// chunk], B's rows scaled by their decay into the state [chunk, r], and per
// position its decay a = exp(λ), its weight w, the decays to the chunk's ends
// and the current row of the decay mask.
template <class T> struct DecayScratch {
  std::vector<T> state, scores, decayed_b, a, w, to_start, to_end, mask;
  DecayScratch(const DecayedProduct& how, int64_t chunk)
      : state(how.r * how.e), scores(chunk * chunk), decayed_b(chunk * how.r), a(chunk), w(chunk), to_start(chunk),
        to_end(chunk), mask(chunk) {}
};

// One problem, head h of batch entry b. Chunk by chunk (forward for Causal,
// backward for Anticausal), with the chunk [j0, j1):
//   to_start_i = Π_{r=j0..i} a_r,  to_end_i = Π_{r=i+1..j1−1} a_r   (running products of a_r ≤ 1: the
//   segment sums of λ exponentiated without cancellation, never exp of a positive number)
//   Causal:     Out_i = to_start_i A_i·S + Σ_{j0≤j≤i} mask_ij (A_i·B_j) w_j C_j,
//               S ← to_start_{j1−1} S + Σ_j to_end_j w_j B_j C_jᵀ
//   Anticausal: Out_i = to_end_i A_i·R + Σ_{i≤j<j1} mask_ij (A_i·B_j) w_j C_j,
//               R ← to_start_{j1−1} R + Σ_j to_start_j w_j B_j C_jᵀ
// where mask_ij = exp(σ(i, j)): row i of the mask is row i∓1's times one a (Causal: row i = row i−1 · a_i
// with mask_ii = 1; Anticausal: row i = row i+1 · a_{i+1}), one vector multiply per row.
// Each of the four sums is one GEMM of the chunk: G = A Bᵀ, Out = A S (its rows
// scaled) + (mask ∘ G) C, S += (decayed B)ᵀ C.
template <class T>
void decayed_product_one(const DecayedProduct& how, const T* A, const T* B, const T* C, const T* dt, const T* log_a,
                         T* Out, T* state_io, int64_t b, int64_t h, int64_t chunk, DecayScratch<T>& scratch) {
  const int64_t T_ = how.T, r = how.r, e = how.e;
  const int64_t ha = how.a_head(h), hb = how.b_head(h), hc = how.c_head(h);
  const bool causal = how.causal();
  T* state = scratch.state.data();
  if (state_io)
    std::copy_n(state_io, r * e, state);
  else
    std::fill_n(state, r * e, T(0));
  T *a = scratch.a.data(), *w = scratch.w.data(), *to_start = scratch.to_start.data(), *to_end = scratch.to_end.data();
  T *mask = scratch.mask.data(), *G = scratch.scores.data(), *decayed_b = scratch.decayed_b.data();
  const int64_t chunks = (T_ + chunk - 1) / chunk;
  for (int64_t n = 0; n < chunks; ++n) {
    const int64_t index = causal ? n : chunks - 1 - n;
    const int64_t j0 = index * chunk, m = std::min(j0 + chunk, T_) - j0;
    for (int64_t j = 0; j < m; ++j) {
      a[j] = std::exp(log_a[how.decay.at(b, h, j0 + j)]);
      w[j] = how.weighted ? dt[how.decay.at(b, h, j0 + j)] : T(1);
    }
    chunk_decays(a, m, to_start, to_end);
    const T *Ac = A + how.a.at(b, ha, j0), *Bc = B + how.b.at(b, hb, j0), *Cc = C + how.c.at(b, hc, j0);
    T* Oc = Out + how.out.at(b, h, j0);
    tile_gemm(false, true, m, m, r, Ac, how.a.row, Bc, how.b.row, T(0), G, m);
    std::fill_n(mask, m, T(0));
    for (int64_t step = 0; step < m; ++step) {
      const int64_t i = causal ? step : m - 1 - step;
      const int64_t lo = causal ? 0 : i, hi = causal ? i + 1 : m;  // the visible j ∈ [lo, hi)
      if (causal) {
        for (int64_t j = 0; j < i; ++j) mask[j] *= a[i];
      } else {
        for (int64_t j = i + 1; j < m; ++j) mask[j] *= a[i + 1];
      }
      mask[i] = 1;
      T* row = G + i * m;
      std::fill(row, row + lo, T(0));
      for (int64_t j = lo; j < hi; ++j) row[j] *= mask[j] * w[j];
      std::fill(row + hi, row + m, T(0));
    }
    // the chunks already passed, through the state (zero before the first of a fresh product)
    const bool has_state = n > 0 || state_io;
    if (has_state) {
      tile_gemm(false, false, m, e, r, Ac, how.a.row, state, e, T(0), Oc, how.out.row);
      for (int64_t i = 0; i < m; ++i) {
        const T read_decay = causal ? to_start[i] : to_end[i];
        T* out = Oc + i * how.out.row;
        for (int64_t c = 0; c < e; ++c) out[c] *= read_decay;
      }
    }
    tile_gemm(false, false, m, e, m, G, m, Cc, how.c.row, has_state ? T(1) : T(0), Oc, how.out.row);
    // the state moves past this chunk
    const T carry = to_start[m - 1];
    for (int64_t p = 0; p < r * e; ++p) state[p] *= carry;
    for (int64_t j = 0; j < m; ++j) {
      const T decay = (causal ? to_end[j] : to_start[j]) * w[j];
      const T* bj = Bc + j * how.b.row;
      for (int64_t p = 0; p < r; ++p) decayed_b[j * r + p] = bj[p] * decay;
    }
    tile_gemm(true, false, r, e, m, decayed_b, r, Cc, how.c.row, T(1), state, e);
  }
  if (state_io) std::copy_n(state, r * e, state_io);
}

}  // namespace

void ssd_product(const Tensor& A, const Tensor& B, const Tensor& C, const Tensor& dt, const Tensor& log_a,
                 const DecayedProduct& how, Tensor& Out, Tensor* state) {
  visit_floating(A.dtype(), "ssd_product", [&](auto zero) {
    using T = decltype(zero);
    const int64_t problems = how.batch * how.heads;
    const int64_t chunk = std::min(std::max<int64_t>(how.chunk, 1), std::max<int64_t>(how.T, 1));
    const T *a = A.data<T>(), *b = B.data<T>(), *c = C.data<T>(), *w = dt.data<T>(), *la = log_a.data<T>();
    T* out = Out.data<T>();
    T* st = state ? state->data<T>() : nullptr;
#pragma omp parallel if (problems > 1 && problems * how.T * (chunk + how.r) * (how.r + how.e) > kParallelGrain)
    {
      DecayScratch<T> scratch(how, chunk);
#pragma omp for schedule(static)
      for (int64_t n = 0; n < problems; ++n)
        decayed_product_one(how, a, b, c, w, la, out, st ? st + n * how.r * how.e : nullptr, n / how.heads,
                            n % how.heads, chunk, scratch);
    }
  });
}

void ssd_decay_gradient(const Tensor& dY, const Tensor& Y, const Tensor& dt, const Tensor& d_dt,
                        const DecayedProduct& how, Tensor& d_log_a) {
  visit_floating(Y.dtype(), "ssd_decay_gradient", [&](auto zero) {
    using T = decltype(zero);
    for_rows(how.batch * how.heads, how.T * how.e,
             math::DecayGradient<T>{dY.data<T>(), Y.data<T>(), dt.data<T>(), d_dt.data<T>(), d_log_a.data<T>(), how});
  });
}

}  // namespace ag::cpu
