// Softmax attention over a graph's edges (MaskMods::edges, core/ops.h; the ops in
// core/ops/edge_attention.cpp): the layout of the edge list the kernels read on
// both devices (core/cpu/edge_attention.cpp, cuda/edge_attention.cu).
//
// The E edges (i, j), query i sees key j, are numbered in CSR order (by query, each
// query's keys increasing): edge e's score, probability and their gradients are
// element e of a [B, Hq, E] tensor. The forward and dQ walk a query's edges (the
// CSR); dK and dV walk a key's (the CSC: the same edges by key, each key's by
// increasing query), so every output element is one thread's sum in a fixed order:
// no atomics, the same bits for any thread count.
#pragma once
#include <cstdint>

#include "core/random.h"  // AG_HOST_DEVICE

namespace ag {

// The edge list as the kernels read it, from one int64 buffer of
// (Tq + 1) + 3E + (Tk + 1) elements (EdgeGraph::packed, core/ops.h), in this order:
//   row_ptr  [Tq + 1]  query i's edges are e in [row_ptr[i], row_ptr[i + 1])
//   col      [E]       edge e's key j (increasing within a query's edges)
//   row      [E]       edge e's query i (the CSR's rows written out)
//   key_ptr  [Tk + 1]  key j's edges are key_edge[n] for n in [key_ptr[j], key_ptr[j + 1])
//   key_edge [E]       the edges by key, each key's by increasing query
struct EdgeLayout {
  const int64_t *row_ptr, *col, *row, *key_ptr, *key_edge;
  int64_t E;

  // The view of `packed` (numel elements) for Tq queries and Tk keys.
  AG_HOST_DEVICE static EdgeLayout of(const int64_t* packed, int64_t numel, int64_t Tq, int64_t Tk) {
    const int64_t E = (numel - (Tq + 1) - (Tk + 1)) / 3;
    const int64_t* col = packed + Tq + 1;
    return {packed, col, col + E, col + 2 * E, col + 2 * E + Tk + 1, E};
  }
};

}  // namespace ag
