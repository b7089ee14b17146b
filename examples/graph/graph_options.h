// graph's options, one line each (core/options.h explains the columns). The defaults are
// GAT's recipe for Cora (Veličković et al. 2018): 8 heads of 8, dropout 0.6 on each layer's
// input and on the attention coefficients, L2 5e-4, Adam at lr 0.005, early stopping on the
// validation loss with patience 100.
#pragma once
#include <string>

#include "core/options.h"

namespace ag {
namespace graph {
enum class GraphModel {
  Gat,          // GAT: additive scores, the A + I mask
  Transformer,  // dot-product heads over the A + I mask, a shortest-path bias per head, degree embeddings
  Complete,     // the same transformer over the complete graph (an all-ones mask)
};
// How gat's and transformer's attention sees the graph: as its edge list (MaskMods::edges, O(E·d)
// per head; the transformer's shortest-path bias read per edge) or as the dense mask A + I
// (MaskMods::adjacency through the dense implementation, O(N²)). Both compute the same function
// (tests/test_graph.cpp); the dense one is kept to show it. complete has no mask: always dense.
enum class AttentionPath { Edges, Dense };
}  // namespace graph
template <> struct EnumNames<graph::AttentionPath> {
  static constexpr std::pair<graph::AttentionPath, const char*> values[] = {{graph::AttentionPath::Edges, "edges"},
                                                                            {graph::AttentionPath::Dense, "dense"}};
};
template <> struct EnumNames<graph::GraphModel> {
  static constexpr std::pair<graph::GraphModel, const char*> values[] = {{graph::GraphModel::Gat, "gat"},
                                                                         {graph::GraphModel::Transformer, "transformer"},
                                                                         {graph::GraphModel::Complete, "complete"}};
};
}  // namespace ag

//  kind     type                    name          default                    min  max                help
#define AG_GRAPH_OPTIONS(X) \
  X(Model,   ::ag::graph::GraphModel, model,       ::ag::graph::GraphModel::Gat, 0, 0,               "gat (additive scores over A + I), transformer (dot-product heads over A + I, a shortest-path bias per head, degree embeddings) or complete (that transformer over the complete graph)") \
  X(Setting, std::string,            data,         "",                        0,   0,                "the graph's directory, nodes.tsv and edges.tsv (default: $ATTOGRAD_GRAPH_DATA, then data/cora, then ../shared/data/cora)") \
  X(Model,   ::ag::graph::AttentionPath, attention_path, ::ag::graph::AttentionPath::Edges, 0, 0,  "gat, transformer: edges (attention over A + I's edge list, O(E) per head) or dense (over the dense mask A + I, O(N²)): the same function (complete: always dense)") \
  X(Model,   int64_t,                classes,      7,                         1,   1 << 20,          "classes C: a label outside [0, C) is an error (Cora: 7)") \
  X(Model,   int64_t,                heads,        8,                         1,   256,              "attention heads of the hidden layers (gat's output layer has one)") \
  X(Model,   int64_t,                hidden,       8,                         1,   4096,             "width d_h of each head") \
  X(Model,   int64_t,                layers,       2,                         1,   64,               "transformer, complete: blocks (gat: always two layers)") \
  X(Model,   int64_t,                max_distance, 5,                         1,   1 << 20,          "transformer, complete: shortest-path distances beyond it share one bias entry, unreachable pairs another") \
  X(Model,   int64_t,                max_degree,   32,                        1,   1 << 20,          "transformer, complete: degrees beyond it share one embedding") \
  X(Run,     double,                 dropout,      0.6,                       0,   0.99,             "dropout on each layer's input (gat: and on the values)") \
  X(Run,     double,                 attn_dropout, 0.6,                       0,   0.99,             "dropout on the attention coefficients A") \
  X(Run,     double,                 lr,           0.005,                     0,   kNoLimit,         "Adam's learning rate") \
  X(Run,     double,                 weight_decay, 5e-4,                      0,   kNoLimit,         "L2 penalty on every parameter (Adam's, through the gradient)") \
  X(Run,     int64_t,                patience,     100,                       1,   int64_t{1} << 40, "stop after this many epochs without a lower validation loss; test accuracy is the best epoch's") \
  X(Run,     int64_t,                max_epochs,   100000,                    1,   int64_t{1} << 40, "stop after this many epochs in any case") \
  X(Run,     int64_t,                seed,         0,                         0,   int64_t{1} << 40, "the first run's seed (initialisation and dropout)") \
  X(Local,   int64_t,                seeds,        1,                         1,   10000,            "runs, with seeds seed … seed + N − 1: prints each run and the mean ± sd test accuracy") \
  X(Local,   std::string,            out,          "",                        0,   0,                "also write each run's result to this CSV (only after every run finished)") \
  X(Local,   bool,                   quiet,        false,                     0,   0,                "print the summary only") \
  X(Local,   int64_t,                draw_node,    -1,                        -1,  int64_t{1} << 40, "gat: draw this node's attention over its neighbourhood as an SVG (-1: none), from the first run (seed --seed) with the parameters of its lowest validation loss, the epoch whose test accuracy is reported") \
  X(Local,   int64_t,                draw_hops,    1,                         1,   2,                "--draw-node: 2 also draws the nodes two steps away (grey, unweighted)") \
  X(Local,   std::string,            svg,          "",                        0,   0,                "--draw-node's picture file (default: node_ID.svg), written only after every run finished")

namespace ag::graph {
struct GraphConfig {
  AG_DECLARE_OPTIONS(AG_GRAPH_OPTIONS)
};
}  // namespace ag::graph
