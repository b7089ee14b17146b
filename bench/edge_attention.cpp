// bench_edge_attention: softmax attention over a graph's edges (MaskMods::edges) against
// the dense masked path (the same graph as MaskMods::adjacency, through the dense and
// flash implementations), forward + backward of the attention op alone, on a Cora-shaped
// problem: the graph of --edges (`u v` lines, undirected, `#` headers: ../shared/data/cora/
// edges.tsv, 2708 nodes, 5278 links) made symmetric with a self loop on every node (GAT's
// A + I: 13,264 edges), or, if the file is absent, a random graph of as many nodes and links;
// q, k, v [1, 8, N, 8] (8 heads × 8 dims, GAT's first layer), float32. Wall time, the
// median of repeats (at least --min-reps, for --budget-s seconds), after one warm-up call
// (which builds the dense path's cached mask bytes and block map, as a training run's first
// epoch does); and the complete graph (no mask) through dense and flash. Also prints the fraction of nonempty 128×128 tiles of A + I (what flash's
// tile skipping can gain) in the file's order and after a reverse Cuthill–McKee ordering
// (Boost.Graph), which gathers each node's neighbours near the diagonal, and times flash
// on the reordered graph too.
//
//   ./build/bench_edge_attention --threads 2
#include <cmath>
#include <cstdio>
#include <fstream>
#include <random>
#include <set>
#include <sstream>
#include <string>
#include <utility>
#include <vector>

#include <boost/graph/adjacency_list.hpp>
#include <boost/graph/cuthill_mckee_ordering.hpp>

#include "bench/measure.h"
#include "core/ops.h"
#include "core/threads.h"
#include "examples/common/command_line.h"

using namespace ag;

namespace {

using Links = std::vector<std::pair<int64_t, int64_t>>;

// The undirected links of `path` (and its node count: the largest id + 1), or none if it cannot be read.
Links read_links(const std::string& path, int64_t& nodes) {
  std::ifstream in(path);
  Links links;
  nodes = 0;
  for (std::string line; std::getline(in, line);) {
    if (line.empty() || line[0] == '#') continue;
    std::istringstream fields(line);
    int64_t u = -1, v = -1;
    AG_CHECK(fields >> u >> v && u >= 0 && v >= 0, path << ": a line is not `u v`: " << line);
    links.emplace_back(u, v);
    nodes = std::max(nodes, std::max(u, v) + 1);
  }
  return links;
}

// `count` distinct random links among `nodes` nodes.
Links random_links(int64_t nodes, int64_t count, uint64_t seed) {
  std::mt19937_64 gen(seed);
  std::uniform_int_distribution<int64_t> node(0, nodes - 1);
  std::set<std::pair<int64_t, int64_t>> seen;
  while (static_cast<int64_t>(seen.size()) < count) {
    const int64_t u = node(gen), v = node(gen);
    if (u != v) seen.emplace(std::min(u, v), std::max(u, v));
  }
  return {seen.begin(), seen.end()};
}

// The links renumbered by the reverse Cuthill–McKee ordering of the graph (every component).
Links rcm_ordered(const Links& links, int64_t nodes) {
  using Graph = boost::adjacency_list<boost::vecS, boost::vecS, boost::undirectedS>;
  Graph graph(static_cast<size_t>(nodes));
  for (const auto& link : links) boost::add_edge(static_cast<size_t>(link.first), static_cast<size_t>(link.second), graph);
  std::vector<Graph::vertex_descriptor> order(static_cast<size_t>(nodes));
  boost::cuthill_mckee_ordering(graph, order.rbegin());  // written backwards: the reverse ordering
  std::vector<int64_t> position(static_cast<size_t>(nodes));
  for (size_t n = 0; n < order.size(); ++n) position[order[n]] = static_cast<int64_t>(n);
  Links renumbered;
  for (const auto& link : links) renumbered.emplace_back(position[link.first], position[link.second]);
  return renumbered;
}

// A + I as a CSR edge list: both directions of every link and a self loop on every node.
EdgeList with_self_loops(const Links& links, int64_t nodes) {
  std::vector<std::set<int64_t>> neighbours(nodes);
  for (int64_t i = 0; i < nodes; ++i) neighbours[i].insert(i);
  for (const auto& link : links) {
    neighbours[link.first].insert(link.second);
    neighbours[link.second].insert(link.first);
  }
  std::vector<int64_t> row_ptr{0}, col;
  for (const std::set<int64_t>& keys : neighbours) {
    col.insert(col.end(), keys.begin(), keys.end());
    row_ptr.push_back(static_cast<int64_t>(col.size()));
  }
  return {.row_ptr = Tensor::from_indices(row_ptr, {nodes + 1}),
          .col = Tensor::from_indices(col, {static_cast<int64_t>(col.size())})};
}

// The fraction of tile × tile blocks of the adjacency that hold an edge.
double nonempty_tiles(const EdgeList& edges, int64_t nodes, int64_t tile) {
  const std::vector<double> row_ptr = edges.row_ptr.to_vector(), col = edges.col.to_vector();
  const int64_t tiles = (nodes + tile - 1) / tile;
  std::vector<char> seen(tiles * tiles, 0);
  for (int64_t i = 0; i < nodes; ++i)
    for (auto e = static_cast<int64_t>(row_ptr[i]); e < static_cast<int64_t>(row_ptr[i + 1]); ++e)
      seen[i / tile * tiles + static_cast<int64_t>(col[e]) / tile] = 1;
  int64_t count = 0;
  for (const char s : seen) count += s;
  return static_cast<double>(count) / static_cast<double>(tiles * tiles);
}

}  // namespace

int main(int argc, char** argv) {
  cli::Program program{"Attention over a graph's edges against the dense masked path (see the top of bench/edge_attention.cpp)"};
  cli::Command& command = program.command();
  int threads = 2, min_reps = 5;
  double budget_s = 3;
  std::string edges_path = "../shared/data/cora/edges.tsv", dtype_name = "float32", clock = "wall";
  command.option("--threads", threads, "CPU threads (OpenMP and OpenBLAS)");
  command.option("--edges", edges_path, "the graph: `u v` lines (undirected links); absent: a random graph of Cora's size");
  command.option("--dtype", dtype_name, "float32 or float64").one_of({"float32", "float64"});
  command.option("--min-reps", min_reps, "timed runs at least, per case");
  command.option("--budget-s", budget_s, "seconds of repeats per case (after min-reps)");
  command.option("--clock", clock, "wall, or cpu: the process's CPU time (for one thread on a busy machine)")
      .one_of({"wall", "cpu"});
  if (const int code = program.parse_plain(argc, argv); code >= 0) return code;
  set_num_threads(threads);
  bench::return_freed_memory_to_the_system();
  const DType dtype = dtype_name == "float64" ? DType::Float64 : DType::Float32;
  const bench::Clock timing = clock == "cpu" ? bench::Clock::Cpu : bench::Clock::Wall;

  int64_t nodes = 0;
  Links links = read_links(edges_path, nodes);
  std::string source = edges_path;
  if (links.empty()) {
    nodes = 2708;
    links = random_links(nodes, 5278, 1);
    source = "a random graph (" + edges_path + " not found)";
  }
  const EdgeList edges = with_self_loops(links, nodes);
  const int64_t E = edges.col.size(0), H = 8, d = 8;
  std::printf("graph: %s: %lld nodes, %zu links, %lld edges with self loops (density %.3f %%); q, k, v [1, %lld, %lld, %lld] %s; "
              "%d threads, %s time\n",
              source.c_str(), static_cast<long long>(nodes), links.size(), static_cast<long long>(E),
              100.0 * static_cast<double>(E) / static_cast<double>(nodes * nodes), static_cast<long long>(H),
              static_cast<long long>(nodes), static_cast<long long>(d), dtype_name.c_str(), threads, clock.c_str());
  const EdgeList rcm = with_self_loops(rcm_ordered(links, nodes), nodes);
  std::printf("nonempty 128×128 tiles: %.1f %% in the file's order, %.1f %% after reverse Cuthill–McKee\n\n",
              100 * nonempty_tiles(edges, nodes, 128), 100 * nonempty_tiles(rcm, nodes, 128));

  Generator gen(7);
  const Tensor q = Tensor::randn({1, H, nodes, d}, dtype, &gen), k = Tensor::randn({1, H, nodes, d}, dtype, &gen),
               v = Tensor::randn({1, H, nodes, d}, dtype, &gen), R = Tensor::randn({1, H, nodes, d}, dtype, &gen);
  const Tensor adjacency = edge_adjacency(edge_graph(edges, nodes, nodes, Device::CPU)),
               rcm_adjacency = edge_adjacency(edge_graph(rcm, nodes, nodes, Device::CPU));
  struct Path {
    std::string name;
    AttentionSpec spec;
  };
  std::vector<Path> paths;
  {
    SoftmaxAttention softmax;
    softmax.masks.edges = edges;
    paths.push_back({"edges", {.function = softmax}});
    for (const AttentionImpl impl : {AttentionImpl::Dense, AttentionImpl::Flash}) {
      SoftmaxAttention masked{.impl = impl};
      masked.masks.adjacency = adjacency;
      paths.push_back({std::string("adjacency, ") + name_of(impl), {.function = masked}});
    }
    SoftmaxAttention reordered{.impl = AttentionImpl::Flash};
    reordered.masks.adjacency = rcm_adjacency;
    paths.push_back({"adjacency in RCM order, flash", {.function = reordered}});
    for (const AttentionImpl impl : {AttentionImpl::Dense, AttentionImpl::Flash})  // the complete graph
      paths.push_back({std::string("no mask, ") + name_of(impl), {.function = SoftmaxAttention{.impl = impl}}});
  }
  std::printf("| path | forward ms | forward + backward ms | vs edges |\n|---|---:|---:|---:|\n");
  double edges_ms = 0;
  for (const Path& path : paths) {
    const auto forward = [&] { attention(q, k, v, path.spec); };
    const auto step = [&] {
      Tensor x[3] = {q.detach().requires_grad_(), k.detach().requires_grad_(), v.detach().requires_grad_()};
      attention(x[0], x[1], x[2], path.spec).backward(R);
    };
    step();  // warm-up: the dense path's mask bytes and block map, cached from here on
    const double forward_ms = bench::median_ms(forward, timing, min_reps, 1000, 1e3 * budget_s / 2);
    const double step_ms = bench::median_ms(step, timing, min_reps, 1000, 1e3 * budget_s);
    if (path.name == "edges") edges_ms = step_ms;
    std::printf("| %s | %.3f | %.3f | %.1f× |\n", path.name.c_str(), forward_ms, step_ms, step_ms / edges_ms);
    std::fflush(stdout);
  }
  return 0;
}
