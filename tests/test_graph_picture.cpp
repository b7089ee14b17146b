// graph --draw-node (examples/graph/picture.h): one node's attention over its neighbourhood
// as an SVG, on the five-node fixture (tests/graph_fixture: edges 0–1, 1–2, 2–3, node 4
// alone). The picture names every neighbour and no other node, its drawn weights are node i's
// softmax row (equal to the dense path's row of A, summing to 1), made-up weights are drawn as
// given, a node out of range is refused naming the id and N with nothing written, and the
// model drawn is the run's best epoch's.
#include <filesystem>
#include <map>
#include <regex>
#include <set>
#include <string>
#include <vector>

#include "examples/graph/picture.h"
#include "examples/graph/train.h"
#include "tests/helpers.h"

// The file's names and using-directives stay its own in a unity build, where the test
// files compile as one translation unit (CMakeLists.txt).
namespace graph_picture_test {

using namespace ag;
using namespace ag::graph;
using ag::test::TempDir;

namespace {

const std::string kPictureFixture = std::string(ATTOGRAD_SOURCE_DIR) + "/tests/graph_fixture";

GraphConfig picture_config() {
  GraphConfig c;
  c.data = kPictureFixture;
  c.classes = 2;
  c.heads = 2;
  c.hidden = 2;
  c.quiet = true;
  return c;
}

// The large panels' weighted edges: data-from j → data-weight A_ij, with every data-to.
struct DrawnEdges {
  std::map<int64_t, double> weight;
  std::set<int64_t> to;
};
DrawnEdges drawn_edges(const std::string& svg) {
  DrawnEdges e;
  const std::regex edge("class=\"edge[^\"]*\" data-from=\"([0-9]+)\" data-to=\"([0-9]+)\" data-weight=\"([^\"]+)\"");
  for (auto m = std::sregex_iterator(svg.begin(), svg.end(), edge); m != std::sregex_iterator(); ++m) {
    const int64_t from = std::stoll((*m)[1]);
    CHECK_MESSAGE(e.weight.count(from) == 0, "node " << from << "'s edge drawn twice");
    e.weight[from] = std::stod((*m)[3]);
    e.to.insert(std::stoll((*m)[2]));
  }
  return e;
}

// The ids of the drawn nodes (groups of class "node"), every panel's.
std::set<int64_t> drawn_nodes(const std::string& svg) {
  std::set<int64_t> nodes;
  const std::regex node("class=\"node\" data-node=\"([0-9]+)\"");
  for (auto m = std::sregex_iterator(svg.begin(), svg.end(), node); m != std::sregex_iterator(); ++m)
    nodes.insert(std::stoll((*m)[1]));
  return nodes;
}

// The ids written as text beside the nodes (class "node-id").
std::set<int64_t> named_nodes(const std::string& svg) {
  std::set<int64_t> nodes;
  const std::regex id("class=\"node-id\"[^>]*>([0-9]+)</text>");
  for (auto m = std::sregex_iterator(svg.begin(), svg.end(), id); m != std::sregex_iterator(); ++m)
    nodes.insert(std::stoll((*m)[1]));
  return nodes;
}

// A made-up view: a star of node 0 with neighbours 1 and 2 (and 1–2 linked), one layer, one head.
NodeView star_view() {
  NodeView v;
  v.row_ptr = {0, 3, 6, 9};
  v.col = {0, 1, 2, 0, 1, 2, 0, 1, 2};
  v.labels = {0, 1, 1};
  v.predictions = {1, 1, 0};
  v.classes = 2;
  v.split = "test";
  v.title = "made up";
  v.layers = {{"output layer", {{0.5, 0.3, 0.2, 0.1, 0.6, 0.3, 0.25, 0.25, 0.5}}}};
  return v;
}

}  // namespace

TEST_CASE("graph picture: on the fixture the SVG names every neighbour, and its weights are node i's row of A, summing to 1") {
  GraphConfig c = picture_config();
  const GraphData data = load_graph(kPictureFixture, 2);
  const GraphTensors g = graph_tensors(data, c);
  Generator edge_gen(5), dense_gen(5);  // the same seed: the same parameters on both paths
  const GatModel model(data.features, 2, 2, 2, &edge_gen, AttentionPath::Edges);
  const GatModel dense(data.features, 2, 2, 2, &dense_gen, AttentionPath::Dense);
  const std::vector<double> A = dense.output_attention(g).to_vector();  // [1, 1, N, N]: row i is node i's weights
  const int64_t N = data.nodes;
  const std::vector<std::vector<int64_t>> neighbours = data.neighbours();
  for (const int64_t i : {int64_t{1}, int64_t{2}}) {
    CAPTURE(i);
    const std::string svg = node_attention_svg(gat_node_view(model, data, g, i, 1, "fixture"));
    const DrawnEdges e = drawn_edges(svg);
    std::set<int64_t> row = {i};  // A + I's row i: itself and its neighbours
    for (const int64_t j : neighbours[i]) row.insert(j);
    std::set<int64_t> from;
    for (const auto& [j, w] : e.weight) from.insert(j);
    CHECK(from == row);
    CHECK(e.to == std::set<int64_t>{i});
    CHECK(drawn_nodes(svg) == row);  // every panel draws the row's nodes and no others
    double sum = 0;
    for (const auto& [key, w] : e.weight) {
      const int64_t j = key;  // a copy: CAPTURE's lambda may not capture a structured binding (clang 14)
      CAPTURE(j);
      CHECK(w > 0);
      CHECK(w == doctest::Approx(A[i * N + j]).epsilon(1e-5));  // %.6g of the edge path's A_ij against the dense path's
      sum += w;
    }
    CHECK(sum == doctest::Approx(1.0).epsilon(1e-5));
    for (int64_t j = 0; j < N; ++j)
      if (!row.count(j)) CHECK(A[i * N + j] == 0.0);  // the row drawn is all of node i's attention
    CHECK(named_nodes(svg) == row);                                          // each node's id written beside it
    CHECK(ag::test::occurrences(svg, "class=\"weight\"") == row.size());  // and (≤ 12 neighbours) each weight
    CHECK(ag::test::occurrences(svg, "class=\"small-panel\"") == 2);  // the hidden layer's two heads
    CHECK(ag::test::occurrences(svg, "class=\"strip-cell\"") == 3 * row.size());  // the row as a matrix: 1 + 2 heads
    CHECK(ag::test::contains(svg, "output layer, head 1 of 1"));
  }
  // Two steps: node 1's picture adds node 3 (through 2), grey and unweighted; node 4 is alone.
  const std::string two = node_attention_svg(gat_node_view(model, data, g, 1, 2, "fixture"));
  CHECK(drawn_nodes(two) == std::set<int64_t>{0, 1, 2, 3});
  CHECK(drawn_edges(two).weight.count(3) == 0);
  const std::string alone = node_attention_svg(gat_node_view(model, data, g, 4, 2, "fixture"));
  CHECK(drawn_nodes(alone) == std::set<int64_t>{4});
  CHECK(drawn_edges(alone).weight == std::map<int64_t, double>{{4, 1.0}});  // with no neighbours, A_44 = 1
}

TEST_CASE("graph picture: made-up weights are drawn as given — the heaviest edge widest, the classes named — and a view that disagrees with itself is refused") {
  const std::string svg = node_attention_svg(star_view());
  CHECK(drawn_edges(svg).weight == std::map<int64_t, double>{{0, 0.5}, {1, 0.3}, {2, 0.2}});  // row 0, not column 0
  for (const char* number : {">0.5</text>", ">0.3</text>", ">0.2</text>"}) CHECK(ag::test::contains(svg, number));
  CHECK(ag::test::contains(svg, "node 0 (test): class 0, predicted class 1 (wrong)"));
  // Width grows with the weight: A_01 = 0.3 is drawn wider than A_02 = 0.2.
  std::map<int64_t, double> width;
  const std::regex edge("data-from=\"([0-9]+)\" data-to=\"0\" data-weight=\"[^\"]+\" stroke=\"[^\"]+\" stroke-width=\"([^\"]+)\"");
  for (auto m = std::sregex_iterator(svg.begin(), svg.end(), edge); m != std::sregex_iterator(); ++m)
    width[std::stoll((*m)[1])] = std::stod((*m)[2]);
  REQUIRE(width.size() == 3);
  CHECK(width[1] > width[2]);
  CHECK(width[0] > width[1]);
  NodeView bad = star_view();
  bad.layers[0].heads[0].pop_back();
  CHECK(ag::test::contains(ag::test::error_of([&] { node_attention_svg(bad); }), "8 weights for E = 9"));
  bad = star_view();
  bad.col[4] = 3;
  CHECK(ag::test::contains(ag::test::error_of([&] { node_attention_svg(bad); }), "an edge to node 3 of N = 3"));
  bad = star_view();
  bad.predictions[2] = 2;
  CHECK(ag::test::contains(ag::test::error_of([&] { node_attention_svg(bad); }), "node 2's class 1 or prediction 2 is outside [0, 2)"));
}

TEST_CASE("graph picture: a node out of range is refused, naming the id and N, and nothing is written") {
  for (const int64_t node : {int64_t{3}, int64_t{-1}, int64_t{7}}) {
    NodeView v = star_view();
    v.node = node;
    CAPTURE(node);
    const std::string message = ag::test::error_of([&] { node_attention_svg(v); });
    CHECK(ag::test::contains(message, "node " + std::to_string(node) + " is not in the graph"));
    CHECK(ag::test::contains(message, "N = 3"));
  }
  const TempDir dir("graph_picture");
  GraphConfig c = picture_config();
  c.max_epochs = 2;
  c.out = dir.file("results.csv");
  c.svg = dir.file("node.svg");
  c.draw_node = 5;
  const std::string message = ag::test::error_of([&] { run_graph(c); });
  CHECK(ag::test::contains(message, "node 5 is not in the graph: it has N = 5 nodes"));
  c.draw_node = 1;
  c.model = GraphModel::Transformer;
  CHECK(ag::test::contains(ag::test::error_of([&] { run_graph(c); }), "--draw-node draws gat's attention"));
  CHECK(!std::filesystem::exists(c.svg));
  CHECK(!std::filesystem::exists(c.out));
  c.model = GraphModel::Gat;  // the same run with a node that exists writes both
  run_graph(c);
  CHECK(ag::test::contains(ag::test::read_file(c.svg), "node 1 (train): class 1"));
  CHECK(std::filesystem::exists(c.out));
}

TEST_CASE("graph picture: the model drawn holds the run's best epoch's parameters, not the last epoch's") {
  GraphConfig c = picture_config();
  c.max_epochs = 60;
  c.patience = 5;
  const GraphData data = load_graph(kPictureFixture, 2);
  const GraphTensors g = graph_tensors(data, c);
  const ModelRun run = train_run(data, g, c, 4);
  REQUIRE(run.result.best_epoch < run.result.epochs);  // it stopped early: the last epoch is not the best
  const NoGradGuard no_grad;
  const Tensor logits = static_cast<const GatModel&>(*run.model).forward(g, {});  // [N, C]
  const Tensor val = Tensor::from_indices(data.nodes_in(Split::Val), {1});
  const Tensor targets = Tensor::from_indices({data.labels[data.nodes_in(Split::Val)[0]]}, {1});
  CHECK(cross_entropy(embedding(logits, val), targets).item() == run.result.val_loss);
}

}  // namespace graph_picture_test
