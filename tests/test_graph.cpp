// graph (examples/graph): reading a graph (tests/graph_fixture, a made-up five-node graph),
// a bad file's error naming the file and the line with nothing written, the data directory's
// resolution, the shortest paths and degrees the transformer reads, float64 gradcheck of the
// GAT and transformer models, GAT and the transformer over the edge list equal to them over the
// dense mask, and a run that is the same bits twice.
#include <cstdlib>
#include <filesystem>
#include <string>
#include <vector>

#include "examples/graph/train.h"
#include "tests/helpers.h"

// The file's names and using-directives stay its own in a unity build, where the test
// files compile as one translation unit (CMakeLists.txt).
namespace graph_test {

using namespace ag;
using namespace ag::graph;
using ag::test::TempDir;

namespace {

const std::string kFixture = std::string(ATTOGRAD_SOURCE_DIR) + "/tests/graph_fixture";

// A copy of the fixture in `dir` with one file's text replaced.
void write_graph(const TempDir& dir, const std::string& nodes, const std::string& edges) {
  ag::test::write_file(dir.file("nodes.tsv"), nodes);
  ag::test::write_file(dir.file("edges.tsv"), edges);
}
std::string fixture_nodes() { return ag::test::read_file(kFixture + "/nodes.tsv"); }
std::string fixture_edges() { return ag::test::read_file(kFixture + "/edges.tsv"); }

// run_graph on `dir` with --out in it: must throw with `words` in the message and write no CSV.
void check_refused(const TempDir& dir, const std::string& words, int64_t classes = 2) {
  GraphConfig c;
  c.data = dir.path();
  c.classes = classes;
  c.out = dir.file("results.csv");
  c.max_epochs = 1;
  c.quiet = true;
  const std::string message = ag::test::error_of([&] { run_graph(c); });
  INFO("message: " << message);
  CHECK(ag::test::contains(message, words));
  CHECK(!std::filesystem::exists(c.out));
}

GraphConfig small_config(GraphModel model) {
  GraphConfig c;
  c.model = model;
  c.data = kFixture;
  c.classes = 2;
  c.heads = 2;
  c.hidden = 2;
  c.max_distance = 2;
  c.max_degree = 2;
  c.quiet = true;
  return c;
}

}  // namespace

TEST_CASE("graph: the five-node fixture is read as written") {
  const GraphData g = load_graph(kFixture, 2);
  CHECK(g.nodes == 5);
  CHECK(g.features == 4);
  CHECK(g.classes == 2);
  CHECK(g.labels == std::vector<int64_t>{0, 1, 0, 1, 1});
  CHECK(g.nodes_in(Split::Train) == std::vector<int64_t>{0, 1});
  CHECK(g.nodes_in(Split::Val) == std::vector<int64_t>{2});
  CHECK(g.nodes_in(Split::Test) == std::vector<int64_t>{3});
  CHECK(g.active[3] == std::vector<int64_t>{1, 2, 3});
  CHECK(g.active[4].empty());
  const auto neighbours = g.neighbours();
  CHECK(neighbours[1] == std::vector<int64_t>{0, 2});
  CHECK(neighbours[4].empty());
}

TEST_CASE("graph: a bad graph file is an error naming the file and line, and nothing is written") {
  TempDir dir("graph_errors");
  const std::string nodes = fixture_nodes(), edges = fixture_edges();
  SUBCASE("a missing file") {
    ag::test::write_file(dir.file("nodes.tsv"), nodes);
    check_refused(dir, "edges.tsv' does not exist");
  }
  SUBCASE("a malformed line") {
    write_graph(dir, nodes + "5\t1\ttrain\n", edges);
    check_refused(dir, "nodes.tsv:7: expected 4 tab-separated columns");
  }
  SUBCASE("a feature that is not a number") {
    write_graph(dir, nodes + "5\t1\ttrain\t2 x\n", edges);
    check_refused(dir, "nodes.tsv:7: feature index 'x' is not a non-negative integer");
  }
  SUBCASE("an edge to a node that does not exist") {
    write_graph(dir, nodes, edges + "3\t9\n");
    check_refused(dir, "edges.tsv:5: node 9 does not exist");
  }
  SUBCASE("a label out of range") {
    write_graph(dir, nodes + "5\t2\ttrain\t1\n", edges);
    check_refused(dir, "nodes.tsv:7: label 2 is out of range [0, 2)");
  }
  SUBCASE("an unknown split") {
    write_graph(dir, nodes + "5\t1\ttraining\t1\n", edges);
    check_refused(dir, "nodes.tsv:7: split 'training' is not train, val, test or unlabeled");
  }
  SUBCASE("nodes out of order") {
    write_graph(dir, nodes + "7\t1\ttrain\t1\n", edges);
    check_refused(dir, "nodes.tsv:7: node 7 out of order (expected 5)");
  }
  SUBCASE("an edge line of three columns") {
    write_graph(dir, nodes, edges + "3\t4\t1\n");
    check_refused(dir, "edges.tsv:5: expected 2 tab-separated columns (u, v), found 3");
  }
  SUBCASE("a self-loop") {
    write_graph(dir, nodes, edges + "3\t3\n");
    check_refused(dir, "edges.tsv:5: a self-loop 3 – 3 (the models add every node's own)");
  }
  SUBCASE("no nodes") {
    write_graph(dir, "# node\tlabel\tsplit\tfeatures\n", edges);
    check_refused(dir, "nodes.tsv' has no nodes");
  }
  SUBCASE("an index too long for int64, and an empty one") {
    write_graph(dir, nodes + "5\t1\ttrain\t1234567890123456789\n", edges);
    check_refused(dir, "nodes.tsv:7: feature index '1234567890123456789' is not a non-negative integer");
    write_graph(dir, nodes + "\t1\ttrain\t1\n", edges);
    check_refused(dir, "nodes.tsv:7: node '' is not a non-negative integer");
  }
  SUBCASE("a data path that is a file") {
    ag::test::write_file(dir.file("nodes.tsv"), nodes);
    GraphConfig c;
    c.data = dir.file("nodes.tsv");
    c.quiet = true;
    CHECK(ag::test::contains(ag::test::error_of([&] { run_graph(c); }), "nodes.tsv' is not a directory"));
  }
  SUBCASE("a feature index past the number of features given") {
    write_graph(dir, nodes, edges);
    CHECK_NOTHROW(load_graph(dir.path(), 2, 4));
    CHECK_THROWS_WITH_AS(load_graph(dir.path(), 2, 3), doctest::Contains("nodes.tsv:3: feature index 3 is out of range [0, 3)"), Error);
  }
}

TEST_CASE("graph: the data directory is --data, then $ATTOGRAD_GRAPH_DATA, then data/cora, then ../shared/data/cora") {
  CHECK(resolve_graph_dir("given") == "given");
  setenv("ATTOGRAD_GRAPH_DATA", "from_env", 1);
  CHECK(resolve_graph_dir("") == "from_env");
  unsetenv("ATTOGRAD_GRAPH_DATA");
  TempDir root("graph_root");
  std::filesystem::create_directories(root.dir / "shared/data/cora");
  std::filesystem::create_directories(root.dir / "work");
  ag::test::write_file(root.file("shared/data/cora/nodes.tsv"), "");
  CHECK(resolve_graph_dir("", root.file("work")) == (root.dir / "shared/data/cora").lexically_normal().string());
  std::filesystem::create_directories(root.dir / "work/data/cora");
  ag::test::write_file(root.file("work/data/cora/nodes.tsv"), "");
  CHECK(resolve_graph_dir("", root.file("work")) == (root.dir / "work/data/cora").lexically_normal().string());
}

TEST_CASE("graph: shortest paths (Boost.Graph) and degrees, clipped, and A + I") {
  const GraphData data = load_graph(kFixture, 2);
  const GraphTensors g = graph_tensors(data, small_config(GraphModel::Transformer));
  // the path 0 – 1 – 2 – 3 and node 4 alone; max_distance 2: 3 → 3 (beyond), unreachable → 4
  CHECK(g.distance.to_indices() == std::vector<int64_t>{0, 1, 2, 3, 4, 1, 0, 1, 2, 4, 2, 1, 0, 1, 4, 3, 2, 1, 0, 4,
                                                        4, 4, 4, 4, 0});
  CHECK(g.degree.to_indices() == std::vector<int64_t>{1, 2, 2, 1, 0});
  CHECK(g.adjacency.to_vector() == std::vector<double>{1, 1, 0, 0, 0, 1, 1, 1, 0, 0, 0, 1, 1, 1, 0, 0, 0, 1, 1, 0,
                                                       0, 0, 0, 0, 1});
  CHECK(g.features.to_vector()[0] == 0.5);  // each row sums to 1
}

TEST_CASE("graph: the GAT (edge list and dense mask) and transformer models pass float64 gradcheck") {
  const GraphData data = load_graph(kFixture, 2);
  struct Case {
    GraphModel model;
    AttentionPath path;  // complete reads no mask: dense either way
  };
  for (const Case& k : {Case{GraphModel::Gat, AttentionPath::Edges}, Case{GraphModel::Gat, AttentionPath::Dense},
                        Case{GraphModel::Transformer, AttentionPath::Edges},
                        Case{GraphModel::Transformer, AttentionPath::Dense}, Case{GraphModel::Complete, AttentionPath::Edges}}) {
    const GraphModel model = k.model;
    const AttentionPath path = k.path;
    INFO("model " << std::string(name_of(model)) << ", path " << std::string(name_of(path)));
    const GraphConfig c = small_config(model);
    GraphTensors g = graph_tensors(data, c);
    // Node 4 has no features: X, XW and the scores of its row would sit at 0, on LeakyReLU's kink,
    // where a central difference is no derivative. Away from it by a little noise.
    g.features = g.features.to(DType::Float64) + ag::test::random({data.nodes, data.features}, 8, DType::Float64, false) * 0.1;
    Generator gen(3);
    std::unique_ptr<nn::Module> m;
    if (model == GraphModel::Gat) m = std::make_unique<GatModel>(data.features, 2, 2, 2, &gen, path);
    else
      m = std::make_unique<GraphTransformer>(
          GraphTransformer::Config{data.features, 2, 2, 2, 1, 2, 2, model == GraphModel::Complete, path}, &gen);
    m->eval();
    ag::test::check_module_gradients(*m, Tensor(), [&](const Tensor&) {
      if (model == GraphModel::Gat) return static_cast<GatModel&>(*m).forward(g, {});
      return static_cast<GraphTransformer&>(*m).forward(g, {});
    });
  }
}

namespace {

// The loss and the parameters' gradients of one training step of `model` on the fixture (its
// features in float64, off LeakyReLU's kink by a little noise), from the same initialisation and
// dropout generator whichever the path (the edge path draws the dense path's counters: the same
// A_ij dropped).
std::vector<Tensor> one_step(GraphModel model, AttentionPath path, double p) {
  const GraphData data = load_graph(kFixture, 2);
  GraphTensors g = graph_tensors(data, small_config(model));
  g.features = g.features.to(DType::Float64) + ag::test::random({data.nodes, data.features}, 9, DType::Float64, false) * 0.1;
  const std::vector<int64_t> train = data.nodes_in(Split::Train);
  std::vector<int64_t> labels;
  for (const int64_t n : train) labels.push_back(data.labels[n]);
  const Tensor rows = Tensor::from_indices(train, {static_cast<int64_t>(train.size())}),
               targets = Tensor::from_indices(labels, {static_cast<int64_t>(labels.size())});
  Generator gen(5);
  const Dropouts drop{.input = p, .attention = p, .gen = &gen};
  std::unique_ptr<nn::Module> m;
  if (model == GraphModel::Gat) m = std::make_unique<GatModel>(data.features, 2, 2, 2, &gen, path);
  else m = std::make_unique<GraphTransformer>(GraphTransformer::Config{data.features, 2, 2, 2, 2, 2, 2, false, path}, &gen);
  m->to(DType::Float64);
  m->train();
  const Tensor logits = model == GraphModel::Gat ? static_cast<GatModel&>(*m).forward(g, drop)
                                                 : static_cast<GraphTransformer&>(*m).forward(g, drop);
  const Tensor loss = cross_entropy(embedding(logits, rows), targets);
  loss.backward();
  std::vector<Tensor> out{loss.detach()};
  for (const NamedTensor& t : m->named_parameters()) out.push_back(t.tensor.grad());
  return out;
}

// one_step over the edge list equals one_step over the dense mask: the loss to 1e-12, and the
// gradients normwise against the largest of them all (gat's output layer's a₁, one head, has a
// gradient that is 0 but for rounding (≈ 1e-18): dα_i = Σ_j dS_ij·LeakyReLU′ vanishes when row i's
// scores share a sign, as Σ_j dS_ij = 0 under a softmax). The loss, for comparing dropout rates.
double check_paths_agree(GraphModel model, double p) {
  const std::vector<Tensor> edges = one_step(model, AttentionPath::Edges, p), dense = one_step(model, AttentionPath::Dense, p);
  REQUIRE(edges.size() == dense.size());
  CHECK_CLOSE(edges[0], dense[0], 1e-12);  // the loss
  double largest = 0;
  for (size_t i = 1; i < dense.size(); ++i)
    for (const double x : dense[i].to_vector()) largest = std::max(largest, std::abs(x));
  REQUIRE(largest > 0);
  for (size_t i = 1; i < edges.size(); ++i) {
    CAPTURE(i);
    CHECK(ag::test::max_abs_error(edges[i], dense[i]) <= 1e-12 * largest);
  }
  return edges[0].item();
}

}  // namespace

TEST_CASE("graph: gat over the edge list equals gat over the dense mask (float64 ≤ 1e-12) — one epoch's loss and every gradient, dropout 0 and 0.3") {
  const GraphTensors g = graph_tensors(load_graph(kFixture, 2), small_config(GraphModel::Gat));
  // A + I as edges: each row's keys itself and its neighbours, increasing
  CHECK(g.edges.row_ptr.to_indices() == std::vector<int64_t>{0, 2, 5, 8, 10, 11});
  CHECK(g.edges.col.to_indices() == std::vector<int64_t>{0, 1, 0, 1, 2, 1, 2, 3, 2, 3, 4});
  const double without = check_paths_agree(GraphModel::Gat, 0.0), with = check_paths_agree(GraphModel::Gat, 0.3);
  CHECK(without != with);  // the dropout dropped something
}

TEST_CASE("graph: the transformer over the edge list equals it over the dense mask (float64 ≤ 1e-12) — one epoch's loss and every gradient, the distance bias included, dropout 0 and 0.3") {
  const GraphTensors g = graph_tensors(load_graph(kFixture, 2), small_config(GraphModel::Transformer));
  // the distance at each edge of A + I, in the list's order: 0 on the self loops, 1 to a neighbour
  CHECK(g.edge_distance.to_indices() == std::vector<int64_t>{0, 1, 1, 0, 1, 1, 0, 1, 1, 0, 0});
  const double without = check_paths_agree(GraphModel::Transformer, 0.0),
               with = check_paths_agree(GraphModel::Transformer, 0.3);
  CHECK(without != with);
}

TEST_CASE("graph: a run trains, stops early and is the same bits twice") {
  for (const GraphModel model : {GraphModel::Gat, GraphModel::Transformer, GraphModel::Complete}) {
    GraphConfig c = small_config(model);
    c.max_epochs = 30;
    c.patience = 5;
    const GraphData data = load_graph(kFixture, 2);
    const GraphTensors g = graph_tensors(data, c);
    const RunResult a = train_one(data, g, c, 4), b = train_one(data, g, c, 4);
    CHECK(a.epochs >= 1);
    CHECK(a.epochs <= 30);
    CHECK(a.best_epoch <= a.epochs);
    CHECK(a.val_loss == b.val_loss);
    CHECK(a.test_accuracy == b.test_accuracy);
    CHECK(a.epochs == b.epochs);
  }
  const Summary s = summarise({{.test_accuracy = 0.8}, {.test_accuracy = 0.9}});
  CHECK(s.mean == doctest::Approx(0.85));
  CHECK(s.sd == doctest::Approx(std::sqrt(0.005)));
}

}  // namespace graph_test
