#include "examples/lab/graph_tasks.h"

#include <algorithm>
#include <deque>

#include "core/error.h"

namespace ag::lab {

namespace {
int64_t draw(int64_t n, Generator& gen) { return static_cast<int64_t>(gen.integer(static_cast<uint64_t>(n))); }

// Fisher–Yates with the task's generator.
template <class T> void shuffle(std::vector<T>& items, Generator& gen) {
  for (int64_t i = static_cast<int64_t>(items.size()) - 1; i > 0; --i) std::swap(items[i], items[draw(i + 1, gen)]);
}

// Breadth-first distances from `source` over an adjacency matrix [n, n] (−1: unreachable).
std::vector<int64_t> distances_from(int64_t source, const std::vector<uint8_t>& adjacent, int64_t n) {
  std::vector<int64_t> distance(n, -1);
  std::deque<int64_t> frontier{source};
  distance[source] = 0;
  while (!frontier.empty()) {
    const int64_t a = frontier.front();
    frontier.pop_front();
    for (int64_t b = 0; b < n; ++b)
      if (adjacent[a * n + b] && distance[b] < 0) distance[b] = distance[a] + 1, frontier.push_back(b);
  }
  return distance;
}
}  // namespace

bool is_graph_task(Task task) { return task == Task::Connectivity || task == Task::ShortestPath; }

int64_t max_graph_edges(const TaskOptions& task) { return task.nodes - 1 + task.nodes / 4; }

int64_t graph_positions(const TaskOptions& task) { return task.nodes + 2 * max_graph_edges(task); }

Graph random_graph(const TaskOptions& task, Generator& gen) {
  Graph g;
  g.n = task.min_nodes + draw(task.nodes - task.min_nodes + 1, gen);
  const int64_t n = g.n, D = task.max_distance;  // check_task: 2(D + 1) <= min_nodes, so two paths of D edges fit
  // The label first: whether the pair is connected, and the length c of the paths.
  bool connected = true;
  int64_t c = 1;
  if (task.task == Task::Connectivity) {
    connected = draw(2, gen) == 1;
    c = 1 + draw(D, gen);
  } else {
    const int64_t k = draw(D + 1, gen);  // class 0: unreachable
    connected = k > 0;
    c = connected ? k : 1 + draw(D, gen);
  }
  // Built on nodes 0 … n − 1 in order, renamed at the end. Two paths of c edges, 0 … c and
  // c + 1 … 2c + 1: u = 0, and v the end of the first (connected: at distance c) or of the
  // second (unreachable), so that u's and v's surroundings look alike either way and only
  // following v's path back tells whether it reaches u.
  std::vector<uint8_t> adjacent(n * n, 0);
  const auto connect = [&](int64_t a, int64_t b) { adjacent[a * n + b] = adjacent[b * n + a] = 1; };
  for (int64_t i = 0; i < c; ++i) connect(i, i + 1), connect(c + 1 + i, c + 2 + i);
  g.u = 0;
  g.v = connected ? c : 2 * c + 1;
  g.distance = connected ? c : -1;
  // The other nodes: a new component now and then (1 in 4), else hung on a node placed before.
  for (int64_t a = 2 * c + 2; a < n; ++a)
    if (draw(4, gen) != 0) connect(a, draw(a, gen));
  // Extra edges (a cycle, or two components joined), each kept only if both paths stay shortest
  // paths and stay apart: the same rule whichever path v ends, so the graph is drawn alike for
  // every label and only where v sits tells them apart.
  const auto paths_kept = [&] {
    const std::vector<int64_t> first = distances_from(0, adjacent, n), second = distances_from(c + 1, adjacent, n);
    return first[c] == c && second[2 * c + 1] == c && first[c + 1] < 0;
  };
  const int64_t extra = draw(n / 4 + 1, gen);
  for (int64_t e = 0; e < extra; ++e) {
    const int64_t a = draw(n, gen), b = draw(n, gen);
    if (a == b || adjacent[a * n + b]) continue;
    connect(a, b);
    if (!paths_kept()) adjacent[a * n + b] = adjacent[b * n + a] = 0;
  }
  AG_CHECK(distances_from(g.u, adjacent, n)[g.v] == g.distance, "graph task: the generator lost its pair's label");
  std::vector<int64_t> name(n);
  for (int64_t i = 0; i < n; ++i) name[i] = i;
  shuffle(name, gen);
  for (int64_t a = 0; a < n; ++a)
    for (int64_t b = a + 1; b < n; ++b)
      if (adjacent[a * n + b]) g.edges.emplace_back(draw(2, gen) ? std::pair{name[a], name[b]} : std::pair{name[b], name[a]});
  shuffle(g.edges, gen);
  g.u = name[g.u];
  g.v = name[g.v];
  return g;
}

int64_t graph_answer(const TaskOptions& task, const Graph& graph) {
  if (task.task == Task::Connectivity) return graph.distance > 0 ? kConnected : kUnreachable;
  return graph.distance > 0 ? kDistanceToken + graph.distance : kUnreachable;
}

Example encode_graph(const TaskOptions& task, int64_t T, const Graph& graph) {
  const int64_t N = task.nodes;
  AG_CHECK(graph.n <= N && static_cast<int64_t>(graph.edges.size()) <= max_graph_edges(task) && T >= graph_positions(task),
           "graph task: a graph of " << graph.n << " nodes and " << graph.edges.size() << " edges does not fit");
  Example e{std::vector<int64_t>(T, kGraphPad), std::vector<int64_t>(T, kIgnore)};
  for (int64_t i = 0; i < graph.n; ++i)
    e.x[i] = (i == graph.u ? kGraphSource : i == graph.v ? kGraphTarget : kGraphNode) + i;
  for (size_t k = 0; k < graph.edges.size(); ++k) {
    e.x[N + 2 * k] = kGraphNode + graph.edges[k].first;
    e.x[N + 2 * k + 1] = kGraphNode + graph.edges[k].second;
  }
  e.y[graph.v] = graph_answer(task, graph);
  return e;
}

Example graph_example(const TaskOptions& task, int64_t T, Generator& gen) {
  return encode_graph(task, T, random_graph(task, gen));
}

Tensor graph_attention_mask(const TaskOptions& task, const Tensor& x) {
  AG_CHECK(x.dim() == 2, "graph task: tokens " << describe(x) << " are not [B, T]");
  const int64_t B = x.size(0), T = x.size(1), N = task.nodes;
  if (task.graph_mask == GraphMask::Full) return Tensor::from_indices(std::vector<int64_t>(T * T, 1), {T, T});
  const std::vector<int64_t> tokens = x.to_indices();
  std::vector<int64_t> sees(B * T * T, 0);
  for (int64_t b = 0; b < B; ++b) {
    int64_t* graph = sees.data() + b * T * T;
    for (int64_t i = 0; i < T; ++i) graph[i * T + i] = 1;  // the self loops: each position keeps its own token
    const int64_t* row = tokens.data() + b * T;
    for (int64_t at = N; at + 1 < T; at += 2) {
      const int64_t a = row[at] - kGraphNode, c = row[at + 1] - kGraphNode;
      if (row[at] == kGraphPad) break;  // the edge list's end
      AG_CHECK(a >= 0 && a < N && c >= 0 && c < N, "graph task: position " << at << " holds no edge");
      graph[a * T + c] = graph[c * T + a] = 1;
    }
  }
  return Tensor::from_indices(sees, {B, T, T});
}

}  // namespace ag::lab
