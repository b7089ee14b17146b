// One node's attention over its neighbourhood, drawn (graph --draw-node; docs/graphs.md,
// "Looking inside"). Node i sits in the centre and its neighbours j on a circle around it; the
// edge between them is drawn with width and colour by A_ij, the weight node i's softmax row
// gives node j (Z_i = Σ_j A_ij V_j, j over A + I's row i), and the self-loop A_ii as a loop
// over node i. Nodes are filled by their true class; the centre's true and predicted classes
// are named. The first layer of the view (GAT's output layer, one head) is drawn large, with
// the weights written beside the edges when there are at most kMostNumbered neighbours; each
// further layer (GAT's hidden one, 8 heads) is a row of small panels, one per head, on the
// same colour scale. Under them, node i's row of A as a small matrix: a row per head, a column
// per key j. Optionally the nodes two steps away are drawn too, grey: node i does not attend
// to them in one layer. Built from examples/interp/svg.h's pieces (its colour ramp
// and text), as char_lm's attention maps are.
#pragma once
#include <cstdint>
#include <string>
#include <vector>

#include "examples/graph/graph_data.h"
#include "examples/graph/models.h"

namespace ag::graph {

// The most neighbours whose weights are written as numbers (more would overlap).
inline constexpr int64_t kMostNumbered = 12;

// One layer's attention per edge: heads[h][e] is head h's A_ij for the e-th edge (i, j = col[e])
// of A + I's CSR.
struct LayerAttention {
  std::string name;                        // "output layer"
  std::vector<std::vector<double>> heads;  // [H][E]
};

// What the picture shows, as plain numbers (no model): the tests draw made-up ones too.
struct NodeView {
  int64_t node = 0;
  int64_t hops = 1;                          // 1 or 2: also the nodes two steps away (grey, no weights)
  std::vector<int64_t> row_ptr, col;         // A + I as CSR, [N + 1] and [E]: row i holds i and its neighbours
  std::vector<int64_t> labels, predictions;  // [N]: the true class and the model's argmax
  int64_t classes = 0;                       // C: labels and predictions in [0, C)
  std::string split;                         // the centre's split: "train", "val", "test" or "unlabeled"
  std::vector<LayerAttention> layers;        // at least one: the first drawn large, the others as small panels
  std::string title;                         // what was drawn: the model, its data, seed and epoch
};

// Throws ag::Error naming `node` and N unless 0 ≤ node < N.
void check_node(int64_t node, int64_t N);

// The picture, one self-contained <svg> element. Each edge of the large panels is an element of
// class "edge" (the self-loop: "edge self") with data-from = j, data-to = i and data-weight =
// A_ij, each drawn node a group of class "node" with data-node = its id. Throws ag::Error for a
// node out of range (check_node) and for sizes that disagree, before drawing anything.
std::string node_attention_svg(const NodeView& view);

// The attention op's probabilities A as [H][E] per edge of `edges`: [1, H, E] (the edge path)
// as it is, [1, H, N, N] (the dense path) read at A + I's entries.
std::vector<std::vector<double>> per_edge(const Tensor& A, const EdgeList& edges);

// The view of a GAT model (an eval forward, no dropout) at `node`: both layers' attention,
// the output layer first, and each node's predicted class.
NodeView gat_node_view(const GatModel& model, const GraphData& data, const GraphTensors& g, int64_t node,
                       int64_t hops, const std::string& title);

}  // namespace ag::graph
