// Attention over a graph's edges on the GPU (core/kernels.inc). Reference:
// core/cpu/edge_attention.cpp, the same sums in the same order (in double);
// tests/test_edge_attention.cpp runs every case on both devices.
//
// Thread mapping: one thread per query row (b, h, i) for the per-edge values (S, A,
// dA, dS), which walk the row's few edges; one thread per output element (row, c) for
// the products: Z and dQ by query row over its edges (the CSR), dK and dV by key row
// (b, kv head, j) over the query heads of its group and its edges (the CSC). Each
// element is one thread's sum in a fixed order: no atomics, the same bits every run.
#include "cuda/cuda.h"
#include "cuda/launch.cuh"

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

EdgeLayout edge_layout(const Tensor& graph, const AttentionShape& s) {
  return EdgeLayout::of(ptr<const int64_t>(graph), graph.numel(), s.Tq, s.Tk);
}

template <class T> struct EdgeScores {  // S_e = scale · q_i · k_j
  const T *q, *k;
  T* s;
  EdgeLayout g;
  AttentionShape shape;
  __device__ void operator()(int64_t row) const {
    const EdgeRow r = edge_row(shape, row, g.E);
    const T* q_i = q + shape.q.at(r.b, r.h, r.i);
    const int64_t hk = r.h / shape.group();
    for (int64_t e = g.row_ptr[r.i]; e < g.row_ptr[r.i + 1]; ++e) {
      const T* k_j = k + shape.kv.at(r.b, hk, g.col[e]);
      double sum = 0;
      for (int64_t c = 0; c < shape.d; ++c) sum += static_cast<double>(q_i[c]) * static_cast<double>(k_j[c]);
      s[r.edges + e] = static_cast<T>(shape.scale * sum);
    }
  }
};

template <class T> struct EdgeQueryGradient {  // dQ_i = scale · Σ_{e=(i,j)} dS_e k_j, one thread per (row, c)
  const T *k, *ds;
  T* dq;
  EdgeLayout g;
  AttentionShape shape;
  __device__ void operator()(int64_t idx) const {
    const int64_t c = idx % shape.d;
    const EdgeRow r = edge_row(shape, idx / shape.d, g.E);
    const int64_t hk = r.h / shape.group();
    double sum = 0;
    for (int64_t e = g.row_ptr[r.i]; e < g.row_ptr[r.i + 1]; ++e)
      sum += static_cast<double>(ds[r.edges + e]) * static_cast<double>(k[shape.kv.at(r.b, hk, g.col[e]) + c]);
    dq[shape.q.at(r.b, r.h, r.i) + c] = static_cast<T>(shape.scale * sum);
  }
};

// Σ_{h in j's group} Σ_{e=(i,j)} w[(b, h), e] · x[(b, h, i)][c] for key row (b, hk, j), times `factor`,
// one thread per (key row, c): dK (w = dS, x = Q, factor scale) and dV (w = A, x = dZ, factor 1).
template <class T> struct EdgeKeyGradient {
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

template <class T> struct EdgeProduct {  // Z_i = Σ_{e=(i,j)} A_e v_j, one thread per (row, c)
  const T *a, *v;
  T* z;
  EdgeLayout g;
  AttentionShape shape;
  __device__ void operator()(int64_t idx) const {
    const int64_t c = idx % shape.d;
    const EdgeRow r = edge_row(shape, idx / shape.d, g.E);
    const int64_t hk = r.h / shape.group();
    double sum = 0;
    for (int64_t e = g.row_ptr[r.i]; e < g.row_ptr[r.i + 1]; ++e)
      sum += static_cast<double>(a[r.edges + e]) * static_cast<double>(v[shape.kv.at(r.b, hk, g.col[e]) + c]);
    z[shape.q.at(r.b, r.h, r.i) + c] = static_cast<T>(sum);
  }
};

template <class T> struct EdgeProbabilityGradient {  // dA_e = dZ_i · v_j
  const T *v, *dz;
  T* da;
  EdgeLayout g;
  AttentionShape shape;
  __device__ void operator()(int64_t row) const {
    const EdgeRow r = edge_row(shape, row, g.E);
    const T* dz_i = dz + shape.q.at(r.b, r.h, r.i);
    const int64_t hk = r.h / shape.group();
    for (int64_t e = g.row_ptr[r.i]; e < g.row_ptr[r.i + 1]; ++e) {
      const T* v_j = v + shape.kv.at(r.b, hk, g.col[e]);
      double sum = 0;
      for (int64_t c = 0; c < shape.d; ++c) sum += static_cast<double>(dz_i[c]) * static_cast<double>(v_j[c]);
      da[r.edges + e] = static_cast<T>(sum);
    }
  }
};

int64_t query_rows(const AttentionShape& s) { return s.B * s.Hq * s.Tq; }
int64_t key_rows(const AttentionShape& s) { return s.B * s.Hkv * s.Tk; }

}  // namespace

void edge_scores(const Tensor& Q, const Tensor& K, const Tensor& graph, const AttentionShape& shape, Tensor& S) {
  visit_floating(Q.dtype(), "edge_scores", [&](auto zero) {
    using T = decltype(zero);
    for_each_index(query_rows(shape), EdgeScores<T>{ptr<const T>(Q), ptr<const T>(K), ptr<T>(S), edge_layout(graph, shape), shape});
  });
}

void edge_scores_backward(const Tensor& Q, const Tensor& K, const Tensor& dS, const Tensor& graph,
                          const AttentionShape& shape, Tensor& dQ, Tensor& dK) {
  visit_floating(Q.dtype(), "edge_scores_backward", [&](auto zero) {
    using T = decltype(zero);
    const EdgeLayout g = edge_layout(graph, shape);
    for_each_index(query_rows(shape) * shape.d, EdgeQueryGradient<T>{ptr<const T>(K), ptr<const T>(dS), ptr<T>(dQ), g, shape});
    for_each_index(key_rows(shape) * shape.d,
                   EdgeKeyGradient<T>{ptr<const T>(dS), ptr<const T>(Q), ptr<T>(dK), g, shape, shape.scale});
  });
}

void edge_softmax(const Tensor& S, const Tensor& graph, const AttentionShape& shape, Tensor& A, Tensor& lse) {
  visit_floating(S.dtype(), "edge_softmax", [&](auto zero) {
    using T = decltype(zero);
    for_each_index(query_rows(shape), EdgeSoftmax<T>{ptr<const T>(S), ptr<T>(A), lse.defined() ? ptr<double>(lse) : nullptr,
                                                     edge_layout(graph, shape), shape});
  });
}

void edge_softmax_backward(const Tensor& A, const Tensor& dA, const Tensor& graph, const AttentionShape& shape,
                           Tensor& dS) {
  visit_floating(A.dtype(), "edge_softmax_backward", [&](auto zero) {
    using T = decltype(zero);
    for_each_index(query_rows(shape),
                   EdgeSoftmaxBackward<T>{ptr<const T>(A), ptr<const T>(dA), ptr<T>(dS), edge_layout(graph, shape), shape});
  });
}

void edge_product(const Tensor& A, const Tensor& V, const Tensor& graph, const AttentionShape& shape, Tensor& Z) {
  visit_floating(A.dtype(), "edge_product", [&](auto zero) {
    using T = decltype(zero);
    for_each_index(query_rows(shape) * shape.d,
                   EdgeProduct<T>{ptr<const T>(A), ptr<const T>(V), ptr<T>(Z), edge_layout(graph, shape), shape});
  });
}

void edge_product_backward(const Tensor& A, const Tensor& V, const Tensor& dZ, const Tensor& graph,
                           const AttentionShape& shape, Tensor& dA, Tensor& dV) {
  visit_floating(A.dtype(), "edge_product_backward", [&](auto zero) {
    using T = decltype(zero);
    const EdgeLayout g = edge_layout(graph, shape);
    for_each_index(query_rows(shape), EdgeProbabilityGradient<T>{ptr<const T>(V), ptr<const T>(dZ), ptr<T>(dA), g, shape});
    for_each_index(key_rows(shape) * shape.d,
                   EdgeKeyGradient<T>{ptr<const T>(A), ptr<const T>(dZ), ptr<T>(dV), g, shape, 1.0});
  });
}

}  // namespace ag::cuda
