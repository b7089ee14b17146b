#include "examples/graph/graph_data.h"

#include <algorithm>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <sstream>

#include "core/error.h"

namespace ag::graph {

namespace {

// A whole non-negative integer, or an error naming where it was read.
int64_t parse_index(const std::string& text, const std::string& where, const char* what) {
  AG_CHECK(!text.empty() && text.size() < 19 && std::all_of(text.begin(), text.end(), [](char c) { return c >= '0' && c <= '9'; }),
           where << ": " << what << " '" << text << "' is not a non-negative integer");
  return std::stoll(text);
}

std::vector<std::string> split_on(const std::string& line, char separator) {
  std::vector<std::string> parts;
  std::string part;
  std::istringstream in(line);
  while (std::getline(in, part, separator)) parts.push_back(part);
  if (!line.empty() && line.back() == separator) parts.push_back("");
  return parts;
}

// Calls body(line, where) for each line of `path` that is not a comment or empty.
template <class Body> void for_each_line(const std::string& path, Body&& body) {
  AG_CHECK(std::filesystem::is_regular_file(path),
           "graph: '" << path << "' does not exist (pass --data DIR, set ATTOGRAD_GRAPH_DATA, or put the graph in data/cora)");
  std::ifstream in(path);
  AG_CHECK(in, "graph: cannot open '" << path << "'");
  std::string line;
  for (int64_t number = 1; std::getline(in, line); ++number) {
    if (!line.empty() && line.back() == '\r') line.pop_back();
    if (line.empty() || line[0] == '#') continue;
    body(line, path + ":" + std::to_string(number));
  }
}

Split parse_split(const std::string& text, const std::string& where) {
  if (text == "train") return Split::Train;
  if (text == "val") return Split::Val;
  if (text == "test") return Split::Test;
  if (text == "unlabeled") return Split::Unlabeled;
  throw Error(where + ": split '" + text + "' is not train, val, test or unlabeled");
}

void read_nodes(const std::string& path, int64_t max_classes, int64_t max_features, GraphData& g) {
  for_each_line(path, [&](const std::string& line, const std::string& where) {
    const std::vector<std::string> cols = split_on(line, '\t');
    AG_CHECK(cols.size() == 4, where << ": expected 4 tab-separated columns (node, label, split, features), found "
                                     << cols.size());
    const int64_t node = parse_index(cols[0], where, "node");
    AG_CHECK(node == g.nodes, where << ": node " << node << " out of order (expected " << g.nodes << ")");
    const int64_t label = parse_index(cols[1], where, "label");
    AG_CHECK(max_classes <= 0 || label < max_classes,
             where << ": label " << label << " is out of range [0, " << max_classes << ")");
    std::vector<int64_t> active;
    for (const std::string& f : split_on(cols[3], ' ')) {
      if (f.empty()) continue;
      const int64_t index = parse_index(f, where, "feature index");
      AG_CHECK(max_features <= 0 || index < max_features,
               where << ": feature index " << index << " is out of range [0, " << max_features << ")");
      active.push_back(index);
      g.features = std::max(g.features, index + 1);
    }
    g.labels.push_back(label);
    g.split.push_back(parse_split(cols[2], where));
    g.active.push_back(std::move(active));
    g.classes = std::max(g.classes, label + 1);
    ++g.nodes;
  });
  AG_CHECK(g.nodes > 0, "graph: '" << path << "' has no nodes");
  if (max_features > 0) g.features = max_features;
  if (max_classes > 0) g.classes = max_classes;
}

void read_edges(const std::string& path, GraphData& g) {
  for_each_line(path, [&](const std::string& line, const std::string& where) {
    const std::vector<std::string> cols = split_on(line, '\t');
    AG_CHECK(cols.size() == 2, where << ": expected 2 tab-separated columns (u, v), found " << cols.size());
    const int64_t u = parse_index(cols[0], where, "node"), v = parse_index(cols[1], where, "node");
    for (const int64_t n : {u, v})
      AG_CHECK(n < g.nodes, where << ": node " << n << " does not exist (the nodes are 0 … " << g.nodes - 1 << ")");
    AG_CHECK(u != v, where << ": a self-loop " << u << " – " << v << " (the models add every node's own)");
    g.edges.push_back({u, v});
  });
}

}  // namespace

std::vector<int64_t> GraphData::nodes_in(Split s) const {
  std::vector<int64_t> out;
  for (int64_t n = 0; n < nodes; ++n)
    if (split[n] == s) out.push_back(n);
  return out;
}

std::vector<std::vector<int64_t>> GraphData::neighbours() const {
  std::vector<std::vector<int64_t>> out(nodes);
  for (const auto& e : edges) {
    out[e[0]].push_back(e[1]);
    out[e[1]].push_back(e[0]);
  }
  for (auto& list : out) {
    std::sort(list.begin(), list.end());
    list.erase(std::unique(list.begin(), list.end()), list.end());
  }
  return out;
}

std::string resolve_graph_dir(const std::string& flag, const std::string& root) {
  if (!flag.empty()) return flag;
  if (const char* env = std::getenv("ATTOGRAD_GRAPH_DATA"); env && *env) return env;
  const std::filesystem::path base(root);
  const std::filesystem::path candidates[] = {base / "data/cora", base / "../shared/data/cora"};
  for (const std::filesystem::path& candidate : candidates)
    if (std::filesystem::is_regular_file(candidate / "nodes.tsv")) return candidate.lexically_normal().string();
  return candidates[0].lexically_normal().string();
}

GraphData load_graph(const std::string& dir, int64_t max_classes, int64_t max_features) {
  GraphData g;
  g.dir = dir;
  AG_CHECK(std::filesystem::is_directory(dir),
           "graph: '" << dir << "' is not a directory (pass --data DIR holding nodes.tsv and edges.tsv, or set ATTOGRAD_GRAPH_DATA)");
  read_nodes((std::filesystem::path(dir) / "nodes.tsv").string(), max_classes, max_features, g);
  read_edges((std::filesystem::path(dir) / "edges.tsv").string(), g);
  return g;
}

}  // namespace ag::graph
