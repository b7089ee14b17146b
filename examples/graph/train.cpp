#include "examples/graph/train.h"

#include <algorithm>
#include <boost/graph/adjacency_list.hpp>
#include <boost/graph/breadth_first_search.hpp>
#include <boost/graph/visitors.hpp>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <ctime>
#include <filesystem>
#include <sstream>

#include "examples/common/files.h"
#include "examples/graph/picture.h"
#include "optim/adam.h"

namespace ag::graph {

namespace {

using BoostGraph = boost::adjacency_list<boost::vecS, boost::vecS, boost::undirectedS>;

// dist [N, N] by one breadth-first search per source (Boost.Graph), clipped: max_distance + 1
// for anything farther, max_distance + 2 for unreachable nodes.
Tensor shortest_paths(const GraphData& data, int64_t max_distance) {
  const int64_t N = data.nodes;
  BoostGraph g(static_cast<size_t>(N));
  for (const auto& e : data.edges) boost::add_edge(static_cast<size_t>(e[0]), static_cast<size_t>(e[1]), g);
  std::vector<int64_t> index(static_cast<size_t>(N * N));
  std::vector<int64_t> d(static_cast<size_t>(N));
  for (int64_t s = 0; s < N; ++s) {
    std::fill(d.begin(), d.end(), -1);
    d[s] = 0;
    boost::breadth_first_search(g, static_cast<size_t>(s),
                                boost::visitor(boost::make_bfs_visitor(boost::record_distances(d.data(), boost::on_tree_edge()))));
    for (int64_t t = 0; t < N; ++t)
      index[s * N + t] = d[t] < 0 ? max_distance + 2 : std::min(d[t], max_distance + 1);
  }
  return Tensor::from_indices(index, {N, N});
}

// The index rows of a split, as int64 [n].
Tensor rows_of(const GraphData& data, Split s) {
  const std::vector<int64_t> rows = data.nodes_in(s);
  return Tensor::from_indices(rows, {static_cast<int64_t>(rows.size())});
}

// Loss and accuracy of `logits` [N, C] on the rows `rows`.
struct Score {
  double loss = 0, accuracy = 0;
};
Score score(const Tensor& logits, const Tensor& rows, const std::vector<int64_t>& labels) {
  const Tensor picked = embedding(logits, rows);  // [n, C]
  const std::vector<int64_t> r = rows.to_indices();
  std::vector<int64_t> targets;
  for (const int64_t n : r) targets.push_back(labels[n]);
  const double loss = cross_entropy(picked, Tensor::from_indices(targets, {static_cast<int64_t>(r.size())})).item();
  const std::vector<double> v = picked.to_vector();
  const int64_t C = logits.size(1);
  int64_t right = 0;
  for (size_t i = 0; i < r.size(); ++i) {
    const double* row = v.data() + i * C;
    right += std::max_element(row, row + C) - row == targets[i];
  }
  return {loss, r.empty() ? 0.0 : static_cast<double>(right) / static_cast<double>(r.size())};
}

std::unique_ptr<nn::Module> make_model(const GraphData& data, const GraphConfig& c, Generator* gen) {
  if (c.model == GraphModel::Gat)
    return std::make_unique<GatModel>(data.features, c.heads, c.hidden, c.classes, gen, c.attention_path);
  return std::make_unique<GraphTransformer>(
      GraphTransformer::Config{.features = data.features, .classes = c.classes, .heads = c.heads, .width = c.hidden,
                               .layers = c.layers, .max_distance = c.max_distance, .max_degree = c.max_degree,
                               .complete = c.model == GraphModel::Complete, .path = c.attention_path},
      gen);
}

Tensor logits_of(const nn::Module& model, const GraphTensors& g, const Dropouts& drop) {
  if (const auto* gat = dynamic_cast<const GatModel*>(&model)) return gat->forward(g, drop);
  return static_cast<const GraphTransformer&>(model).forward(g, drop);
}

// The first run's picture of node c.draw_node (examples/graph/picture.h), titled with what was drawn.
std::string node_picture(const GraphData& data, const GraphTensors& g, const GraphConfig& c, const ModelRun& run) {
  const RunResult& r = run.result;
  const std::filesystem::path dir = std::filesystem::path(data.dir).lexically_normal();
  const std::string name = (dir.has_filename() ? dir.filename() : dir.parent_path().filename()).string();
  char title[512];
  std::snprintf(title, sizeof title, "GAT on %s, seed %lld, parameters of epoch %lld (lowest validation loss; test accuracy %.1f %%)",
                name.c_str(), static_cast<long long>(r.seed), static_cast<long long>(r.best_epoch), 100 * r.test_accuracy);
  return node_attention_svg(gat_node_view(static_cast<const GatModel&>(*run.model), data, g, c.draw_node, c.draw_hops, title));
}

}  // namespace

GraphTensors graph_tensors(const GraphData& data, const GraphConfig& config) {
  const int64_t N = data.nodes, F = data.features;
  std::vector<double> x(static_cast<size_t>(N * F), 0.0);
  for (int64_t n = 0; n < N; ++n)
    for (const int64_t f : data.active[n]) x[n * F + f] = 1.0 / static_cast<double>(data.active[n].size());
  std::vector<double> a(static_cast<size_t>(N * N), 0.0);
  std::vector<int64_t> degree(static_cast<size_t>(N)), row_ptr{0}, col;
  const std::vector<std::vector<int64_t>> neighbours = data.neighbours();
  for (int64_t n = 0; n < N; ++n) {
    a[n * N + n] = 1.0;  // A + I: every node attends to itself
    for (const int64_t m : neighbours[n]) a[n * N + m] = 1.0;
    // the same row as edges: itself among its neighbours (sorted), keys increasing
    const auto after = std::upper_bound(neighbours[n].begin(), neighbours[n].end(), n);
    col.insert(col.end(), neighbours[n].begin(), after);
    col.push_back(n);
    col.insert(col.end(), after, neighbours[n].end());
    row_ptr.push_back(static_cast<int64_t>(col.size()));
    degree[n] = std::min<int64_t>(static_cast<int64_t>(neighbours[n].size()), config.max_degree);
  }
  GraphTensors g{.features = Tensor::from_vector(x, {N, F}), .adjacency = Tensor::from_vector(a, {N, N}),
                 .edges = {.row_ptr = Tensor::from_indices(row_ptr, {N + 1}),
                           .col = Tensor::from_indices(col, {static_cast<int64_t>(col.size())})},
                 .distance = {}, .edge_distance = {}, .degree = Tensor::from_indices(degree, {N})};
  if (config.model == GraphModel::Gat) return g;
  g.distance = shortest_paths(data, config.max_distance);
  // the distance at each edge, in the edge list's order: the transformer's bias index on the edge path
  const std::vector<int64_t> distance = g.distance.to_indices();
  std::vector<int64_t> at_edges;
  for (int64_t n = 0; n < N; ++n)
    for (int64_t e = row_ptr[n]; e < row_ptr[n + 1]; ++e) at_edges.push_back(distance[n * N + col[e]]);
  g.edge_distance = Tensor::from_indices(at_edges, {static_cast<int64_t>(at_edges.size())});
  return g;
}

RunResult train_one(const GraphData& data, const GraphTensors& g, const GraphConfig& c, int64_t seed) {
  return train_run(data, g, c, seed).result;
}

ModelRun train_run(const GraphData& data, const GraphTensors& g, const GraphConfig& c, int64_t seed) {
  const auto start = std::chrono::steady_clock::now();
  const std::clock_t cpu_start = std::clock();
  Generator gen(static_cast<uint64_t>(seed));
  std::unique_ptr<nn::Module> model = make_model(data, c, &gen);
  optim::Adam adam(model->named_parameters(), {.lr = c.lr}, c.weight_decay);
  const Tensor train = rows_of(data, Split::Train), val = rows_of(data, Split::Val), test = rows_of(data, Split::Test);
  std::vector<int64_t> train_labels;
  for (const int64_t n : train.to_indices()) train_labels.push_back(data.labels[n]);
  const Tensor train_targets = Tensor::from_indices(train_labels, {train.numel()});
  RunResult r{.seed = seed};
  double best = std::numeric_limits<double>::infinity();
  std::vector<NamedTensor> best_state;  // copies of the parameters at best_epoch
  for (int64_t epoch = 1, waited = 0; epoch <= c.max_epochs && waited < c.patience; ++epoch, ++waited) {
    model->train();
    adam.zero_grad();
    cross_entropy(embedding(logits_of(*model, g, {c.dropout, c.attn_dropout, &gen}), train), train_targets).backward();
    adam.step();
    model->eval();
    const NoGradGuard no_grad;
    const Tensor logits = logits_of(*model, g, {});
    const Score v = score(logits, val, data.labels);
    r.epochs = epoch;
    if (v.loss < best) {
      best = v.loss;
      waited = -1;  // the loop's ++waited makes it 0
      r.best_epoch = epoch;
      r.val_loss = v.loss;
      r.val_accuracy = v.accuracy;
      r.test_accuracy = score(logits, test, data.labels).accuracy;
      best_state = model->state();
      for (NamedTensor& p : best_state) p.tensor = p.tensor.clone();
    }
  }
  if (!best_state.empty()) model->load_state(best_state);  // empty: no epoch had a finite validation loss
  r.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  r.cpu_seconds = static_cast<double>(std::clock() - cpu_start) / CLOCKS_PER_SEC;
  return {.result = r, .model = std::move(model)};
}

Summary summarise(const std::vector<RunResult>& runs) {
  Summary s;
  if (runs.empty()) return s;
  for (const RunResult& r : runs) s.mean += r.test_accuracy;
  s.mean /= static_cast<double>(runs.size());
  if (runs.size() < 2) return s;
  double squares = 0;
  for (const RunResult& r : runs) squares += (r.test_accuracy - s.mean) * (r.test_accuracy - s.mean);
  s.sd = std::sqrt(squares / static_cast<double>(runs.size() - 1));
  return s;
}

std::string picture_path(const GraphConfig& c) {
  return c.svg.empty() ? "node_" + std::to_string(c.draw_node) + ".svg" : c.svg;
}

std::vector<RunResult> run_graph(const GraphConfig& c) {
  const GraphData data = load_graph(resolve_graph_dir(c.data), c.classes);
  const bool draw = c.draw_node >= 0;
  if (draw) {  // before any training: a picture that cannot be drawn is refused at once
    AG_CHECK(c.model == GraphModel::Gat, "--draw-node draws gat's attention, not " << name_of(c.model) << "'s");
    check_node(c.draw_node, data.nodes);
  }
  const GraphTensors g = graph_tensors(data, c);
  std::vector<RunResult> runs;
  std::string picture;
  for (int64_t s = 0; s < c.seeds; ++s) {
    ModelRun run = train_run(data, g, c, c.seed + s);
    runs.push_back(run.result);
    const RunResult& r = runs.back();
    if (draw && s == 0) picture = node_picture(data, g, c, run);
    if (!c.quiet)
      std::printf("seed %lld: test accuracy %.1f %% (val loss %.4f, val accuracy %.1f %% at epoch %lld of %lld), %.1f s, %.1f s CPU\n",
                  static_cast<long long>(r.seed), 100 * r.test_accuracy, r.val_loss, 100 * r.val_accuracy,
                  static_cast<long long>(r.best_epoch), static_cast<long long>(r.epochs), r.seconds, r.cpu_seconds);
    std::fflush(stdout);
  }
  const Summary s = summarise(runs);
  double seconds = 0, cpu = 0;
  for (const RunResult& r : runs) seconds += r.seconds, cpu += r.cpu_seconds;
  std::printf("%s on %s: test accuracy %.1f ± %.1f %% over %lld seeds (%.1f s, %.1f s CPU)\n", name_of(c.model),
              data.dir.c_str(), 100 * s.mean, 100 * s.sd, static_cast<long long>(runs.size()), seconds, cpu);
  if (!c.out.empty()) {
    std::ostringstream csv;
    csv << "model,seed,epochs,best_epoch,val_loss,val_accuracy,test_accuracy,seconds,cpu_seconds\n";
    for (const RunResult& r : runs)
      csv << name_of(c.model) << ',' << r.seed << ',' << r.epochs << ',' << r.best_epoch << ',' << r.val_loss << ','
          << r.val_accuracy << ',' << r.test_accuracy << ',' << r.seconds << ',' << r.cpu_seconds << '\n';
    replace_file(c.out, csv.str());
  }
  if (draw) {
    replace_file(picture_path(c), picture);
    std::printf("node %lld's attention (seed %lld's model): %s\n", static_cast<long long>(c.draw_node),
                static_cast<long long>(c.seed), picture_path(c).c_str());
  }
  return runs;
}

}  // namespace ag::graph
