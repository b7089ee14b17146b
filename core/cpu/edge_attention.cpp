// Attention over a graph's edges on the CPU (core/kernels.inc; the ops and their
// derivation: core/ops/edge_attention.cpp, docs/backprop.md §36).
//
// Thread mapping: OpenMP over rows. A query row (b, h, i) owns its edges' S, A, dA,
// dS and its row of Z and dQ; a key row (b, kv head, j) owns its rows of dK and dV,
// summing over the query heads of its group, then over its edges in the CSC's order
// (by increasing query). No element is written by two threads and every sum has one
// fixed order, in double: the same bits for any thread count. Work is O(E·d) per
// head: nothing here is O(Tq·Tk).
#include <cmath>
#include <vector>

#include "core/cpu/cpu.h"
#include "core/cpu/loops.h"

namespace ag::cpu {
namespace {

// A query row = (b·Hq + h)·Tq + i; its edges' elements in [B, Hq, E] start at (b·Hq + h)·E.
struct EdgeQueryRow {
  int64_t b, h, i, edges;  // edges: the offset of head (b, h) in a [B, Hq, E] tensor
};
EdgeQueryRow edge_query_row(const AttentionShape& s, int64_t row, int64_t E) {
  const int64_t bh = row / s.Tq;
  return {bh / s.Hq, bh % s.Hq, row % s.Tq, bh * E};
}

// Rows' work for for_rows' grain: a row's share of the edges, times the width.
int64_t edge_row_cost(const AttentionShape& s, const EdgeLayout& g, int64_t rows) {
  return (g.E / std::max<int64_t>(1, rows) + 1) * s.d;
}

template <class T> double dot_in_double(const T* x, const T* y, int64_t d) {
  double sum = 0;
  for (int64_t c = 0; c < d; ++c) sum += static_cast<double>(x[c]) * static_cast<double>(y[c]);
  return sum;
}

// A row's d sums in double, one per thread (rows run in parallel): each element's terms are
// added in the edges' order, the same order as the CUDA kernels' one thread per element.
double* zeroed_row(int64_t d) {
  thread_local std::vector<double> row;
  row.assign(static_cast<size_t>(d), 0.0);
  return row.data();
}
template <class T> void add_scaled(double* sum, double weight, const T* x, int64_t d) {
  for (int64_t c = 0; c < d; ++c) sum[c] += weight * static_cast<double>(x[c]);
}
template <class T> void store_scaled(T* out, double factor, const double* sum, int64_t d) {
  for (int64_t c = 0; c < d; ++c) out[c] = static_cast<T>(factor * sum[c]);
}

EdgeLayout edge_layout_of(const Tensor& graph, const AttentionShape& s) {
  return EdgeLayout::of(graph.data<int64_t>(), graph.numel(), s.Tq, s.Tk);
}

// For each key row (b, kv head hk, j) and width c: body(b, hk, j, at) with `at` its row of K/V.
template <class Body> void for_edge_key_rows(const AttentionShape& s, const EdgeLayout& g, Body&& body) {
  const int64_t rows = s.B * s.Hkv * s.Tk;
  for_rows(rows, edge_row_cost(s, g, s.Tk) * s.group(), [&](int64_t row) {
    const int64_t bk = row / s.Tk, b = bk / s.Hkv, hk = bk % s.Hkv, j = row % s.Tk;
    body(b, hk, j, s.kv.at(b, hk, j));
  });
}

}  // namespace

void edge_scores(const Tensor& Q, const Tensor& K, const Tensor& graph, const AttentionShape& shape, Tensor& S) {
  visit_floating(Q.dtype(), "edge_scores", [&](auto zero) {
    using T = decltype(zero);
    const EdgeLayout g = edge_layout_of(graph, shape);
    const T *q = Q.data<T>(), *k = K.data<T>();
    T* s = S.data<T>();
    const int64_t rows = shape.B * shape.Hq * shape.Tq;
    for_rows(rows, edge_row_cost(shape, g, shape.Tq), [&](int64_t row) {
      const EdgeQueryRow r = edge_query_row(shape, row, g.E);
      const T* q_i = q + shape.q.at(r.b, r.h, r.i);
      const int64_t hk = r.h / shape.group();
      for (int64_t e = g.row_ptr[r.i]; e < g.row_ptr[r.i + 1]; ++e)  // S_e = scale · q_i · k_j
        s[r.edges + e] = static_cast<T>(shape.scale * dot_in_double(q_i, k + shape.kv.at(r.b, hk, g.col[e]), shape.d));
    });
  });
}

void edge_scores_backward(const Tensor& Q, const Tensor& K, const Tensor& dS, const Tensor& graph,
                          const AttentionShape& shape, Tensor& dQ, Tensor& dK) {
  visit_floating(Q.dtype(), "edge_scores_backward", [&](auto zero) {
    using T = decltype(zero);
    const EdgeLayout g = edge_layout_of(graph, shape);
    const T *q = Q.data<T>(), *k = K.data<T>(), *ds = dS.data<T>();
    T *dq = dQ.data<T>(), *dk = dK.data<T>();
    const int64_t d = shape.d, rows = shape.B * shape.Hq * shape.Tq;
    // dQ_i = scale · Σ_{e=(i,j)} dS_e k_j
    for_rows(rows, edge_row_cost(shape, g, shape.Tq), [&](int64_t row) {
      const EdgeQueryRow r = edge_query_row(shape, row, g.E);
      const int64_t hk = r.h / shape.group();
      double* sum = zeroed_row(d);
      for (int64_t e = g.row_ptr[r.i]; e < g.row_ptr[r.i + 1]; ++e)
        add_scaled(sum, static_cast<double>(ds[r.edges + e]), k + shape.kv.at(r.b, hk, g.col[e]), d);
      store_scaled(dq + shape.q.at(r.b, r.h, r.i), shape.scale, sum, d);
    });
    // dK_j = scale · Σ_{h in j's group} Σ_{e=(i,j)} dS_e q_i, by the CSC
    for_edge_key_rows(shape, g, [&](int64_t b, int64_t hk, int64_t j, int64_t at) {
      double* sum = zeroed_row(d);
      for (int64_t h = hk * shape.group(); h < (hk + 1) * shape.group(); ++h)
        for (int64_t n = g.key_ptr[j]; n < g.key_ptr[j + 1]; ++n) {
          const int64_t e = g.key_edge[n];
          add_scaled(sum, static_cast<double>(ds[(b * shape.Hq + h) * g.E + e]), q + shape.q.at(b, h, g.row[e]), d);
        }
      store_scaled(dk + at, shape.scale, sum, d);
    });
  });
}

void edge_softmax(const Tensor& S, const Tensor& graph, const AttentionShape& shape, Tensor& A, Tensor& lse) {
  visit_floating(S.dtype(), "edge_softmax", [&](auto zero) {
    using T = decltype(zero);
    const EdgeLayout g = edge_layout_of(graph, shape);
    const T* s = S.data<T>();
    T* a = A.data<T>();
    double* row_lse = lse.defined() ? lse.data<double>() : nullptr;
    const int64_t rows = shape.B * shape.Hq * shape.Tq;
    for_rows(rows, edge_row_cost(shape, g, shape.Tq), [&](int64_t row) {
      const EdgeQueryRow r = edge_query_row(shape, row, g.E);
      const int64_t first = r.edges + g.row_ptr[r.i], last = r.edges + g.row_ptr[r.i + 1];
      if (first == last) {  // no edge: no distribution (Z = 0, no gradient), lse = log 0 taken as +inf
        if (row_lse) row_lse[row] = math::kInf<double>;
        return;
      }
      // Subtract the row's max: exp never overflows, and the largest term is exactly 1.
      double max = -math::kInf<double>, sum = 0;
      for (int64_t e = first; e < last; ++e) max = std::max(max, static_cast<double>(s[e]));
      // The terms, kept in double until the division (a row has few edges: a small buffer).
      thread_local std::vector<double> terms;
      terms.resize(static_cast<size_t>(last - first));
      for (int64_t e = first; e < last; ++e) sum += terms[e - first] = std::exp(static_cast<double>(s[e]) - max);
      for (int64_t e = first; e < last; ++e) a[e] = static_cast<T>(terms[e - first] / sum);
      if (row_lse) row_lse[row] = max + std::log(sum);
    });
  });
}

void edge_softmax_backward(const Tensor& A, const Tensor& dA, const Tensor& graph, const AttentionShape& shape,
                           Tensor& dS) {
  visit_floating(A.dtype(), "edge_softmax_backward", [&](auto zero) {
    using T = decltype(zero);
    const EdgeLayout g = edge_layout_of(graph, shape);
    const T *a = A.data<T>(), *da = dA.data<T>();
    T* ds = dS.data<T>();
    for_rows(shape.B * shape.Hq * shape.Tq, edge_row_cost(shape, g, shape.Tq), [&](int64_t row) {
      const EdgeQueryRow r = edge_query_row(shape, row, g.E);
      const int64_t first = r.edges + g.row_ptr[r.i], last = r.edges + g.row_ptr[r.i + 1];
      double D = 0;  // Σ_e A_e dA_e
      for (int64_t e = first; e < last; ++e) D += static_cast<double>(a[e]) * static_cast<double>(da[e]);
      for (int64_t e = first; e < last; ++e)  // dS_e = A_e (dA_e − D); dS may be dA: each read before its write
        ds[e] = static_cast<T>(static_cast<double>(a[e]) * (static_cast<double>(da[e]) - D));
    });
  });
}

void edge_product(const Tensor& A, const Tensor& V, const Tensor& graph, const AttentionShape& shape, Tensor& Z) {
  visit_floating(A.dtype(), "edge_product", [&](auto zero) {
    using T = decltype(zero);
    const EdgeLayout g = edge_layout_of(graph, shape);
    const T *a = A.data<T>(), *v = V.data<T>();
    T* z = Z.data<T>();
    for_rows(shape.B * shape.Hq * shape.Tq, edge_row_cost(shape, g, shape.Tq), [&](int64_t row) {
      const EdgeQueryRow r = edge_query_row(shape, row, g.E);
      const int64_t hk = r.h / shape.group();
      double* sum = zeroed_row(shape.d);  // Z_i = Σ_{e=(i,j)} A_e v_j
      for (int64_t e = g.row_ptr[r.i]; e < g.row_ptr[r.i + 1]; ++e)
        add_scaled(sum, static_cast<double>(a[r.edges + e]), v + shape.kv.at(r.b, hk, g.col[e]), shape.d);
      store_scaled(z + shape.q.at(r.b, r.h, r.i), 1.0, sum, shape.d);
    });
  });
}

void edge_product_backward(const Tensor& A, const Tensor& V, const Tensor& dZ, const Tensor& graph,
                           const AttentionShape& shape, Tensor& dA, Tensor& dV) {
  visit_floating(A.dtype(), "edge_product_backward", [&](auto zero) {
    using T = decltype(zero);
    const EdgeLayout g = edge_layout_of(graph, shape);
    const T *a = A.data<T>(), *v = V.data<T>(), *dz = dZ.data<T>();
    T *da = dA.data<T>(), *dv = dV.data<T>();
    const int64_t d = shape.d;
    // dA_e = dZ_i · v_j
    for_rows(shape.B * shape.Hq * shape.Tq, edge_row_cost(shape, g, shape.Tq), [&](int64_t row) {
      const EdgeQueryRow r = edge_query_row(shape, row, g.E);
      const int64_t hk = r.h / shape.group();
      const T* dz_i = dz + shape.q.at(r.b, r.h, r.i);
      for (int64_t e = g.row_ptr[r.i]; e < g.row_ptr[r.i + 1]; ++e)
        da[r.edges + e] = static_cast<T>(dot_in_double(dz_i, v + shape.kv.at(r.b, hk, g.col[e]), d));
    });
    // dV_j = Σ_{h in j's group} Σ_{e=(i,j)} A_e dZ_i, by the CSC
    for_edge_key_rows(shape, g, [&](int64_t b, int64_t hk, int64_t j, int64_t at) {
      double* sum = zeroed_row(d);
      for (int64_t h = hk * shape.group(); h < (hk + 1) * shape.group(); ++h)
        for (int64_t n = g.key_ptr[j]; n < g.key_ptr[j + 1]; ++n) {
          const int64_t e = g.key_edge[n];
          add_scaled(sum, static_cast<double>(a[(b * shape.Hq + h) * g.E + e]), dz + shape.q.at(b, h, g.row[e]), d);
        }
      store_scaled(dv + at, 1.0, sum, d);
    });
  });
}

}  // namespace ag::cpu
