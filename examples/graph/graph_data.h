// A node-classification graph as text (the format of ../shared/data/cora/, README.md there):
//   nodes.tsv  one line per node: `node  label  split  features`, tab-separated; node ids 0 … N − 1
//              in order; label 0 … C − 1; split train, val, test or unlabeled; features the indices
//              of the binary features that are 1, separated by spaces (none: empty)
//   edges.tsv  one undirected edge per line: `u  v`, both existing nodes, u ≠ v
// Lines starting with '#' are comments (the headers). A bad line is an error naming the file
// and the line, before anything is computed or written.
#pragma once
#include <array>
#include <cstdint>
#include <string>
#include <vector>

namespace ag::graph {

enum class Split { Train, Val, Test, Unlabeled };

struct GraphData {
  std::string dir;
  int64_t nodes = 0, features = 0, classes = 0;  // N, F (1 + the largest index), C (1 + the largest label)
  std::vector<int64_t> labels;                    // [N]
  std::vector<Split> split;                       // [N]
  std::vector<std::vector<int64_t>> active;       // per node, its features that are 1
  std::vector<std::array<int64_t, 2>> edges;      // undirected, each once as read

  std::vector<int64_t> nodes_in(Split s) const;
  // The neighbours of each node (both directions, duplicates removed, sorted), without itself.
  std::vector<std::vector<int64_t>> neighbours() const;
};

// The graph directory: `flag` if given, else $ATTOGRAD_GRAPH_DATA, else the first of
// data/cora and ../shared/data/cora (relative to `root`) that holds nodes.tsv.
std::string resolve_graph_dir(const std::string& flag, const std::string& root = ".");

// Reads nodes.tsv and edges.tsv of `dir`. `max_classes` and `max_features`, when > 0, bound the
// labels and feature indices (a label out of range is an error naming its line).
GraphData load_graph(const std::string& dir, int64_t max_classes = 0, int64_t max_features = 0);

}  // namespace ag::graph
