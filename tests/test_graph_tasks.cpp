// The lab's graph tasks (examples/lab/graph_tasks.h): every label of many seeded
// examples checked against a breadth-first search written here, from the tokens
// alone; the labels balanced; the attention mask read back from the tokens; the
// adjacency-masked model local (its answer deaf to nodes beyond its depth, as a
// message-passing network's), the full one not; the graphs preset's cells.
#include <doctest/doctest.h>

#include <algorithm>
#include <cmath>
#include <map>
#include <set>

#include "examples/lab/graph_tasks.h"
#include "examples/lab/lab_run.h"
#include "nn/gpt.h"
#include "tests/helpers.h"
#include "tests/lab_helpers.h"

// The file's names and using-directives stay its own in a unity build, where the test
// files compile as one translation unit (CMakeLists.txt).
namespace graph_tasks_test {

using namespace ag;
using namespace ag::lab;

namespace {

TaskOptions graph_task(Task kind, int64_t min_nodes, int64_t nodes, int64_t max_distance) {
  TaskOptions task;
  task.task = kind;
  task.min_nodes = min_nodes;
  task.nodes = nodes;
  task.max_distance = max_distance;
  return task;
}

// What an example's tokens say: the nodes, the pair and the edges (each as given).
struct Decoded {
  int64_t n = 0, u = -1, v = -1;
  std::vector<std::pair<int64_t, int64_t>> edges;
};

Decoded decode(const TaskOptions& task, const Example& e) {
  Decoded d;
  for (int64_t slot = 0; slot < task.nodes; ++slot) {
    const int64_t t = e.x[slot];
    if (t == kGraphPad) continue;
    REQUIRE(slot == d.n);  // the nodes fill the first slots
    ++d.n;
    if (t >= kGraphSource && t < kGraphTarget) {
      CHECK(t - kGraphSource == slot);
      CHECK(d.u == -1);  // u is marked once
      d.u = slot;
    } else if (t >= kGraphTarget && t < kGraphTarget + kMaxGraphNodes) {
      CHECK(t - kGraphTarget == slot);
      CHECK(d.v == -1);  // v is marked once
      d.v = slot;
    } else {
      CHECK(t - kGraphNode == slot);
    }
  }
  for (size_t at = task.nodes; at + 1 < e.x.size() && e.x[at] != kGraphPad; at += 2)
    d.edges.emplace_back(e.x[at] - kGraphNode, e.x[at + 1] - kGraphNode);
  return d;
}

// The u–v distance by a breadth-first search over adjacency lists (−1: unreachable).
int64_t bfs_distance(const Decoded& d) {
  std::vector<std::vector<int64_t>> neighbours(d.n);
  for (const auto& [a, b] : d.edges) neighbours[a].push_back(b), neighbours[b].push_back(a);
  std::vector<int64_t> depth(d.n, -1), queue{d.u};
  depth[d.u] = 0;
  for (size_t head = 0; head < queue.size(); ++head)
    for (const int64_t next : neighbours[queue[head]])
      if (depth[next] < 0) depth[next] = depth[queue[head]] + 1, queue.push_back(next);
  return depth[d.v];
}

}  // namespace

TEST_CASE("graph tasks: every label equals a breadth-first search's answer — connectivity and shortest-path, 4 to 32 nodes") {
  struct Setting {
    int64_t min_nodes, nodes, max_distance, T;
  };
  for (const Task kind : {Task::Connectivity, Task::ShortestPath})
    for (const Setting s : {Setting{8, 16, 3, 64}, Setting{12, 16, 5, 64}, Setting{16, 32, 7, 128}, Setting{4, 5, 1, 20}}) {
      const TaskOptions task = graph_task(kind, s.min_nodes, s.nodes, s.max_distance);
      CAPTURE(name_of(kind));
      CAPTURE(s.nodes);
      check_task(task, s.T);
      Generator gen(42 + s.nodes);
      std::map<int64_t, int64_t> classes;
      std::set<int64_t> sizes;
      const int64_t examples = 3000;
      for (int64_t i = 0; i < examples; ++i) {
        const Example e = synthetic_example(task, s.T, gen);
        const Decoded d = decode(task, e);
        REQUIRE(d.u >= 0);
        REQUIRE(d.v >= 0);
        CHECK(d.u != d.v);
        CHECK(d.n >= s.min_nodes);
        CHECK(d.n <= s.nodes);
        sizes.insert(d.n);
        CHECK(static_cast<int64_t>(d.edges.size()) <= max_graph_edges(task));
        std::set<std::pair<int64_t, int64_t>> seen;
        for (const auto& [a, b] : d.edges) {
          REQUIRE(a >= 0);
          REQUIRE(b >= 0);
          REQUIRE(a < d.n);
          REQUIRE(b < d.n);
          CHECK(a != b);
          CHECK(seen.insert({std::min(a, b), std::max(a, b)}).second);  // each edge once
        }
        const int64_t distance = bfs_distance(d);
        CHECK(distance <= s.max_distance);
        const int64_t expected = kind == Task::Connectivity ? (distance > 0 ? kConnected : kUnreachable)
                                                            : (distance > 0 ? kDistanceToken + distance : kUnreachable);
        for (int64_t t = 0; t < s.T; ++t) CHECK(e.y[t] == (t == d.v ? expected : kIgnore));  // one answer, at v
        ++classes[expected];
      }
      CHECK(static_cast<int64_t>(sizes.size()) == s.nodes - s.min_nodes + 1);
      // Balanced: each class's share within 15 % of its 1/K (K = 2, or D + 1).
      const int64_t K = kind == Task::Connectivity ? 2 : s.max_distance + 1;
      CHECK(static_cast<int64_t>(classes.size()) == K);
      for (const auto& entry : classes) {  // not a structured binding: CAPTURE is a lambda, and clang 14's cannot capture one
        CAPTURE(entry.first);
        CHECK(std::abs(static_cast<double>(entry.second * K) / static_cast<double>(examples) - 1) < 0.15);
      }
    }
}

TEST_CASE("graph tasks: connectivity's yes pairs lie at every distance 1 … D, each about as often") {
  const TaskOptions task = graph_task(Task::Connectivity, 14, 16, 6);
  Generator gen(7);
  std::map<int64_t, int64_t> distances;
  double degree[2][2] = {};  // [connected][u, v]: the endpoints' summed degrees
  for (int64_t i = 0; i < 4000; ++i) {
    const Decoded d = decode(task, synthetic_example(task, 64, gen));
    const int64_t distance = bfs_distance(d);
    ++distances[distance];
    for (const auto& [a, b] : d.edges)
      for (const int64_t end : {a, b}) degree[distance > 0][0] += end == d.u, degree[distance > 0][1] += end == d.v;
  }
  REQUIRE(distances.size() == 7);  // −1 and 1 … 6
  for (int64_t c = 1; c <= 6; ++c) CHECK(std::abs(static_cast<double>(distances[c]) * 12 / 4000 - 1) < 0.2);
  // u and v look alike whether or not they are connected: their mean degrees within 0.1.
  const double yes = static_cast<double>(4000 - distances[-1]), no = static_cast<double>(distances[-1]);
  for (const int end : {0, 1}) {
    CAPTURE(end);
    CAPTURE(degree[1][end] / yes);
    CAPTURE(degree[0][end] / no);
    CHECK(std::abs(degree[1][end] / yes - degree[0][end] / no) < 0.1);
  }
}

TEST_CASE("graph tasks: the same seed gives the same examples, and bad options are refused with the reason") {
  const TaskOptions task = graph_task(Task::ShortestPath, 14, 16, 6);
  Generator a(3), b(3);
  for (int64_t i = 0; i < 20; ++i) CHECK(synthetic_example(task, 64, a).x == synthetic_example(task, 64, b).x);
  CHECK_THROWS_WITH_AS(check_task(task, 50), doctest::Contains("cannot hold 16 nodes and 19 edges: needs 54"), Error);
  CHECK_THROWS_WITH_AS(check_task(graph_task(Task::Connectivity, 6, 16, 6), 64), doctest::Contains("2(D + 1) = 14 <= --min-nodes, got 6"), Error);
  CHECK_THROWS_WITH_AS(check_task(graph_task(Task::Connectivity, 9, 8, 6), 64), doctest::Contains("exceeds --nodes 8"), Error);
}

TEST_CASE("graph tasks: the adjacency mask is A + I over the node slots and the identity elsewhere, the full mask all ones") {
  TaskOptions task = graph_task(Task::ShortestPath, 8, 16, 3);
  const int64_t B = 3, T = 64;
  Tensor x, y;
  Generator gen(11);
  std::vector<Example> examples;
  synthetic_batch(task, T, B, gen, x, y);
  task.graph_mask = GraphMask::Adjacency;
  const std::vector<int64_t> tokens = x.to_indices();
  const std::vector<double> mask = graph_attention_mask(task, x).to_vector();
  REQUIRE(mask.size() == static_cast<size_t>(B * T * T));
  for (int64_t b = 0; b < B; ++b) {
    Example e{std::vector<int64_t>(tokens.begin() + b * T, tokens.begin() + (b + 1) * T), {}};
    const Decoded d = decode(task, e);
    std::set<std::pair<int64_t, int64_t>> edges;
    for (const auto& [p, q] : d.edges) edges.insert({p, q}), edges.insert({q, p});
    for (int64_t i = 0; i < T; ++i)
      for (int64_t j = 0; j < T; ++j) CHECK(mask[(b * T + i) * T + j] == (i == j || edges.count({i, j}) ? 1.0 : 0.0));
  }
  task.graph_mask = GraphMask::Full;
  const Tensor full = graph_attention_mask(task, x);
  CHECK(full.shape() == Shape{T, T});
  for (const double m : full.to_vector()) CHECK(m == 1.0);
}

TEST_CASE("graph tasks: under the adjacency mask an L-layer model's answer at v hears only nodes within L hops — the full one hears all") {
  // The path 0 − 1 − 2 − 3 − 4 − 5 with v = 0 and u = 5, in a 2-layer model.
  TaskOptions task = graph_task(Task::ShortestPath, 6, 8, 5);
  const int64_t T = 32;
  Graph g;
  g.n = 6;
  g.u = 5;
  g.v = 0;
  g.distance = 5;
  for (int64_t a = 0; a < 5; ++a) g.edges.emplace_back(a, a + 1);
  const Example e = encode_graph(task, T, g);
  nn::GPTConfig config;
  config.block_size = T;
  config.vocab_size = kGraphVocab;
  config.n_layer = 2;
  config.n_embd = 16;
  config.n_head = 2;
  Generator init(5);
  nn::GPT model(config, init);
  model.eval();
  // The logits at v's position with node `changed`'s token replaced by another node's plain id.
  const auto answer_logits = [&](int64_t changed) {
    std::vector<int64_t> tokens = e.x;
    if (changed >= 0) tokens[changed] = kGraphNode + 7;
    const Tensor x = Tensor::from_indices(tokens, {1, T});
    model.set_adjacency(graph_attention_mask(task, x));
    return slice(model.forward(x), 1, 0, 1).to_vector();
  };
  task.graph_mask = GraphMask::Adjacency;
  const std::vector<double> base = answer_logits(-1);
  CHECK(answer_logits(3) == base);     // three hops away: exactly nothing heard
  CHECK(answer_logits(5) == base);     // u itself, five hops away
  CHECK(answer_logits(2) != base);     // two hops: heard
  task.graph_mask = GraphMask::Full;
  const std::vector<double> full = answer_logits(-1);
  CHECK(answer_logits(5) != full);
  model.set_adjacency(Tensor());  // causal again: position 0 sees itself only, whatever comes after
  const Tensor x = Tensor::from_indices(e.x, {1, T});
  std::vector<int64_t> changed = e.x;
  changed[1] = kGraphNode + 7;
  CHECK(slice(model.forward(x), 1, 0, 1).to_vector() ==
        slice(model.forward(Tensor::from_indices(changed, {1, T})), 1, 0, 1).to_vector());
}

TEST_CASE("graph tasks: the graphs preset — two tasks, both masks, 1 to 6 layers, every cell accepted") {
  const Preset preset = lab::preset("graphs");
  std::vector<Cell> cells;
  for (const auto& axes : preset.grids) {
    Grid grid{.axes = {}, .mixers = {"softmax"}, .lrs = {3e-3}};
    for (const auto& [name, text] : axes) grid.axes.push_back({name, split_list(text)});
    for (const Cell& cell : expand(grid, Cell{})) cells.push_back(cell);
  }
  REQUIRE(cells.size() == 2 * 2 * 6);  // tasks, masks, layers
  std::set<std::string> labels;
  for (const Cell& cell : cells) {
    CAPTURE(cell.label());
    check_cell(cell, nullptr);
    CHECK(cell_model(cell, nullptr).vocab_size == kGraphVocab);
    labels.insert(cell.label());
  }
  CHECK(labels.count("shortest-path softmax graph-mask=adjacency n-layer=3"));
}

TEST_CASE("graph tasks: a small lab trains both masks at two depths and draws accuracy against layers on a 0 to 1 axis") {
  const ag::test::TempDir tmp("lab_graphs");
  LabSpec spec = ag::test::small_lab(tmp, 3, 4, 2);  // the grid below sets the layers
  spec.grids = {Grid{.axes = {{"task", {"shortest-path"}}, {"block_size", {"64"}}, {"graph_mask", {"full", "adjacency"}},
                              {"n_layer", {"1", "2"}}},
                     .mixers = {"softmax"}, .lrs = {3e-3}}};
  const LabSummary lab = run_lab(spec);
  REQUIRE(lab.rows.size() == 4);
  for (const auto& row : lab.rows) {
    CHECK(row.at("status") == "ok");
    CHECK(row.at("nodes") == "16");
    CHECK(row.at("graph_mask") == (row.at("cell").find("adjacency") != std::string::npos ? "adjacency" : "full"));
  }
  const std::string picture = ag::test::read_file(tmp.file("accuracy_vs_layers.svg"));
  CHECK(picture.find("shortest-path softmax mask=adjacency") != std::string::npos);
  CHECK(ag::test::occurrences(picture, "class=\"series\"") == 2);
  CHECK(picture.find("text-anchor=\"end\">0</text>") != std::string::npos);  // the accuracy axis from 0 …
  CHECK(picture.find("text-anchor=\"end\">1</text>") != std::string::npos);  // … to 1, whatever the data
  CHECK(ag::test::read_file(tmp.file("lab_report.html")).find("<section id=\"layers\">") != std::string::npos);
}

}  // namespace graph_tasks_test
