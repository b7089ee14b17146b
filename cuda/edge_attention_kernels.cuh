// Attention over a graph's edges on the GPU: the kernels (cuda/edge_attention.cu launches them
// through the launches below) and the launches written once for any device that runs a functor
// per index. Device code that a host build compiles too: tests/test_cuda_on_host.cpp runs it on
// the host against core/cpu/edge_attention.cpp, the same sums in the same order (in double).
//
// Thread mapping: one thread per query row (b, h, i) for the per-edge values (S, A,
// dA, dS), which walk the row's few edges; one thread per output element (row, c) for
// the products: Z and dQ by query row over its edges (the CSR), dK and dV by key row
// (b, kv head, j) over the query heads of its group and its edges (the CSC). Each
// element is one thread's sum in a fixed order: no atomics, the same bits every run.
#pragma once
#include <cstdint>

#include "core/attention_math.h"
#include "core/edge_attention_math.h"

namespace ag::cuda {
namespace {

using math::kInf;

// Query row = (b·Hq + h)·Tq + i, and the offset of head (b, h) in a [B, Hq, E] tensor.
struct EdgeRow {
  int64_t b, h, i, edges;
};
__device__ inline EdgeRow edge_row(const AttentionShape& s, int64_t row, int64_t E) {
  const int64_t bh = row / s.Tq;
  return {bh / s.Hq, bh % s.Hq, row % s.Tq, bh * E};
}

// factor · x_i · y_j for every edge e = (i, j) of query row (b, h, i), one thread per query row:
// S (x = Q, y = K, factor scale) and dA (x = dZ, y = V, factor 1). x laid out as Q, y as K.
template <class T> struct EdgeDots {
  const T *x, *y;
  T* out;  // [B, Hq, E]
  EdgeLayout g;
  AttentionShape shape;
  double factor;
  __device__ void operator()(int64_t row) const {
    const EdgeRow r = edge_row(shape, row, g.E);
    const T* x_i = x + shape.q.at(r.b, r.h, r.i);
    const int64_t hk = r.h / shape.group();
    for (int64_t e = g.row_ptr[r.i]; e < g.row_ptr[r.i + 1]; ++e) {
      const T* y_j = y + shape.kv.at(r.b, hk, g.col[e]);
      double sum = 0;
      for (int64_t c = 0; c < shape.d; ++c) sum += static_cast<double>(x_i[c]) * static_cast<double>(y_j[c]);
      out[r.edges + e] = static_cast<T>(factor * sum);
    }
  }
};

// factor · Σ_{e=(i,j)} w_e y_j[c] for query row (b, h, i), one thread per (query row, c): dQ (w = dS,
// y = K, factor scale) and Z (w = A, y = V, factor 1). out laid out as Q, y as K.
template <class T> struct EdgeQuerySums {
  const T *w, *y;
  T* out;
  EdgeLayout g;
  AttentionShape shape;
  double factor;
  __device__ void operator()(int64_t idx) const {
    const int64_t c = idx % shape.d;
    const EdgeRow r = edge_row(shape, idx / shape.d, g.E);
    const int64_t hk = r.h / shape.group();
    double sum = 0;
    for (int64_t e = g.row_ptr[r.i]; e < g.row_ptr[r.i + 1]; ++e)
      sum += static_cast<double>(w[r.edges + e]) * static_cast<double>(y[shape.kv.at(r.b, hk, g.col[e]) + c]);
    out[shape.q.at(r.b, r.h, r.i) + c] = static_cast<T>(factor * sum);
  }
};

// factor · Σ_{h in j's group} Σ_{e=(i,j)} w[(b, h), e] · x[(b, h, i)][c] for key row (b, hk, j), one
// thread per (key row, c): dK (w = dS, x = Q, factor scale) and dV (w = A, x = dZ, factor 1).
template <class T> struct EdgeKeySums {
  const T *w, *x;
  T* out;
  EdgeLayout g;
  AttentionShape shape;
  double factor;
  __device__ void operator()(int64_t idx) const {
    const int64_t c = idx % shape.d, row = idx / shape.d;
    const int64_t bk = row / shape.Tk, b = bk / shape.Hkv, hk = bk % shape.Hkv, j = row % shape.Tk;
    double sum = 0;
    for (int64_t h = hk * shape.group(); h < (hk + 1) * shape.group(); ++h)
      for (int64_t n = g.key_ptr[j]; n < g.key_ptr[j + 1]; ++n) {
        const int64_t e = g.key_edge[n];
        sum += static_cast<double>(w[(b * shape.Hq + h) * g.E + e]) * static_cast<double>(x[shape.q.at(b, h, g.row[e]) + c]);
      }
    out[shape.kv.at(b, hk, j) + c] = static_cast<T>(factor * sum);
  }
};

template <class T> struct EdgeSoftmax {  // A = softmax of S over the row's edges; lse (+inf: no edge)
  const T* s;
  T* a;
  double* lse;
  EdgeLayout g;
  AttentionShape shape;
  __device__ void operator()(int64_t row) const {
    const EdgeRow r = edge_row(shape, row, g.E);
    const int64_t first = r.edges + g.row_ptr[r.i], last = r.edges + g.row_ptr[r.i + 1];
    if (first == last) {
      if (lse) lse[row] = kInf<double>;
      return;
    }
    double max = -kInf<double>, sum = 0;
    for (int64_t e = first; e < last; ++e) max = fmax(max, static_cast<double>(s[e]));
    for (int64_t e = first; e < last; ++e) sum += exp(static_cast<double>(s[e]) - max);
    for (int64_t e = first; e < last; ++e) a[e] = static_cast<T>(exp(static_cast<double>(s[e]) - max) / sum);
    if (lse) lse[row] = max + log(sum);
  }
};

template <class T> struct EdgeSoftmaxBackward {  // dS_e = A_e (dA_e − Σ_e' A_e' dA_e'); dS may be dA
  const T *a, *da;
  T* ds;
  EdgeLayout g;
  AttentionShape shape;
  __device__ void operator()(int64_t row) const {
    const EdgeRow r = edge_row(shape, row, g.E);
    const int64_t first = r.edges + g.row_ptr[r.i], last = r.edges + g.row_ptr[r.i + 1];
    double D = 0;
    for (int64_t e = first; e < last; ++e) D += static_cast<double>(a[e]) * static_cast<double>(da[e]);
    for (int64_t e = first; e < last; ++e)
      ds[e] = static_cast<T>(static_cast<double>(a[e]) * (static_cast<double>(da[e]) - D));
  }
};

inline int64_t query_rows(const AttentionShape& s) { return s.B * s.Hq * s.Tq; }
inline int64_t key_rows(const AttentionShape& s) { return s.B * s.Hkv * s.Tk; }

// The kernels' launches on a device `dev` (cuda/launch.cuh's Gpu; the host tests' Device): dev(count, f)
// calls f(i) for every i < count. Shapes, layouts and contracts: core/kernels.inc.
template <class T, class Device>
void edge_scores_launch(const Device& dev, const T* Q, const T* K, const EdgeLayout& g, const AttentionShape& s, T* S) {
  dev(query_rows(s), EdgeDots<T>{Q, K, S, g, s, s.scale});
}

template <class T, class Device>
void edge_scores_backward_launch(const Device& dev, const T* Q, const T* K, const T* dS, const EdgeLayout& g,
                                 const AttentionShape& s, T* dQ, T* dK) {
  dev(query_rows(s) * s.d, EdgeQuerySums<T>{dS, K, dQ, g, s, s.scale});
  dev(key_rows(s) * s.d, EdgeKeySums<T>{dS, Q, dK, g, s, s.scale});
}

template <class T, class Device>
void edge_softmax_launch(const Device& dev, const T* S, const EdgeLayout& g, const AttentionShape& s, T* A, double* lse) {
  dev(query_rows(s), EdgeSoftmax<T>{S, A, lse, g, s});
}

template <class T, class Device>
void edge_softmax_backward_launch(const Device& dev, const T* A, const T* dA, const EdgeLayout& g,
                                  const AttentionShape& s, T* dS) {
  dev(query_rows(s), EdgeSoftmaxBackward<T>{A, dA, dS, g, s});
}

template <class T, class Device>
void edge_product_launch(const Device& dev, const T* A, const T* V, const EdgeLayout& g, const AttentionShape& s, T* Z) {
  dev(query_rows(s) * s.d, EdgeQuerySums<T>{A, V, Z, g, s, 1.0});
}

template <class T, class Device>
void edge_product_backward_launch(const Device& dev, const T* A, const T* V, const T* dZ, const EdgeLayout& g,
                                  const AttentionShape& s, T* dA, T* dV) {
  dev(query_rows(s), EdgeDots<T>{dZ, V, dA, g, s, 1.0});
  dev(key_rows(s) * s.d, EdgeKeySums<T>{A, dZ, dV, g, s, 1.0});
}

}  // namespace
}  // namespace ag::cuda
