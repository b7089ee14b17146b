// Softmax attention over a graph's edges (MaskMods::edges, core/ops/edge_attention.cpp):
// equal to the dense masked path (the same graph as MaskMods::adjacency) through composed,
// dense and flash in float64 to 1e-12, the output, lse, A and every gradient, on random
// graphs with self loops, empty rows, sizes no tile divides, grouped kv heads, both
// layouts, a scale and a longer cache; float64 gradcheck, also of the edge ops composed
// with scores of the caller's own (as a GAT layer's); GAT's additive score and attention dropout
// (SoftmaxAttention::score, dropout) equal to composed and dense with the same seed, dropout's
// gradcheck with a fixed seed, E[Z] and eval; float32 close to float64; the same bits on one
// thread; CPU against CUDA; bad edge lists refused with a message naming the entry.
#include <optional>
#include <random>
#include <set>
#include <string>
#include <vector>

#include "cuda/graph.h"
#include "tests/helpers.h"

// The file's names and using-directives stay its own in a unity build, where the test
// files compile as one translation unit (CMakeLists.txt).
namespace edge_attention_test {

using namespace ag;
using ag::test::attention_impls;
using ag::test::random;
using Inputs = std::vector<Tensor>;

namespace {

// One case: the problem's geometry and a random graph's (each key of a row drawn with
// probability `density`, the self loop i → i where i < Tk, the listed rows left empty).
struct EdgeCase {
  std::string name = {};
  int64_t B = 2, Hq = 2, Hkv = 2, Tq = 150, Tk = 150, d = 8;
  int64_t kv_rows = 0;  // rows of k and v (a cache read at its first Tk): 0 means Tk
  AttentionLayout layout = AttentionLayout::BHTD;
  std::optional<double> scale = std::nullopt;
  double density = 0.05;
  bool self_loops = true;
  std::set<int64_t> empty_rows = {};
  uint64_t seed = 1;
};

EdgeList random_graph(const EdgeCase& c) {
  std::mt19937_64 gen(c.seed);
  std::uniform_real_distribution<double> uniform(0.0, 1.0);
  std::vector<int64_t> row_ptr{0}, col;
  for (int64_t i = 0; i < c.Tq; ++i) {
    if (!c.empty_rows.contains(i))
      for (int64_t j = 0; j < c.Tk; ++j)
        if ((c.self_loops && i == j) || uniform(gen) < c.density) col.push_back(j);
    row_ptr.push_back(static_cast<int64_t>(col.size()));
  }
  return {.row_ptr = Tensor::from_indices(row_ptr, {c.Tq + 1}),
          .col = Tensor::from_indices(col, {static_cast<int64_t>(col.size())})};
}

std::vector<EdgeCase> edge_cases() {
  return {
      {.name = "Tq = Tk = 150, self loops, empty rows 0, 77, 149", .empty_rows = {0, 77, 149}, .seed = 11},
      {.name = "grouped kv heads (Hq 4, Hkv 2), Tq 37 over Tk 133, BTHD", .Hq = 4, .Tq = 37, .Tk = 133,
       .layout = AttentionLayout::BTHD, .density = 0.1, .self_loops = false, .empty_rows = {5}, .seed = 12},
      {.name = "scale 0.3, the first 100 of 130 cached rows, dense rows", .B = 1, .Tq = 70, .Tk = 100, .d = 5,
       .kv_rows = 130, .scale = 0.3, .density = 0.6, .seed = 13},
      {.name = "one edge per row at most", .B = 1, .Hq = 3, .Hkv = 1, .Tq = 65, .Tk = 65, .density = 0.0,
       .empty_rows = {1, 2, 64}, .seed = 14},
  };
}

Inputs edge_inputs(const EdgeCase& c, uint64_t seed) {
  const int64_t rows = c.kv_rows ? c.kv_rows : c.Tk;
  const bool bthd = c.layout == AttentionLayout::BTHD;
  const Shape q_shape = bthd ? Shape{c.B, c.Tq, c.Hq, c.d} : Shape{c.B, c.Hq, c.Tq, c.d};
  const Shape kv_shape = bthd ? Shape{c.B, rows, c.Hkv, c.d} : Shape{c.B, c.Hkv, rows, c.d};
  return {random(q_shape, seed), random(kv_shape, seed + 1), random(kv_shape, seed + 2)};
}

// Softmax attention over the graph given as edges, or (adjacency) as its dense mask through `impl`.
AttentionSpec edge_spec(const EdgeCase& c, const EdgeList& edges, std::optional<AttentionImpl> adjacency_impl = {}) {
  SoftmaxAttention softmax;
  softmax.scale = c.scale;
  if (c.kv_rows) softmax.kv_length = c.Tk;
  if (adjacency_impl) {
    softmax.impl = *adjacency_impl;
    softmax.masks.adjacency = edge_adjacency(edge_graph(edges, c.Tq, c.Tk, Device::CPU));
  } else {
    softmax.masks.edges = edges;
  }
  return {.function = softmax, .layout = c.layout};
}

// Z, lse and the gradients of q, k, v from upstream R, and A (dense: [B, Hq, Tq, Tk]; edges: [B, Hq, E]).
// A fourth input is an indexed bias table (ScoreMods::indexed), read through `index`: dtable follows dV.
struct Outputs {
  std::vector<Tensor> values;  // Z, dQ, dK, dV (, dtable)
  Tensor lse, A;
};
Outputs outputs_of(const Inputs& given, AttentionSpec spec, const Tensor& R, const Tensor& index = {}) {
  Inputs x;
  for (const Tensor& t : given) x.push_back(t.detach().clone().requires_grad_());
  if (x.size() > 3) ag::test::softmax_of(spec).mods.indexed = {.table = x[3], .index = index};
  AttentionInternals internals;
  const Tensor Z = attention(x[0], x[1], x[2], spec, &internals);
  sum(Z * R).backward();
  std::vector<Tensor> values{Z.detach()};
  for (const Tensor& t : x) values.push_back(t.grad());
  return {values, internals.log_sum_exp, internals.probabilities};
}

// Graphormer's bias (ScoreMods::indexed): a table [Hq, n] and a random index in both forms, as the
// dense path reads it ([Tq, Tk]) and as the edge path also takes it ([E]: the same entries at the
// edges, in CSR order).
struct Bias {
  Tensor table, pairs, per_edge;
};
Bias random_bias(const EdgeCase& c, const EdgeGraph& graph, int64_t n, uint64_t seed) {
  std::mt19937_64 gen(seed);
  std::uniform_int_distribution<int64_t> entry(0, n - 1);
  std::vector<int64_t> pairs(static_cast<size_t>(c.Tq * c.Tk)), per_edge;
  for (int64_t& p : pairs) p = entry(gen);
  const std::vector<double> rows = graph.rows().to_vector(), cols = graph.cols().to_vector();
  for (int64_t e = 0; e < graph.E; ++e)
    per_edge.push_back(pairs[static_cast<int64_t>(rows[e]) * c.Tk + static_cast<int64_t>(cols[e])]);
  return {random({c.Hq, n}, seed + 1), Tensor::from_indices(pairs, {c.Tq, c.Tk}),
          Tensor::from_indices(per_edge, {graph.E})};
}

// The dense A [B, Hq, Tq, Tk] at the graph's edges, [B, Hq, E].
Tensor at_edges(const Tensor& dense, const EdgeGraph& graph) {
  const std::vector<double> a = dense.to_vector(), rows = graph.rows().to_vector(), cols = graph.cols().to_vector();
  const int64_t B = dense.size(0), Hq = dense.size(1);
  std::vector<double> out;
  for (int64_t bh = 0; bh < B * Hq; ++bh)
    for (int64_t e = 0; e < graph.E; ++e)
      out.push_back(a[(bh * graph.Tq + static_cast<int64_t>(rows[e])) * graph.Tk + static_cast<int64_t>(cols[e])]);
  return Tensor::from_vector(out, {B, Hq, graph.E}, DType::Float64);
}

}  // namespace

TEST_CASE("edge attention: equals the dense masked path (float64 ≤ 1e-12) — Z, lse, A and dQ, dK, dV against composed, dense and flash") {
  uint64_t seed = 100;
  double worst = 0;
  for (const EdgeCase& c : edge_cases()) {
    CAPTURE(c.name);
    const EdgeList edges = random_graph(c);
    const EdgeGraph graph = edge_graph(edges, c.Tq, c.Tk, Device::CPU);
    const Inputs x = edge_inputs(c, seed += 10);
    const Tensor R = random(x[0].shape(), seed + 5, DType::Float64, false);
    const Outputs got = outputs_of(x, edge_spec(c, edges), R);
    REQUIRE(got.A.shape() == Shape{c.B, c.Hq, graph.E});
    for (AttentionImpl impl : attention_impls()) {
      CAPTURE(name_of(impl));
      const Outputs expected = outputs_of(x, edge_spec(c, edges, impl), R);
      for (size_t i = 0; i < got.values.size(); ++i) {
        CAPTURE(i);
        CHECK_CLOSE(got.values[i], expected.values[i], 1e-12);
        worst = std::max(worst, ag::test::relative_error(got.values[i], expected.values[i]));
      }
      if (expected.lse.defined()) CHECK_CLOSE(got.lse, expected.lse, 1e-12);  // dense and flash
      if (expected.A.defined()) CHECK_CLOSE(got.A, at_edges(expected.A, graph), 1e-12);  // composed and dense
    }
  }
  MESSAGE("worst relative error against the dense masked path: " << worst);
}

TEST_CASE("edge attention: a query with no edge gets Z = 0, lse = +inf and no gradient") {
  const EdgeCase c{.name = "empty rows", .B = 1, .Tq = 20, .Tk = 20, .d = 4, .density = 0.2, .empty_rows = {3, 19}, .seed = 5};
  const Inputs x = edge_inputs(c, 300);
  const Outputs got = outputs_of(x, edge_spec(c, random_graph(c)), random(x[0].shape(), 305, DType::Float64, false));
  for (const int64_t row : {3, 19})
    for (int64_t h = 0; h < c.Hq; ++h) {
      for (const Tensor* t : {&got.values[0], &got.values[1]})  // Z and dQ
        for (const double value : slice(slice(*t, 1, h, h + 1), 2, row, row + 1).to_vector()) CHECK(value == 0.0);
      CHECK(got.lse.to_vector()[h * c.Tq + row] == std::numeric_limits<double>::infinity());
    }
  for (const Tensor& t : got.values)
    for (const double value : t.to_vector()) CHECK(std::isfinite(value));
}

// GAT's additive score and attention dropout (SoftmaxAttention::score, dropout) on the edge list
// or as the dense mask through `impl`: the dropout's counters come from a fresh Generator(seed),
// so that both paths draw from the same (seed, offset).
struct Gat {
  double p = 0;
  bool training = true;
  uint64_t seed = 3;
};
Outputs gat_outputs_of(const EdgeCase& c, const EdgeList& edges, const Inputs& x, const Tensor& R, Gat gat,
                       std::optional<AttentionImpl> adjacency_impl = {}) {
  AttentionSpec spec = edge_spec(c, edges, adjacency_impl);
  Generator generator(gat.seed);
  SoftmaxAttention& softmax = ag::test::softmax_of(spec);
  softmax.score = AttentionScore::Additive;
  softmax.dropout = {.p = gat.p, .training = gat.training, .generator = &generator};
  return outputs_of(x, spec, R);
}

TEST_CASE("edge attention: GAT's additive score and attention dropout equal the dense masked path (float64 ≤ 1e-12) — Z, A and dQ, dK, dV against composed and dense") {
  // The edge path draws the dense path's counters (one per (b, h, i, j), B·Hq·Tq·Tk of them) and
  // keeps edge (i, j) by the same uniform, so with one seed both drop the same A_ij.
  uint64_t seed = 1100;
  double worst = 0;
  for (EdgeCase c : edge_cases()) {
    c.scale = std::nullopt;  // additive scores take none
    CAPTURE(c.name);
    const EdgeList edges = random_graph(c);
    const EdgeGraph graph = edge_graph(edges, c.Tq, c.Tk, Device::CPU);
    const Inputs x = edge_inputs(c, seed += 10);
    const Tensor R = random(x[0].shape(), seed + 5, DType::Float64, false);
    for (const Gat gat : {Gat{.p = 0}, Gat{.p = 0.4, .seed = seed}, Gat{.p = 0.4, .training = false}}) {
      CAPTURE(gat.p);
      CAPTURE(gat.training);
      const Outputs got = gat_outputs_of(c, edges, x, R, gat);
      REQUIRE(got.A.shape() == Shape{c.B, c.Hq, graph.E});
      for (AttentionImpl impl : {AttentionImpl::Composed, AttentionImpl::Dense}) {
        CAPTURE(name_of(impl));
        const Outputs expected = gat_outputs_of(c, edges, x, R, gat, impl);
        for (size_t i = 0; i < got.values.size(); ++i) {
          CAPTURE(i);
          CHECK_CLOSE(got.values[i], expected.values[i], 1e-12);
          worst = std::max(worst, ag::test::relative_error(got.values[i], expected.values[i]));
        }
        CHECK_CLOSE(got.A, at_edges(expected.A, graph), 1e-12);  // A before the dropout
      }
    }
  }
  MESSAGE("worst relative error of the additive score (and dropout) against the dense masked path: " << worst);
}

// The spec of edge_spec with `score` (additive: no scale).
AttentionSpec scored_spec(const EdgeCase& c, const EdgeList& edges, AttentionScore score,
                          std::optional<AttentionImpl> adjacency_impl = {}) {
  AttentionSpec spec = edge_spec(c, edges, adjacency_impl);
  ag::test::softmax_of(spec).score = score;
  if (score == AttentionScore::Additive) ag::test::softmax_of(spec).scale = std::nullopt;
  return spec;
}

TEST_CASE("edge attention: Graphormer's indexed bias equals the dense masked path (float64 ≤ 1e-12) — Z, A, dQ, dK, dV and dtable, the index [Tq, Tk] or [E], dot and additive scores") {
  uint64_t seed = 1500;
  double worst = 0;
  for (const EdgeCase& c : edge_cases()) {
    CAPTURE(c.name);
    const EdgeList edges = random_graph(c);
    const EdgeGraph graph = edge_graph(edges, c.Tq, c.Tk, Device::CPU);
    const Bias bias = random_bias(c, graph, 6, seed += 10);
    Inputs x = edge_inputs(c, seed);
    x.push_back(bias.table);
    const Tensor R = random(x[0].shape(), seed + 5, DType::Float64, false);
    for (const AttentionScore score : {AttentionScore::Dot, AttentionScore::Additive}) {
      CAPTURE(name_of(score));
      // flash takes no additive score
      const std::vector<AttentionImpl> impls = score == AttentionScore::Dot
                                                   ? attention_impls()
                                                   : std::vector<AttentionImpl>{AttentionImpl::Composed, AttentionImpl::Dense};
      for (const Tensor& index : {bias.pairs, bias.per_edge}) {
        CAPTURE(to_string(index.shape()));
        const Outputs got = outputs_of(x, scored_spec(c, edges, score), R, index);
        REQUIRE(got.values.size() == 5);
        for (AttentionImpl impl : impls) {
          CAPTURE(name_of(impl));
          const Outputs expected = outputs_of(x, scored_spec(c, edges, score, impl), R, bias.pairs);
          for (size_t i = 0; i < got.values.size(); ++i) {
            CAPTURE(i);
            CHECK_CLOSE(got.values[i], expected.values[i], 1e-12);
            worst = std::max(worst, ag::test::relative_error(got.values[i], expected.values[i]));
          }
          if (expected.A.defined()) CHECK_CLOSE(got.A, at_edges(expected.A, graph), 1e-12);  // composed and dense
        }
      }
    }
  }
  MESSAGE("worst relative error with the indexed bias against the dense masked path: " << worst);
}

TEST_CASE("edge attention: float64 gradcheck of q, k, v and the indexed bias table — both index forms, dot and additive scores") {
  const EdgeCase c{.name = "bias", .B = 2, .Hq = 2, .Hkv = 1, .Tq = 9, .Tk = 11, .d = 4,
                   .layout = AttentionLayout::BTHD, .density = 0.3, .empty_rows = {4}, .seed = 19};
  const EdgeList edges = random_graph(c);
  const Bias bias = random_bias(c, edge_graph(edges, c.Tq, c.Tk, Device::CPU), 4, 1400);
  Inputs x = edge_inputs(c, 1410);
  x.push_back(bias.table);
  for (const AttentionScore score : {AttentionScore::Dot, AttentionScore::Additive})
    for (const Tensor& index : {bias.pairs, bias.per_edge}) {
      CAPTURE(name_of(score));
      CAPTURE(to_string(index.shape()));
      const GradcheckFn f = [&c, edges, score, index](const Inputs& in) {
        AttentionSpec spec = scored_spec(c, edges, score);
        ag::test::softmax_of(spec).mods.indexed = {.table = in[3], .index = index};
        return attention(in[0], in[1], in[2], spec);
      };
      CHECK_GRADCHECK(f, x);
    }
}

TEST_CASE("edge attention: attention dropout on the edges — gradcheck with a fixed seed, the kept fraction and scale, none in eval") {
  const EdgeCase c{.name = "dropout", .B = 2, .Hq = 2, .Hkv = 1, .Tq = 9, .Tk = 11, .d = 4,
                   .layout = AttentionLayout::BTHD, .density = 0.4, .empty_rows = {4}, .seed = 17};
  const EdgeList edges = random_graph(c);
  // The generator is made afresh in each call: every evaluation drops the same edges.
  const GradcheckFn f = [&c, edges](const Inputs& in) {
    AttentionSpec spec = edge_spec(c, edges);
    Generator generator(42);
    SoftmaxAttention& softmax = ag::test::softmax_of(spec);
    softmax.score = AttentionScore::Additive;
    softmax.dropout = {.p = 0.3, .generator = &generator};
    return attention(in[0], in[1], in[2], spec);
  };
  CHECK_GRADCHECK(f, edge_inputs(c, 1200));

  // With v = 1 per key, Z_i = Σ_{e ∈ E_i} Ã_e: each kept edge's A_e/(1 − p), so E[Z_i] = Σ A_e = 1.
  const EdgeCase big{.name = "big", .B = 1, .Hq = 4, .Hkv = 4, .Tq = 200, .Tk = 200, .d = 3, .density = 0.5, .seed = 18};
  const EdgeList big_edges = random_graph(big);
  const EdgeGraph graph = edge_graph(big_edges, big.Tq, big.Tk, Device::CPU);
  const Inputs x = edge_inputs(big, 1300);
  const Tensor ones = Tensor::full({1, 4, 200, 3}, 1.0, DType::Float64);
  const double p = 0.25;
  const auto run = [&](bool training, uint64_t seed, AttentionInternals* internals) {
    AttentionSpec spec = edge_spec(big, big_edges);
    Generator generator(seed);
    SoftmaxAttention& softmax = ag::test::softmax_of(spec);
    softmax.score = AttentionScore::Additive;
    softmax.dropout = {.p = p, .training = training, .generator = &generator};
    return attention(x[0], x[1], ones, spec, internals).to_vector();
  };
  AttentionInternals internals;
  const std::vector<double> z = run(true, 5, &internals), a = internals.probabilities.to_vector();
  // Z_i = Σ_{kept e ∈ E_i} A_e / (1 − p): its mean over the 800 rows is near E[Z_i] = 1 (about 100
  // edges a row: each row's sd ≈ √(p/((1 − p)·100)) ≈ 0.06, the mean's ≈ 0.002).
  double mean = 0;
  for (int64_t r = 0; r < 4 * 200; ++r) mean += z[r * 3];
  mean /= 4 * 200;
  CHECK(std::abs(mean - 1.0) < 0.05);
  bool differs = false;
  for (int64_t r = 0; r < 4 * 200; ++r) differs = differs || std::abs(z[r * 3] - 1.0) > 1e-9;
  CHECK(differs);  // dropped: not every row sums to 1
  CHECK(run(true, 5, nullptr) == z);   // the same seed, the same edges dropped
  CHECK(run(true, 6, nullptr) != z);   // another seed, others
  for (double zi : run(false, 5, nullptr)) CHECK(std::abs(zi - 1.0) < 1e-12);  // eval: Z = A V, rows of A sum to 1
  CHECK(a.size() == static_cast<size_t>(4 * graph.E));
}

TEST_CASE("edge attention: float64 gradcheck of q, k, v (grouped kv heads, BTHD, an empty row)") {
  const EdgeCase c{.name = "small", .B = 2, .Hq = 2, .Hkv = 1, .Tq = 9, .Tk = 11, .d = 4,
                   .layout = AttentionLayout::BTHD, .density = 0.3, .empty_rows = {4}, .seed = 7};
  const EdgeList edges = random_graph(c);
  const GradcheckFn f = [&c, edges](const Inputs& in) { return attention(in[0], in[1], in[2], edge_spec(c, edges)); };
  CHECK_GRADCHECK(f, edge_inputs(c, 400));
}

TEST_CASE("edge attention: the edge ops compose with scores of the caller's own — gradcheck of S and v") {
  // A GAT-like layer's shape: any S [B, Hq, E], then edge_softmax and edge_product.
  const EdgeCase c{.name = "own scores", .B = 1, .Hq = 2, .Hkv = 2, .Tq = 10, .Tk = 10, .d = 3, .density = 0.3,
                   .empty_rows = {6}, .seed = 8};
  const EdgeGraph graph = edge_graph(random_graph(c), c.Tq, c.Tk, Device::CPU);
  const GradcheckFn f = [graph](const Inputs& in) { return edge_product(edge_softmax(in[0], graph), in[1], graph); };
  const Inputs scores_and_values{random({1, 2, graph.E}, 500), random({1, 2, 10, 3}, 501)};
  CHECK_GRADCHECK(f, scores_and_values);
}

TEST_CASE("edge attention: an additive score per edge gathered from per-node terms (GAT's shape) — gradcheck") {
  // u_e = el[i, h] + er[j, h] at edge e = (i, j), gathered by embedding at the edges' queries and
  // keys (EdgeGraph::rows, cols); tanh stands in for GAT's LeakyReLU.
  const EdgeCase c{.name = "additive", .B = 1, .Hq = 2, .Hkv = 2, .Tq = 9, .Tk = 9, .d = 3, .density = 0.3,
                   .empty_rows = {2}, .seed = 10};
  const EdgeGraph graph = edge_graph(random_graph(c), c.Tq, c.Tk, Device::CPU);
  const GradcheckFn f = [graph](const Inputs& in) {
    const Tensor u = permute(embedding(in[0], graph.rows()) + embedding(in[1], graph.cols()), {1, 0}).reshape({1, 2, graph.E});
    return edge_product(edge_softmax(tanh(u), graph), in[2], graph);
  };
  const Inputs terms_and_values{random({9, 2}, 550), random({9, 2}, 551), random({1, 2, 9, 3}, 552)};
  CHECK_GRADCHECK(f, terms_and_values);
}

// The edge ops a model composes itself (edge_softmax, edge_product) check their operands against the
// graph, naming the op and the operand (core/ops/edge_attention.cpp, check_per_edge and check_keys).
TEST_CASE("edge attention: edge_softmax and edge_product refuse operands that are not the graph's, naming the op and the operand") {
  const EdgeCase c{.name = "shapes", .B = 1, .Hq = 2, .Hkv = 2, .Tq = 6, .Tk = 6, .d = 3, .density = 0.4, .seed = 9};
  const EdgeGraph graph = edge_graph(random_graph(c), c.Tq, c.Tk, Device::CPU);
  const std::string per_edge = " is not [B, Hq, E] with E = " + std::to_string(graph.E) + " edges";
  const Tensor S = random({1, 2, graph.E}, 600), v = random({1, 2, 6, 3}, 601);
  using ag::test::contains;
  using ag::test::error_of;
  CHECK(error_of([&] { edge_product(edge_softmax(S, graph), v, graph); }).empty());
  const std::string long_S = error_of([&] { edge_softmax(random({1, 2, graph.E + 1}, 602), graph); });
  CHECK(contains(long_S, "edge_softmax: S [1,2," + std::to_string(graph.E + 1) + "] float64" + per_edge));
  CHECK(contains(error_of([&] { edge_softmax(random({2, graph.E}, 603), graph); }), "edge_softmax: S "));
  const std::string short_A = error_of([&] { edge_product(random({1, 2, graph.E - 1}, 604), v, graph); });
  CHECK(contains(short_A, "edge_product: A [1,2," + std::to_string(graph.E - 1) + "] float64" + per_edge));
  CHECK(contains(error_of([&] { edge_product(S, random({1, 2, 5, 3}, 605), graph); }),
                 "edge_product: v: [1,2,5,3] float64 is not [B, Hkv, Tk, d] (BHTD) or [B, Tk, Hkv, d] (BTHD) with "
                 "B = 1, Hkv dividing Hq = 2, at least Tk = 6 rows"));
  CHECK(contains(error_of([&] { edge_softmax(random({1, 2, 0}, 606), EdgeGraph{}); }),
                 "edge_softmax: the edge graph is empty (make it with edge_graph)"));
}

TEST_CASE("edge attention: float32 close to float64") {
  uint64_t seed = 600;
  for (const EdgeCase& c : edge_cases()) {
    CAPTURE(c.name);
    const EdgeList edges = random_graph(c);
    const GradcheckFn f = [&c, edges](const Inputs& in) { return attention(in[0], in[1], in[2], edge_spec(c, edges)); };
    ag::test::check_float32_matches_float64(f, edge_inputs(c, seed += 10), 1e-5);
  }
}

TEST_CASE_EVERY_DEVICE("edge attention: the same bits again (on the CPU on one thread)") {
  const EdgeCase c{.name = "bits", .B = 2, .Hq = 4, .Hkv = 2, .Tq = 300, .Tk = 300, .d = 8, .density = 0.03, .seed = 9};
  const EdgeList edges = random_graph(c);
  const Inputs x = edge_inputs(c, 700);
  const Tensor R = random(x[0].shape(), 705, DType::Float64, false).to(device);
  Inputs on_device;
  for (const Tensor& t : x) on_device.push_back(t.detach().to(device));
  const int threads = num_threads();
  set_num_threads(2);  // the first run splits the rows over threads (CTest gives each process one)
  ag::test::check_same_bits_again(device, [&] { return outputs_of(on_device, edge_spec(c, edges), R).values; });
  set_num_threads(threads);
}

TEST_CASE_EVERY_DEVICE("edge attention: on the device matches the CPU (float64 and float32)") {
  if (device == Device::CPU) return;  // the CPU's own cases are above
  std::vector<EdgeCase> cases = edge_cases();
  // A Cora-sized graph: thousands of rows, many thread blocks.
  cases.push_back({.name = "2708 nodes", .B = 1, .Hq = 8, .Hkv = 8, .Tq = 2708, .Tk = 2708, .d = 8, .density = 0.0015,
                   .empty_rows = {17}, .seed = 21});
  uint64_t seed = 800;
  for (const EdgeCase& c : cases) {
    CAPTURE(c.name);
    const EdgeList edges = random_graph(c);
    const GradcheckFn f = [&c, edges](const Inputs& in) { return attention(in[0], in[1], in[2], edge_spec(c, edges)); };
    const Inputs x = edge_inputs(c, seed += 10);
    ag::test::check_device_matches_cpu(device, f, x, 1e-10, DType::Float64);
    ag::test::check_device_matches_cpu(device, f, x, 1e-5, DType::Float32);
    // With the indexed bias (ScoreMods::indexed), its index as [Tq, Tk] and as [E]: an input, so that it
    // goes to the device with q.
    const Bias bias = random_bias(c, edge_graph(edges, c.Tq, c.Tk, Device::CPU), 16, seed + 5);
    const GradcheckFn biased = [&c, edges](const Inputs& in) {
      AttentionSpec spec = edge_spec(c, edges);
      ag::test::softmax_of(spec).mods.indexed = {.table = in[3], .index = in[4]};
      return attention(in[0], in[1], in[2], spec);
    };
    for (const Tensor& index : {bias.pairs, bias.per_edge}) {
      CAPTURE(to_string(index.shape()));
      const Inputs with_bias{x[0], x[1], x[2], bias.table, index};
      ag::test::check_device_matches_cpu(device, biased, with_bias, 1e-10, DType::Float64);
      ag::test::check_device_matches_cpu(device, biased, with_bias, 1e-5, DType::Float32);
    }
  }
}

// A CUDA graph cannot hold edge attention: its edge list goes to the host and back at each call
// (edge_graph's upload fails the capture, before anything draws), and its dropout draws the mask on
// the host, which a replay would repeat unchanged (edge_dropout would refuse inside a capture too,
// before its generator moves). What a user sees either way: the capture fails, and the generator
// has not moved, so the eager step after it draws what it would have drawn without it.
TEST_CASE("cuda: edge attention with dropout is not captured in a CUDA graph, and leaves its generator where it was") {
  if (!ag::test::cuda_or_skip()) return;
  const EdgeCase c{.name = "capture", .B = 1, .Hq = 2, .Hkv = 2, .Tq = 24, .Tk = 24, .d = 4, .density = 0.3, .seed = 31};
  const EdgeList edges = random_graph(c);
  Inputs x;
  for (const Tensor& t : edge_inputs(c, 1400)) x.push_back(t.to(DType::Float32).to(Device::CUDA));
  Generator generator(7);
  const auto run = [&] {
    AttentionSpec spec = edge_spec(c, edges);
    ag::test::softmax_of(spec).dropout = {.p = 0.2, .generator = &generator};
    return attention(x[0], x[1], x[2], spec).to(Device::CPU).to_vector();
  };
  cuda::StepGraph graph;
  const std::string why = graph.capture([&] {
    AttentionSpec spec = edge_spec(c, edges);
    ag::test::softmax_of(spec).dropout = {.p = 0.2, .generator = &generator};
    (void)attention(x[0], x[1], x[2], spec);
  });
  INFO("the capture: " << why);
  CHECK_FALSE(why.empty());
  CHECK_FALSE(graph.ready());
  CHECK(generator.offset() == 0);
  const std::vector<double> after = run();
  generator.set_state(7, 0);
  CHECK(run() == after);  // the step after the attempt drew from offset 0, as without it
}

TEST_CASE("edge attention: a bad edge list, or what the edges cannot be combined with, is refused naming what is wrong") {
  const EdgeCase c{.name = "bad", .B = 1, .Tq = 4, .Tk = 5, .d = 4};
  const Inputs x = edge_inputs(c, 900);
  const auto error = [&](const std::vector<int64_t>& row_ptr, const std::vector<int64_t>& col,
                         const std::function<void(AttentionSpec&)>& edit = {}) {
    AttentionSpec spec = edge_spec(c, {.row_ptr = Tensor::from_indices(row_ptr, {static_cast<int64_t>(row_ptr.size())}),
                                       .col = Tensor::from_indices(col, {static_cast<int64_t>(col.size())})});
    if (edit) edit(spec);
    return ag::test::error_of([&] { attention(x[0], x[1], x[2], spec); });
  };
  using ag::test::contains;
  const std::vector<int64_t> good_ptr{0, 2, 2, 3, 4}, good_col{0, 4, 1, 3};
  CHECK(error(good_ptr, good_col).empty());
  CHECK(contains(error({0, 2, 2, 3}, good_col), "edge list row_ptr [4] int64 is not int64 [Tq + 1] = [5]"));
  CHECK(contains(error({1, 2, 2, 3, 4}, good_col), "edge list row_ptr[0] = 1 is not 0"));
  CHECK(contains(error({0, 2, 1, 3, 4}, good_col), "edge list row_ptr is not non-decreasing: row_ptr[2] = 1 < row_ptr[1] = 2"));
  CHECK(contains(error({0, 2, 2, 3, 3}, good_col), "edge list row_ptr[Tq] = row_ptr[4] = 3 is not the number of edges in col, 4"));
  CHECK(contains(error(good_ptr, {0, 5, 1, 3}), "edge list col[1] = 5 (an edge of query 0) is outside the keys [0, Tk) = [0, 5)"));
  CHECK(contains(error(good_ptr, {0, 4, -1, 3}), "edge list col[2] = -1 (an edge of query 2) is outside the keys"));
  CHECK(contains(error(good_ptr, {4, 0, 1, 3}), "edge list col[1] = 0 does not come after col[0] = 4 among query 0's edges"));
  CHECK(contains(error(good_ptr, {2, 2, 1, 3}), "edge list col[1] = 2 does not come after col[0] = 2"));
  CHECK(contains(ag::test::error_of([&] {
                   edge_graph({.row_ptr = Tensor::from_indices(good_ptr, {5})}, 4, 5, Device::CPU);
                 }),
                 "edges: an edge list needs both row_ptr and col"));
  CHECK(contains(error(good_ptr, good_col, [](AttentionSpec& s) { s.causal = true; }),
                 "the edges are the whole mask: causal and sparse patterns are not supported with them"));
  // Each mask function the edges would silently override, one at a time (c: B 1, Tq 4, Tk 5).
  const std::vector<std::function<void(MaskMods&)>> other_masks{
      [](MaskMods& m) { m.prefix = 1; },
      [](MaskMods& m) { m.documents = Tensor::from_indices({0, 0, 1, 1, 1}, {5}); },
      [](MaskMods& m) { m.parents = Tensor::from_indices({-1, 0, 0, 1, 2}, {5}); },
      [](MaskMods& m) { m.adjacency = Tensor::from_indices(std::vector<int64_t>(20, 1), {4, 5}); },
      [](MaskMods& m) { m.custom = [](int64_t, int64_t, int64_t, int64_t) { return true; }; }};
  for (size_t i = 0; i < other_masks.size(); ++i) {
    CAPTURE(i);
    CHECK(contains(error(good_ptr, good_col, [&](AttentionSpec& s) { other_masks[i](ag::test::softmax_of(s).masks); }),
                   "no other mask function (prefix, documents, parents, adjacency, custom) may be given with them"));
  }
  CHECK(contains(error(good_ptr, good_col,
                       [](AttentionSpec& s) {
                         ag::test::softmax_of(s).score = AttentionScore::Additive;
                         ag::test::softmax_of(s).scale = 0.5;
                       }),
                 "additive scores (AttentionScore::Additive) take no scale: leave scale unset"));
  CHECK(contains(error(good_ptr, good_col, [](AttentionSpec& s) { ag::test::softmax_of(s).dropout.p = 1.0; }),
                 "attention dropout p = 1 is outside [0, 1)"));
  CHECK(contains(error(good_ptr, good_col, [](AttentionSpec& s) { ag::test::softmax_of(s).mods.soft_cap = 5.0; }),
                 "of the score modifiers (ScoreMods) only the indexed bias (ScoreMods::indexed) is supported over an "
                 "edge list, not soft_cap, sinks, relative or custom"));
  CHECK(contains(error(good_ptr, good_col, [](AttentionSpec& s) { ag::test::softmax_of(s).mods.sinks = random({2}, 1); }),
                 "only the indexed bias (ScoreMods::indexed) is supported"));
  CHECK(contains(error(good_ptr, good_col,
                       [](AttentionSpec& s) { ag::test::softmax_of(s).mods.relative = {.table = random({2, 8}, 3)}; }),
                 "only the indexed bias (ScoreMods::indexed) is supported"));
  CHECK(contains(error(good_ptr, good_col,
                       [](AttentionSpec& s) {
                         ag::test::softmax_of(s).mods.custom = {
                             .value = [](double u, int64_t, int64_t, int64_t) { return u; },
                             .derivative = [](double, int64_t, int64_t, int64_t) { return 1.0; }};
                       }),
                 "only the indexed bias (ScoreMods::indexed) is supported"));
  // The indexed bias: table [Hq, n] = [2, 3]; the index [Tq, Tk] = [4, 5] read at the edges
  // (0, 0), (0, 4), (2, 1), (3, 3) only, or [E] = [4]
  const auto bias_error = [&](const Tensor& table, const Tensor& index) {
    return error(good_ptr, good_col, [&](AttentionSpec& s) { ag::test::softmax_of(s).mods.indexed = {table, index}; });
  };
  const Tensor table = random({2, 3}, 2);
  std::vector<int64_t> pairs(20, 7);  // out of range off the edges: never read
  for (const int64_t at : {0, 4, 11, 18}) pairs[at] = 2;
  CHECK(bias_error(table, Tensor::from_indices(pairs, {4, 5})).empty());
  CHECK(bias_error(table, Tensor::from_indices({0, 1, 2, 0}, {4})).empty());
  pairs[11] = 3;
  CHECK(contains(bias_error(table, Tensor::from_indices(pairs, {4, 5})),
                 "indexed bias index[2, 1] = 3 at the edge (2, 1) is outside its table's 3 entries [0, 3)"));
  CHECK(contains(bias_error(table, Tensor::from_indices({0, 1, 2, -1}, {4})),
                 "indexed bias index[3] = -1 at the edge (3, 3) is outside its table's 3 entries [0, 3)"));
  CHECK(contains(bias_error(table, Tensor::from_indices({0, 1, 2}, {3})),
                 "indexed bias index [3] int64 is not int64 [Tq, Tk] = [4,5] or [E] = [4] (one per edge"));
  CHECK(contains(bias_error(table, Tensor::from_indices(std::vector<int64_t>(20, 0), {5, 4})), "is not int64 [Tq, Tk]"));
  CHECK(contains(bias_error(random({3, 3}, 2), Tensor::from_indices({0, 1, 2, 0}, {4})),
                 "indexed bias table [3,3] float64 is not [Hq, n] with Hq = 2"));
  MaskMods as_edges;
  as_edges.edges = {.row_ptr = Tensor::from_indices(good_ptr, {5}), .col = Tensor::from_indices(good_col, {4})};
  CHECK(contains(ag::test::error_of([&] { evaluate_mask(as_edges, 1, 2, 4, 5, 1, "bench"); }),
                 "bench: an edge list is not evaluated as bytes (edge_adjacency gives its dense form)"));
  // Each part of a compound check alone (the rest right): a check that lost it would let the input through.
  const auto softmax_edit = [&](const std::function<void(SoftmaxAttention&)>& edit) {
    return error(good_ptr, good_col, [&](AttentionSpec& s) { edit(ag::test::softmax_of(s)); });
  };
  CHECK(contains(softmax_edit([](SoftmaxAttention& s) { s.pattern.window = 2; }),
                 "causal and sparse patterns are not supported with them"));
  CHECK(contains(softmax_edit([](SoftmaxAttention& s) { s.kv_length = -1; }), "kv_length -1 is outside [0, 5]"));
  CHECK(contains(softmax_edit([](SoftmaxAttention& s) { s.kv_length = 6; }), "kv_length 6 is outside [0, 5]"));
  CHECK(contains(softmax_edit([](SoftmaxAttention& s) { s.leaky_slope = std::nan(""); }), "leaky_slope nan is not a finite number"));
  CHECK(contains(softmax_edit([](SoftmaxAttention& s) { s.dropout.p = -0.5; }), "attention dropout p = -0.5 is outside [0, 1)"));
  CHECK(contains(softmax_edit([](SoftmaxAttention& s) { s.scale = 0.0; }), "scale 0 is not a positive number"));
  CHECK(contains(softmax_edit([](SoftmaxAttention& s) { s.scale = std::numeric_limits<double>::infinity(); }),
                 "scale inf is not a positive number"));
  const auto list_error = [&](const EdgeList& edges) {
    return ag::test::error_of([&] { edge_graph(edges, 4, 5, Device::CPU); });
  };
  const Tensor ptr = Tensor::from_indices(good_ptr, {5}), col = Tensor::from_indices(good_col, {4});
  CHECK(contains(list_error({.col = col}), "edges: an edge list needs both row_ptr and col"));
  CHECK(contains(list_error({.row_ptr = ptr.to(DType::Float64), .col = col}),
                 "edge list row_ptr [5] float64 is not int64 [Tq + 1] = [5]"));
  CHECK(contains(list_error({.row_ptr = Tensor::from_indices(good_ptr, {1, 5}), .col = col}),
                 "edge list row_ptr [1,5] int64 is not int64 [Tq + 1] = [5]"));
  CHECK(contains(list_error({.row_ptr = ptr, .col = col.to(DType::Float64)}), "edge list col [4] float64 is not int64 [E]"));
  CHECK(contains(list_error({.row_ptr = ptr, .col = Tensor::from_indices(good_col, {1, 4})}),
                 "edge list col [1,4] int64 is not int64 [E]"));
  CHECK(contains(bias_error(random({2}, 2), Tensor::from_indices({0, 1, 2, 0}, {4})),
                 "indexed bias table [2] float64 is not [Hq, n] with Hq = 2"));
  CHECK(contains(bias_error(random({2, 0}, 2), Tensor::from_indices({0, 0, 0, 0}, {4})),
                 "indexed bias table [2,0] float64 is not [Hq, n] with Hq = 2"));
  CHECK(contains(bias_error(random({2, 3}, 2).to(DType::Float32), Tensor::from_indices({0, 1, 2, 0}, {4})),
                 "indexed bias table [2,3] float32 is not [Hq, n] with Hq = 2 in q's dtype and device"));
  CHECK(contains(bias_error(table, Tensor::from_vector({0, 1, 2, 0}, {4})), "indexed bias index [4] float32 is not int64"));
  CHECK(contains(bias_error(table, {}), "indexed bias index (none) is not int64"));
}

TEST_CASE("edge attention: edge_scores and the keys' checks refuse each wrong part on its own") {
  const EdgeCase c{.name = "parts", .B = 1, .Hq = 2, .Hkv = 2, .Tq = 6, .Tk = 6, .d = 3, .density = 0.4, .seed = 9};
  const EdgeGraph graph = edge_graph(random_graph(c), c.Tq, c.Tk, Device::CPU);
  const Tensor q = random({1, 2, 6, 3}, 610), k = random({1, 2, 6, 3}, 611);
  using ag::test::contains;
  using ag::test::error_of;
  const auto scores = [&](const Tensor& q_, const Tensor& k_, double scale = 0.5) {
    return error_of([&] { edge_scores(q_, k_, graph, scale, AttentionLayout::BHTD); });
  };
  CHECK(scores(q, k).empty());
  const char* q_shape = "edge_scores: q ";
  const char* q_expected = "is not [B, Hq, Tq, d] (BHTD) or [B, Tq, Hq, d] (BTHD) with Tq = 6 (the edge graph's queries)";
  for (const Shape& wrong : {Shape{2, 6, 3}, Shape{1, 2, 5, 3}, Shape{1, 2, 6, 0}}) {
    CAPTURE(to_string(wrong));
    const std::string e = scores(random(wrong, 612), k);
    CHECK(contains(e, q_shape));
    CHECK(contains(e, q_expected));
  }
  CHECK(contains(scores(q, k, 0.0), "edge_scores: scale 0 is not a positive number"));
  CHECK(contains(scores(q, k, std::numeric_limits<double>::infinity()), "edge_scores: scale inf is not a positive number"));
  // k: rank, batch, width, heads (none; not dividing Hq), rows (each alone).
  const char* keys = "is not [B, Hkv, Tk, d] (BHTD) or [B, Tk, Hkv, d] (BTHD) with B = 1, Hkv dividing Hq = 2, at least Tk = 6 rows and d = 3";
  for (const Shape& wrong : {Shape{2, 6, 3}, Shape{2, 2, 6, 3}, Shape{1, 2, 6, 4}, Shape{1, 0, 6, 3}, Shape{1, 3, 6, 3},
                             Shape{1, 2, 5, 3}}) {
    CAPTURE(to_string(wrong));
    const std::string e = scores(q, random(wrong, 613));
    CHECK(contains(e, "edge_scores: k: "));
    CHECK(contains(e, keys));
  }
  // edge_softmax and edge_product: per-edge tensors with no batch or no heads, v with no width.
  const std::string per_edge = " is not [B, Hq, E] with E = " + std::to_string(graph.E) + " edges";
  CHECK(contains(error_of([&] { edge_softmax(random({0, 2, graph.E}, 614), graph); }), per_edge));
  CHECK(contains(error_of([&] { edge_softmax(random({1, 0, graph.E}, 615), graph); }), per_edge));
  CHECK(contains(error_of([&] { edge_product(random({1, 2, graph.E}, 616), random({1, 2, 6, 0}, 617), graph); }),
                 "edge_product: v [1,2,6,0] float64 has no width d"));
}

}  // namespace edge_attention_test
