// The three models of graph (docs/graphs.md), each one call of the one attention op per layer
// (ag::attention, core/ops.h) over the nodes as positions: B = 1, T = N, layout BTHD
// ([1, N, H, d_h], a projection X·W reshaped in place). The graph enters as MaskMods::edges (gat
// and transformer by default: A + I's edge list), MaskMods::adjacency (A + I, dense [N, N]:
// --attention-path dense) or not at all (the complete graph).
//   GatModel:          GAT (Veličković et al. 2018): two GatLayers, ELU between.
//   GraphTransformer:  pre-LN transformer blocks of dot-product heads, a learnable bias per
//                      head indexed by shortest-path distance (ScoreMods::indexed, Graphormer's
//                      spatial encoding, shared by the blocks) and a degree embedding added to
//                      the input (its centrality encoding); over A + I (its edge list, the
//                      bias read per edge, or the dense mask) or the complete graph (dense).
#pragma once
#include <memory>
#include <vector>

#include "core/autograd.h"
#include "core/ops.h"
#include "examples/graph/graph_options.h"
#include "nn/layers.h"
#include "nn/linear.h"
#include "nn/module.h"

namespace ag::graph {

// What the models read of the graph, as tensors.
struct GraphTensors {
  Tensor features;   // X [N, F], each row normalised to sum 1 (GAT's preprocessing)
  Tensor adjacency;  // A + I [N, N], float32: 1 where node i attends to node j
  EdgeList edges;    // A + I as a CSR edge list: node i's keys are itself and its neighbours, increasing
  Tensor distance;   // int64 [N, N]: min(shortest path, max_distance + 1), unreachable max_distance + 2
  Tensor edge_distance;  // int64 [E]: distance at each edge of `edges`, in their order (the bias's index there)
  Tensor degree;     // int64 [N]: min(degree, max_degree)
};

// Dropout rates and the generator they draw from (training only).
struct Dropouts {
  double input = 0, attention = 0;
  Generator* gen = nullptr;
};

// One GAT layer of H heads of width d_h: H = dropout(X)·W [N, H·d_h] (head h's W the column
// block h of W), q = H ∘ a₁, k = H ∘ a₂ per head, v = dropout(H), and
//   Z = attention(q, k, v) with S_ij = LeakyReLU_0.2(a₁ᵀWh_i + a₂ᵀWh_j) over the mask,
// plus a bias: [N, H·d_h], the heads side by side.
class GatLayer : public nn::Module {
 public:
  GatLayer(int64_t in, int64_t heads, int64_t width, Generator* gen);
  // The graph as `masks`: MaskMods::edges or MaskMods::adjacency (GatModel::masks).
  Tensor forward(const Tensor& x, const MaskMods& masks, const Dropouts& drop, AttentionInternals* internals = nullptr) const;

 private:
  int64_t heads_, width_;
  Tensor W_, a1_, a2_, bias_;  // W [in, H·d_h], a₁ and a₂ [H, d_h], bias [H·d_h]
};

class GatModel : public nn::Module {
 public:
  GatModel(int64_t features, int64_t heads, int64_t hidden, int64_t classes, Generator* gen,
           AttentionPath path = AttentionPath::Edges);
  Tensor forward(const GraphTensors& g, const Dropouts& drop) const;  // logits [N, C]
  // Both layers' attention A (for pictures), from an eval forward (no dropout): per edge of g.edges
  // on the edge path, hidden [1, H, E] and output [1, 1, E]; [1, H, N, N] and [1, 1, N, N] on the dense one.
  struct Attention {
    Tensor hidden, output;
  };
  Attention attention(const GraphTensors& g) const;
  Tensor output_attention(const GraphTensors& g) const { return attention(g).output; }

 private:
  MaskMods masks(const GraphTensors& g) const;  // g's A + I as the path reads it
  AttentionPath path_;
  std::shared_ptr<GatLayer> hidden_, output_;
};

class GraphTransformer : public nn::Module {
 public:
  struct Config {
    int64_t features, classes, heads, width, layers, max_distance, max_degree;
    bool complete;  // the complete graph (no mask, the dense path) instead of A + I
    AttentionPath path = AttentionPath::Edges;  // how A + I is read: its edge list or the dense mask
  };
  GraphTransformer(const Config& config, Generator* gen);
  Tensor forward(const GraphTensors& g, const Dropouts& drop) const;  // logits [N, C]

 private:
  Tensor block(int64_t layer, const Tensor& x, const GraphTensors& g, const Dropouts& drop) const;
  Config config_;
  std::shared_ptr<nn::Linear> input_, head_;
  Tensor degree_;         // [max_degree + 1, C]: Graphormer's centrality encoding z_deg
  Tensor distance_bias_;  // [H, max_distance + 3]: Graphormer's b_φ(i, j) per head
  std::vector<std::shared_ptr<nn::LayerNorm>> ln1_, ln2_;
  std::vector<std::shared_ptr<nn::Linear>> qkv_, proj_, fc_, fc_out_;
  std::shared_ptr<nn::LayerNorm> ln_final_;
};

}  // namespace ag::graph
