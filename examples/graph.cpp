// graph: node classification on a graph with three models that share the one attention op —
// GAT (additive scores over A + I), a graph transformer (dot-product heads over A + I with a
// shortest-path bias and degree embeddings) and the same transformer over the complete graph.
// docs/graphs.md derives GAT as masked attention and tables the three on Cora.
//
//   graph [--model gat|transformer|complete] [--data DIR] [--seeds N] [--seed S] ...   (see --help)
//
// The graph's format: examples/graph/graph_data.h. The runs: examples/graph/train.h (a
// library the tests drive too); this file only reads the options.
#include <cstdio>

#include "examples/common/command_line.h"
#include "examples/graph/train.h"

using namespace ag;

int main(int argc, char** argv) {
  cli::Program program("Node classification with graph attention: GAT, a graph transformer and the complete graph.",
                       "graph");
  graph::GraphConfig config;
  cli::ProcessOptions process;
  program.command().bind(config).bind(process);
  if (const int code = program.parse_and_apply(argc, argv, process); code >= 0) return code;
  try {
    graph::run_graph(config);
    return 0;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "graph: %s\n", e.what());
    return 1;
  }
}
