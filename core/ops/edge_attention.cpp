// Softmax attention over a graph's edges (MaskMods::edges, EdgeGraph and the edge ops in
// core/ops.h): the dense masked attention softmax(scale·QKᵀ + M) V with M = 0 on the
// edges E and −∞ elsewhere, computed on the edges alone. Per batch entry and query head,
// for each edge e = (i, j) (query i sees key j) and E_i the edges of query i:
//   S_e = scale · q_i · k_j
//   A_e = exp(S_e) / Σ_{e' ∈ E_i} exp(S_e')          (= A_ij of the dense path: the hidden
//   Z_i = Σ_{e ∈ E_i} A_e v_j                           terms are exp(−∞) = 0 there)
// Work and memory O(E·d) per head, not O(Tq·Tk): on Cora (2708 nodes, 13,264 edges with
// the self loops) E is 0.18 % of Tq·Tk.
//
// Backward (docs/backprop.md §36: the dense path's equations with
// every sum over j restricted to the edges; a hidden pair's A_ij = 0 gives it dS_ij = 0,
// so the dense sums over all j equal these):
//   Z_i = Σ A_e v_j        →  dA_e = dZ_i · v_j,       dV_j = Σ_{e=(i,j)} A_e dZ_i
//   A = softmax over E_i   →  dS_e = A_e (dA_e − D_i),  D_i = Σ_{e ∈ E_i} A_e dA_e
//   S_e = scale · q_i·k_j  →  dQ_i = scale Σ_{e ∈ E_i} dS_e k_j,   dK_j = scale Σ_{e=(i,j)} dS_e q_i
// With grouped kv heads, a kv head's dK and dV also sum over the query heads that read it.
// A query with no edge: no A, Z_i = 0, lse = +inf, dQ_i = 0 (the op's rule for an empty row).
//
// The three lines are three ops, each with its backward below it, so that another score
// function of the edges (GAT's additive one: any S [B, Hq, E]) composes with edge_softmax
// and edge_product, and autograd chains them: attention() with AttentionScore::Additive takes
// S from edge_additive_scores, and with AttentionDropout applies it to A between edge_softmax
// and edge_product (edge_dropout), and with ScoreMods::indexed adds S_e += table[h, idx_e] (edge_bias),
// all three composed of existing ops. What each saves: edge_scores q and k,
// edge_softmax its output A [B, Hq, E] (O(E) per head, as dense saves A at O(Tq·Tk)),
// edge_product A and v.
#include <cmath>
#include <string>
#include <vector>

#include "core/ops/attention_functions.h"
#include "cuda/graph.h"

namespace ag {

namespace {

// The kernels' problem: sizes, the operands' strides (q's for q, Z and their gradients; kv's
// for k, v and theirs) and the scale; no mask (the edges are the mask).
AttentionShape edge_problem(int64_t B, int64_t Hq, int64_t Hkv, const EdgeGraph& graph, int64_t d, double scale,
                            HeadStrides q_at, HeadStrides kv_at) {
  return {.B = B, .Hq = Hq, .Hkv = Hkv, .Tq = graph.Tq, .Tk = graph.Tk, .d = d, .scale = scale, .mask = {},
          .q = q_at, .kv = kv_at};
}

void check_graph_device(const char* op, const EdgeGraph& graph, const Tensor& x) {
  AG_CHECK(graph.packed.defined(), op << ": the edge graph is empty (make it with edge_graph)");
  AG_CHECK(graph.packed.device() == x.device(), op << ": the edge graph is on " << name_of(graph.packed.device())
                                                   << ", the operands on " << name_of(x.device())
                                                   << " (edge_graph's device)");
}

// A per-edge tensor [B, Hq, E] of `graph`.
void check_per_edge(const char* op, const char* name, const Tensor& t, const EdgeGraph& graph) {
  AG_CHECK(t.dim() == 3 && t.size(2) == graph.E && t.size(0) > 0 && t.size(1) > 0,
           op << ": " << name << " " << describe(t) << " is not [B, Hq, E] with E = " << graph.E << " edges");
  check_graph_device(op, graph, t);
}

// k or v [B, Hkv, rows, d] (BHTD) or [B, rows, Hkv, d] (BTHD) read at its first Tk rows, beside q or A's
// B and Hq: its gradient, zero in the rows after Tk (which no kernel writes).
void check_keys(const char* op, const Tensor& kv, int64_t B, int64_t Hq, int64_t d, const EdgeGraph& graph,
                AttentionLayout layout) {
  AG_CHECK(kv.dim() == 4 && kv.size(0) == B && kv.size(3) == d && detail::heads_of(kv, layout) > 0 &&
               Hq % detail::heads_of(kv, layout) == 0 && detail::positions_of(kv, layout) >= graph.Tk,
           op << ": " << describe(kv) << " is not [B, Hkv, Tk, d] (BHTD) or [B, Tk, Hkv, d] (BTHD) with B = " << B
              << ", Hkv dividing Hq = " << Hq << ", at least Tk = " << graph.Tk << " rows and d = " << d);
}
Tensor key_gradient(const Tensor& kv, const EdgeGraph& graph, AttentionLayout layout) {
  return detail::positions_of(kv, layout) == graph.Tk ? detail::empty_like(kv)
                                                       : Tensor::zeros(kv.shape(), kv.dtype(), kv.device());
}

// x [B, H, T] at each edge's end: out[b, h, e] = x[b, h, index[e]] [B, H, E], index = the graph's
// rows (queries) or cols (keys). As embedding's lookup of the rows of x's [T, B·H] transpose, whose
// backward sums each edge's gradient into its end: dx[b, h, t] = Σ_{e: index[e] = t} dout[b, h, e].
Tensor at_edges(const Tensor& x, const Tensor& index) {
  const int64_t B = x.size(0), H = x.size(1), T = x.size(2), E = index.size(0);
  const Tensor per_edge = embedding(permute(x, {2, 0, 1}).reshape({T, B * H}), index);  // [E, B·H]
  return permute(per_edge.reshape({E, B, H}), {1, 2, 0});
}

// GAT's additive score on the edges (docs/backprop.md §37 with every pair an edge):
//   α_i = Σ_c q_ic,  β_j = Σ_c k_jc,  S_e = LeakyReLU_a(α_i + β_j)  for e = (i, j)
// as ops (sum, the gathers above, leaky_relu), whose backwards chain to
//   dα_i = Σ_{e ∈ E_i} dS_e·LeakyReLU′,  dβ_j = Σ_{e=(i,j)} dS_e·LeakyReLU′,  dQ_ic = dα_i,  dK_jc = dβ_j:
// the dense path's sums over the pairs with dS_ij ≠ 0. A kv head's β is read by its group's query heads.
Tensor edge_additive_scores(const Tensor& q, const Tensor& k, const EdgeGraph& graph, double slope,
                            AttentionLayout layout) {
  const int64_t Hq = detail::heads_of(q, layout);
  const Tensor alpha = sum(detail::heads_first(q, layout), 3);                                            // [B, Hq, Tq]
  const Tensor beta = sum(detail::repeat_kv_heads(sum(detail::heads_first(k, layout), 3, true), Hq), 3);  // [B, Hq, rows]
  return leaky_relu(at_edges(alpha, graph.rows()) + at_edges(beta, graph.cols()), slope);                 // [B, Hq, E]
}

// Ã = dropout(A) on the edges, with the dense path's counters (AttentionDropout): B·Hq·Tq·Tk of
// them drawn from the generator, edge e = (i, j) of head (b, h) kept when
// u(seed, offset + ((b·Hq + h)·Tq + i)·Tk + j) ≥ p, so that the same seed drops the same A_ij
// here as in composed and dense. Ã = A ∘ m with m_e = keep_e / (1 − p), a constant
// (computed on the host: O(B·Hq·E)), so that dA = dÃ ∘ m. A CUDA graph would replay the
// captured step's m at every step: on a CUDA tensor it is refused inside a capture, before the
// generator moves, so the capture fails, the step runs eagerly and draws what a step without
// graphs draws. (Today edge_graph's upload of the edge list fails a capture before this is
// reached; the check keeps it so should the edge list ever stay on the device.)
Tensor edge_dropout(const Tensor& A, const EdgeGraph& graph, const AttentionDropout& dropout) {
  if (!dropout.active()) return A;
  AG_CHECK(A.device() != Device::CUDA || !cuda::capturing_graph(),
           "edge attention's dropout draws its mask on the host, which a captured CUDA graph would replay "
           "unchanged: it cannot run inside a capture");
  Generator& g = dropout.generator ? *dropout.generator : default_generator();
  const int64_t B = A.size(0), Hq = A.size(1), Tq = graph.Tq, Tk = graph.Tk;
  const uint64_t seed = g.seed(), offset = g.advance(static_cast<uint64_t>(B * Hq * Tq * Tk));
  const Tensor host = graph.packed.to(Device::CPU);
  const EdgeLayout edges = EdgeLayout::of(host.data<int64_t>(), host.numel(), Tq, Tk);
  const double kept = 1.0 / (1.0 - dropout.p);
  std::vector<double> m(static_cast<size_t>(B * Hq * edges.E));
  for (int64_t bh = 0; bh < B * Hq; ++bh)
    for (int64_t e = 0; e < edges.E; ++e) {
      const uint64_t counter = offset + static_cast<uint64_t>((bh * Tq + edges.row[e]) * Tk + edges.col[e]);
      m[bh * edges.E + e] = random_uniform(seed, counter) >= dropout.p ? kept : 0.0;
    }
  return A * Tensor::from_vector(m, A.shape(), A.dtype()).to(A.device());
}

// Graphormer's bias on the edges (ScoreMods::indexed): S_e += table[h, idx_e], added where the
// dense path adds it (modified_scores, core/ops/attention.cpp: after the score, dot or additive,
// before the softmax), so that both compute the same S'. idx_e is the index's entry for edge e: the
// index [E] itself (one entry per edge in CSR order), or [Tq, Tk] read at e's (i, j) (only the
// edges' entries are read, so only they are checked). As ops: the table's [n, Hq] transpose read at
// idx by embedding, [E, Hq] → [Hq, E], broadcast over B. Their backwards (embedding's fixed-order
// scatter-add, the broadcast's sum over B) give
//   dtable[h, n] = Σ_b Σ_{e: idx_e = n} dS'[b, h, e],   dS = dS'
// the dense path's sum over the pairs (i, j) reading n, less its hidden pairs, whose dS_ij = 0.
Tensor edge_bias(const IndexedBias& bias, const EdgeGraph& graph, const Tensor& q, int64_t Hq, const std::string& where) {
  const Tensor& table = bias.table;
  const Tensor& index = bias.index;
  AG_CHECK(table.dim() == 2 && table.size(0) == Hq && table.size(1) > 0 && table.dtype() == q.dtype() &&
               table.device() == q.device(),
           where << ": indexed bias table " << describe(table) << " is not [Hq, n] with Hq = " << Hq
                 << " in q's dtype and device (" << describe(q) << ")");
  const bool per_pair = index.defined() && index.dim() == 2 && index.size(0) == graph.Tq && index.size(1) == graph.Tk;
  const bool per_edge = index.defined() && index.dim() == 1 && index.size(0) == graph.E;
  AG_CHECK((per_pair || per_edge) && index.dtype() == DType::Int64 && index.device() == q.device(),
           where << ": indexed bias index " << (index.defined() ? describe(index) : std::string("(none)"))
                 << " is not int64 [Tq, Tk] = " << to_string(Shape{graph.Tq, graph.Tk}) << " or [E] = ["
                 << graph.E << "] (one per edge, in the list's order) on q's device");
  const int64_t n = table.size(1);
  const Tensor packed = graph.packed.to(Device::CPU), host = index.to(Device::CPU);
  const EdgeLayout edges = EdgeLayout::of(packed.data<int64_t>(), packed.numel(), graph.Tq, graph.Tk);
  const int64_t* entries = host.data<int64_t>();
  std::vector<int64_t> idx(static_cast<size_t>(graph.E));
  for (int64_t e = 0; e < graph.E; ++e) {
    const int64_t i = edges.row[e], j = edges.col[e];
    idx[e] = per_pair ? entries[i * graph.Tk + j] : entries[e];
    AG_CHECK(idx[e] >= 0 && idx[e] < n, where << ": indexed bias index"
                                              << (per_pair ? "[" + std::to_string(i) + ", " + std::to_string(j) + "]"
                                                           : "[" + std::to_string(e) + "]")
                                              << " = " << idx[e] << " at the edge (" << i << ", " << j
                                              << ") is outside its table's " << n << " entries [0, " << n << ")");
  }
  const Tensor gathered = embedding(transpose(table, 0, 1), Tensor::from_indices(idx, {graph.E}).to(q.device()));
  return transpose(gathered, 0, 1);  // [Hq, E]
}

}  // namespace

Tensor EdgeGraph::rows() const { return packed.view(Tq + 1 + E, {E}); }
Tensor EdgeGraph::cols() const { return packed.view(Tq + 1, {E}); }

EdgeGraph edge_graph(const EdgeList& edges, int64_t Tq, int64_t Tk, Device device, const std::string& where) {
  AG_CHECK(edges.row_ptr.defined() && edges.col.defined(), where << ": an edge list needs both row_ptr and col");
  AG_CHECK(edges.row_ptr.dtype() == DType::Int64 && edges.row_ptr.dim() == 1 && edges.row_ptr.size(0) == Tq + 1,
           where << ": edge list row_ptr " << describe(edges.row_ptr) << " is not int64 [Tq + 1] = [" << Tq + 1 << "]");
  AG_CHECK(edges.col.dtype() == DType::Int64 && edges.col.dim() == 1,
           where << ": edge list col " << describe(edges.col) << " is not int64 [E]");
  const Tensor row_ptr_host = edges.row_ptr.to(Device::CPU), col_host = edges.col.to(Device::CPU);
  const int64_t *row_ptr = row_ptr_host.data<int64_t>(), *col = col_host.data<int64_t>();
  const int64_t E = edges.col.size(0);
  AG_CHECK(row_ptr[0] == 0, where << ": edge list row_ptr[0] = " << row_ptr[0] << " is not 0");
  for (int64_t i = 0; i < Tq; ++i)
    AG_CHECK(row_ptr[i + 1] >= row_ptr[i], where << ": edge list row_ptr is not non-decreasing: row_ptr[" << i + 1
                                                 << "] = " << row_ptr[i + 1] << " < row_ptr[" << i << "] = " << row_ptr[i]);
  AG_CHECK(row_ptr[Tq] == E, where << ": edge list row_ptr[Tq] = row_ptr[" << Tq << "] = " << row_ptr[Tq]
                                   << " is not the number of edges in col, " << E);
  // The CSR, each edge's query, then the CSC by a counting sort over the edges in CSR order
  // (stable: each key's edges come out by increasing query).
  const int64_t n = (Tq + 1) + 3 * E + (Tk + 1);
  std::vector<int64_t> packed(n);
  int64_t *out_row_ptr = packed.data(), *out_col = out_row_ptr + Tq + 1, *row = out_col + E, *key_ptr = row + E,
          *key_edge = key_ptr + Tk + 1;
  std::copy(row_ptr, row_ptr + Tq + 1, out_row_ptr);
  std::fill(key_ptr, key_ptr + Tk + 1, 0);
  for (int64_t i = 0; i < Tq; ++i)
    for (int64_t e = row_ptr[i]; e < row_ptr[i + 1]; ++e) {
      AG_CHECK(col[e] >= 0 && col[e] < Tk, where << ": edge list col[" << e << "] = " << col[e] << " (an edge of query "
                                                 << i << ") is outside the keys [0, Tk) = [0, " << Tk << ")");
      AG_CHECK(e == row_ptr[i] || col[e] > col[e - 1],
               where << ": edge list col[" << e << "] = " << col[e] << " does not come after col[" << e - 1
                     << "] = " << col[e - 1] << " among query " << i
                     << "'s edges (each query's keys increasing, each once)");
      out_col[e] = col[e];
      row[e] = i;
      ++key_ptr[col[e] + 1];
    }
  for (int64_t j = 0; j < Tk; ++j) key_ptr[j + 1] += key_ptr[j];
  std::vector<int64_t> next(key_ptr, key_ptr + Tk);
  for (int64_t e = 0; e < E; ++e) key_edge[next[col[e]]++] = e;
  return {.Tq = Tq, .Tk = Tk, .E = E, .packed = Tensor::from_indices(packed, {n}).to(device)};
}

Tensor edge_adjacency(const EdgeGraph& graph) {
  const Tensor host = graph.packed.to(Device::CPU);
  const EdgeLayout g = EdgeLayout::of(host.data<int64_t>(), host.numel(), graph.Tq, graph.Tk);
  std::vector<int64_t> adjacency(graph.Tq * graph.Tk, 0);
  for (int64_t e = 0; e < g.E; ++e) adjacency[g.row[e] * graph.Tk + g.col[e]] = 1;
  return Tensor::from_indices(adjacency, {graph.Tq, graph.Tk});
}

// S_e = scale · q_i · k_j  →  dQ_i = scale Σ_{e ∈ E_i} dS_e k_j,  dK_j = scale Σ_{e=(i,j)} dS_e q_i
// (each a sum of the dense dQ = scale·dS K, dK = scale·dSᵀ Q over its nonzero terms).
Tensor edge_scores(const Tensor& q, const Tensor& k, const EdgeGraph& graph, double scale, AttentionLayout layout) {
  detail::check_compatible("edge_scores", {&q, &k});
  check_graph_device("edge_scores", graph, q);
  AG_CHECK(q.dim() == 4 && detail::positions_of(q, layout) == graph.Tq && q.size(3) > 0,
           "edge_scores: q " << describe(q) << " is not [B, Hq, Tq, d] (BHTD) or [B, Tq, Hq, d] (BTHD) with Tq = "
                             << graph.Tq << " (the edge graph's queries)");
  const int64_t B = q.size(0), Hq = detail::heads_of(q, layout), d = q.size(3);
  check_keys("edge_scores: k", k, B, Hq, d, graph, layout);
  AG_CHECK(scale > 0 && std::isfinite(scale), "edge_scores: scale " << scale << " is not a positive number");
  const AttentionShape shape = edge_problem(B, Hq, detail::heads_of(k, layout), graph, d, scale,
                                            detail::head_strides(q, layout), detail::head_strides(k, layout));
  Tensor S = detail::empty_as({B, Hq, graph.E}, q);
  kernel::edge_scores(q, k, graph.packed, shape, S);
  return record("edge_scores", {q, k}, S,
                [Q = q.detach(), K = k.detach(), graph, shape, layout](const Tensor& dS) -> Gradients {
                  Tensor dQ = detail::empty_like(Q), dK = key_gradient(K, graph, layout);
                  kernel::edge_scores_backward(Q, K, dS, graph.packed, shape, dQ, dK);
                  return {dQ, dK};
                });
}

// A = softmax of S over each query's edges  →  dS_e = A_e (dA_e − Σ_{e' ∈ E_i} A_e' dA_e'):
// the dense softmax backward, whose hidden terms are 0. Saves its output A.
Tensor edge_softmax(const Tensor& S, const EdgeGraph& graph, Tensor* lse) {
  detail::check_compatible("edge_softmax", {&S});
  check_per_edge("edge_softmax", "S", S, graph);
  const int64_t B = S.size(0), Hq = S.size(1);
  const AttentionShape shape = edge_problem(B, Hq, Hq, graph, 0, 1.0, {}, {});
  Tensor A = detail::empty_like(S);
  Tensor row_lse = lse ? Tensor::empty({B, Hq, graph.Tq}, DType::Float64, S.device()) : Tensor();
  kernel::edge_softmax(S, graph.packed, shape, A, row_lse);
  if (lse) *lse = row_lse;
  return record("edge_softmax", {S}, A, [A_out = A.detach(), graph, shape](const Tensor& dA) -> Gradients {
    Tensor dS = detail::empty_like(A_out);
    kernel::edge_softmax_backward(A_out, dA, graph.packed, shape, dS);
    return {dS};
  });
}

// Z_i = Σ_{e ∈ E_i} A_e v_j  →  dA_e = dZ_i · v_j,  dV_j = Σ_{e=(i,j)} A_e dZ_i
// (the dense dA = dZ Vᵀ at the edges, and dV = Aᵀ dZ over A's nonzero entries).
Tensor edge_product(const Tensor& A, const Tensor& v, const EdgeGraph& graph, AttentionLayout layout) {
  detail::check_compatible("edge_product", {&A, &v});
  check_per_edge("edge_product", "A", A, graph);
  const int64_t B = A.size(0), Hq = A.size(1), d = v.dim() == 4 ? v.size(3) : 0;
  check_keys("edge_product: v", v, B, Hq, d, graph, layout);
  AG_CHECK(d > 0, "edge_product: v " << describe(v) << " has no width d");
  const Shape z_shape = layout == AttentionLayout::BTHD ? Shape{B, graph.Tq, Hq, d} : Shape{B, Hq, graph.Tq, d};
  Tensor Z = detail::empty_as(z_shape, A);
  const AttentionShape shape = edge_problem(B, Hq, detail::heads_of(v, layout), graph, d, 1.0,
                                            detail::head_strides(Z, layout), detail::head_strides(v, layout));
  kernel::edge_product(A, v, graph.packed, shape, Z);
  return record("edge_product", {A, v}, Z,
                [A_saved = A.detach(), V = v.detach(), graph, shape, layout](const Tensor& dZ) -> Gradients {
                  Tensor dA = detail::empty_like(A_saved), dV = key_gradient(V, graph, layout);
                  kernel::edge_product_backward(A_saved, V, dZ, graph.packed, shape, dA, dV);
                  return {dA, dV};
                });
}

namespace detail {

Tensor edge_attention(const Tensor& q, const Tensor& k, const Tensor& v, const SoftmaxAttention& softmax,
                      const AttentionSpec& spec, AttentionInternals* internals) {
  const std::string where = "attention: q " + to_string(q.shape()) + ", k " + to_string(k.shape()) + ", v " +
                            to_string(v.shape()) + ", an edge list (MaskMods::edges)";
  const MaskMods& masks = softmax.masks;
  // The edges are the whole mask: what else would restrict them is refused, not silently dropped.
  AG_CHECK(!spec.causal && !softmax.pattern.limited(),
           where << ": the edges are the whole mask: causal and sparse patterns are not supported with them "
                    "(leave the edges to a later key out of the list instead)");
  AG_CHECK(!masks.prefix && !masks.documents.defined() && !masks.parents.defined() && !masks.adjacency.defined() &&
               !masks.custom,
           where << ": the edges are the whole mask: no other mask function (prefix, documents, parents, "
                    "adjacency, custom) may be given with them");
  const ScoreMods& mods = softmax.mods;
  AG_CHECK(!mods.soft_cap && !mods.sinks.defined() && !mods.relative.table.defined() && !mods.custom.value,
           where << ": of the score modifiers (ScoreMods) only the indexed bias (ScoreMods::indexed) is supported "
                    "over an edge list, not soft_cap, sinks, relative or custom");
  const int64_t Tq = positions_of(q, spec.layout), kv_rows = positions_of(k, spec.layout);
  const int64_t Tk = softmax.kv_length.value_or(kv_rows);
  AG_CHECK(Tk >= 0 && Tk <= kv_rows, where << ": kv_length " << Tk << " is outside [0, " << kv_rows << "]");
  const bool additive = softmax.score == AttentionScore::Additive;
  AG_CHECK(!additive || !softmax.scale,
           where << ": additive scores (AttentionScore::Additive) take no scale: leave scale unset");
  AG_CHECK(std::isfinite(softmax.leaky_slope), where << ": leaky_slope " << softmax.leaky_slope << " is not a finite number");
  AG_CHECK(softmax.dropout.p >= 0 && softmax.dropout.p < 1,
           where << ": attention dropout p = " << softmax.dropout.p << " is outside [0, 1)");
  const double scale = softmax.scale.value_or(1.0 / std::sqrt(static_cast<double>(q.size(3))));
  AG_CHECK(scale > 0 && std::isfinite(scale), where << ": scale " << scale << " is not a positive number");
  const EdgeGraph graph = edge_graph(masks.edges, Tq, Tk, q.device(), where);
  Tensor S = additive ? edge_additive_scores(q, k, graph, softmax.leaky_slope, spec.layout)
                      : edge_scores(q, k, graph, scale, spec.layout);  // [B, Hq, E]
  if (mods.indexed.table.defined()) S = S + edge_bias(mods.indexed, graph, q, heads_of(q, spec.layout), where);  // S'
  Tensor lse;
  const Tensor A = edge_softmax(S, graph, internals ? &lse : nullptr);
  if (internals) *internals = {.probabilities = A.detach(), .log_sum_exp = lse};
  return edge_product(edge_dropout(A, graph, softmax.dropout), v, graph, spec.layout);  // Z = Ã V
}

}  // namespace detail

}  // namespace ag
