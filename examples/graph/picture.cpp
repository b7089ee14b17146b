#include "examples/graph/picture.h"

#include <algorithm>
#include <cmath>
#include <numbers>
#include <set>

#include "core/error.h"
#include "examples/interp/pictures.h"  // kPalette: the classes' colours
#include "examples/interp/svg.h"

namespace ag::graph {

using interp::short_number;
using interp::text_element;
using interp::text_width;

namespace {

using Weights = std::vector<double>;  // one head's A per edge of A + I, [E]

std::string num(double v) { return interp::svg_number(v); }

constexpr double kPi = std::numbers::pi;
constexpr int64_t kMostSecond = 150;  // nodes two steps away drawn at most (a hub's would be a grey ring)
constexpr int64_t kMostLabelled = 40;  // the most neighbours whose ids are written beside them
constexpr double kWidth = 760, kGap = 16, kLarge = 520, kSmall = 170;

// Where the nodes go: node i in the centre, its neighbours on a circle in A + I's column order,
// clockwise from the top, half a step off it (the top is the self-loop's); the nodes two steps
// away on an outer circle in the order of the neighbour that reaches them first.
struct Placed {
  int64_t node;
  double angle;
  int64_t link;  // a neighbour: its edge e in the CSR (i, j = col[e]); two steps away: the index of its neighbour in `first`
};
struct Layout {
  int64_t self_edge = -1;
  std::vector<Placed> first, second;
  int64_t undrawn = 0;  // nodes two steps away beyond kMostSecond
};

double angle_of(size_t k, size_t n) { return -kPi / 2 + (static_cast<double>(k) + 0.5) * 2 * kPi / static_cast<double>(n); }

Layout layout_of(const NodeView& v) {
  Layout l;
  const int64_t i = v.node;
  for (int64_t e = v.row_ptr[i]; e < v.row_ptr[i + 1]; ++e) {
    if (v.col[e] == i) l.self_edge = e;
    else l.first.push_back({v.col[e], 0, e});
  }
  for (size_t k = 0; k < l.first.size(); ++k) l.first[k].angle = angle_of(k, l.first.size());
  if (v.hops < 2) return l;
  std::set<int64_t> seen{i};
  for (const Placed& p : l.first) seen.insert(p.node);
  for (size_t k = 0; k < l.first.size(); ++k) {
    const int64_t j = l.first[k].node;
    for (int64_t e = v.row_ptr[j]; e < v.row_ptr[j + 1]; ++e) {
      if (!seen.insert(v.col[e]).second) continue;
      if (static_cast<int64_t>(l.second.size()) < kMostSecond) l.second.push_back({v.col[e], 0, static_cast<int64_t>(k)});
      else ++l.undrawn;
    }
  }
  for (size_t m = 0; m < l.second.size(); ++m) l.second[m].angle = angle_of(m, l.second.size());
  return l;
}

// One panel's place and size: the centre, the neighbours' circle's radius, and whether it is a
// large one (weights as data and numbers, ids, the nodes two steps away) or a small multiple.
struct Panel {
  double cx, cy, radius;
  bool large;
  double at_x(double r, double angle) const { return cx + r * std::cos(angle); }
  double at_y(double r, double angle) const { return cy + r * std::sin(angle); }
};

std::string class_colour(int64_t c) { return interp::kPalette[static_cast<size_t>(c) % interp::kPalette.size()]; }

std::string line(double x1, double y1, double x2, double y2, const std::string& attributes) {
  return "<line x1=\"" + num(x1) + "\" y1=\"" + num(y1) + "\" x2=\"" + num(x2) + "\" y2=\"" + num(y2) + "\" " +
         attributes + "/>\n";
}

// A node: a circle filled by its class, with its id, classes and weight as a tooltip.
std::string node_svg(const NodeView& v, int64_t id, double x, double y, double r, const std::string& fill,
                     const std::string& about) {
  return "<g class=\"node\" data-node=\"" + std::to_string(id) + "\"><title>node " + std::to_string(id) + ": class " +
         std::to_string(v.labels[id]) + ", predicted " + std::to_string(v.predictions[id]) + about +
         "</title><circle cx=\"" + num(x) + "\" cy=\"" + num(y) + "\" r=\"" + num(r) + "\" fill=\"" + fill +
         "\" stroke=\"#333\" stroke-width=\"" + (id == v.node ? "2.5" : "1") + "\"/></g>\n";
}

// The weight's stroke: dark and wide for a large A_ij, pale and thin for a small one.
std::string stroke_of(double w, double full_scale, const Panel& p) {
  const double width = (p.large ? 1.5 : 0.8) + (p.large ? 10 : 4) * w / full_scale;
  return "stroke=\"" + interp::weight_colour(w / full_scale) + "\" stroke-width=\"" + num(width) + "\"";
}

std::string edge_data(const NodeView& v, int64_t j, double w) {
  return "data-from=\"" + std::to_string(j) + "\" data-to=\"" + std::to_string(v.node) + "\" data-weight=\"" + num(w) + "\"";
}

// The nodes two steps away and their links to the neighbours: grey, unweighted.
std::string second_svg(const NodeView& v, const Layout& l, const Panel& p) {
  std::string svg;
  const double outer = 1.4 * p.radius;
  const double r = std::clamp(0.4 * 2 * kPi * outer / static_cast<double>(std::max<size_t>(1, l.second.size())), 2.0, 6.0);
  for (const Placed& s : l.second) {
    const Placed& via = l.first[s.link];
    svg += line(p.at_x(p.radius, via.angle), p.at_y(p.radius, via.angle), p.at_x(outer, s.angle), p.at_y(outer, s.angle),
                "stroke=\"#dddddd\" stroke-width=\"0.8\"");
  }
  for (const Placed& s : l.second)
    svg += node_svg(v, s.node, p.at_x(outer, s.angle), p.at_y(outer, s.angle), r, "#bbbbbb", ", two steps away");
  return svg;
}

// A weight written beside its edge, a little off the line, on a white halo.
std::string weight_label(double x, double y, double w) {
  return text_element(x, y, short_number(w),
                      "class=\"weight\" text-anchor=\"middle\" paint-order=\"stroke\" stroke=\"white\" stroke-width=\"3\"");
}

// One head's panel: the edges i ← j (the lightest first, so the heaviest lie on top), the
// self-loop, the nodes, and on a large panel the ids and, for few neighbours, the weights.
std::string panel_svg(const NodeView& v, const Layout& l, const Weights& A, const Panel& p, double full_scale) {
  std::string svg = p.large ? second_svg(v, l, p) : "";
  std::vector<size_t> order(l.first.size());
  for (size_t k = 0; k < order.size(); ++k) order[k] = k;
  std::stable_sort(order.begin(), order.end(), [&](size_t a, size_t b) { return A[l.first[a].link] < A[l.first[b].link]; });
  for (const size_t k : order) {  // a grey line under each, so that a weight near 0 still shows its edge
    const Placed& n = l.first[k];
    svg += line(p.cx, p.cy, p.at_x(p.radius, n.angle), p.at_y(p.radius, n.angle), "stroke=\"#d8d8d8\" stroke-width=\"1\"");
  }
  for (const size_t k : order) {
    const Placed& n = l.first[k];
    const double w = A[n.link];
    svg += line(p.cx, p.cy, p.at_x(p.radius, n.angle), p.at_y(p.radius, n.angle),
                (p.large ? "class=\"edge\" " + edge_data(v, n.node, w) + " " : "") + stroke_of(w, full_scale, p) +
                    " stroke-linecap=\"round\"");
  }
  const double centre_r = p.large ? 18 : 7, loop_r = p.large ? 13 : 6;
  if (l.self_edge >= 0) {  // A_ii: the loop above node i
    const double w = A[l.self_edge];
    svg += "<circle " + std::string(p.large ? "class=\"edge self\" " + edge_data(v, v.node, w) + " " : "") +
           stroke_of(w, full_scale, p) + " cx=\"" + num(p.cx) + "\" cy=\"" + num(p.cy - centre_r - loop_r + 3) + "\" r=\"" +
           num(loop_r) + "\" fill=\"none\"/>\n";
    if (p.large) svg += weight_label(p.cx + loop_r + 22, p.cy - centre_r - loop_r, w);
  }
  const double n1 = static_cast<double>(std::max<size_t>(1, l.first.size()));
  const double r = std::clamp(0.4 * 2 * kPi * p.radius / n1, p.large ? 3.0 : 2.0, p.large ? 13.0 : 6.0);
  for (const Placed& n : l.first) {
    const double x = p.at_x(p.radius, n.angle), y = p.at_y(p.radius, n.angle);
    svg += node_svg(v, n.node, x, y, r, class_colour(v.labels[n.node]), ", A_ij = " + short_number(A[n.link]));
    if (!p.large) continue;
    const double out = p.radius + r + 14;
    if (static_cast<int64_t>(l.first.size()) <= kMostLabelled)
      svg += text_element(p.at_x(out, n.angle), p.at_y(out, n.angle) + 4, std::to_string(n.node),
                          "class=\"node-id\" text-anchor=\"middle\"");
    if (static_cast<int64_t>(l.first.size()) <= kMostNumbered)  // at 0.55 of the way out, 10 px to the edge's side
      svg += weight_label(p.at_x(0.55 * p.radius, n.angle) - 10 * std::sin(n.angle),
                          p.at_y(0.55 * p.radius, n.angle) + 10 * std::cos(n.angle) + 4, A[n.link]);
  }
  svg += node_svg(v, v.node, p.cx, p.cy, centre_r, class_colour(v.labels[v.node]), ", the node drawn");
  if (p.large)
    svg += text_element(p.cx, p.cy + 4, std::to_string(v.node),
                        "class=\"node-id\" text-anchor=\"middle\" paint-order=\"stroke\" stroke=\"white\" stroke-width=\"3\"");
  return svg;
}

void check_view(const NodeView& v) {
  AG_CHECK(!v.row_ptr.empty(), "node picture: A + I has no rows");
  const int64_t N = static_cast<int64_t>(v.row_ptr.size()) - 1, E = static_cast<int64_t>(v.col.size());
  check_node(v.node, N);
  AG_CHECK(v.row_ptr[0] == 0 && v.row_ptr[N] == E, "node picture: row_ptr runs from " << v.row_ptr[0] << " to "
                                                                                       << v.row_ptr[N] << " over " << E << " edges");
  AG_CHECK(static_cast<int64_t>(v.labels.size()) == N && static_cast<int64_t>(v.predictions.size()) == N,
           "node picture: " << v.labels.size() << " labels and " << v.predictions.size() << " predictions for N = " << N);
  for (int64_t n = 0; n < N; ++n) {
    AG_CHECK(v.row_ptr[n] <= v.row_ptr[n + 1], "node picture: row_ptr decreases at row " << n);
    AG_CHECK(v.labels[n] >= 0 && v.labels[n] < v.classes && v.predictions[n] >= 0 && v.predictions[n] < v.classes,
             "node picture: node " << n << "'s class " << v.labels[n] << " or prediction " << v.predictions[n]
                                   << " is outside [0, " << v.classes << ")");
  }
  for (const int64_t j : v.col) AG_CHECK(j >= 0 && j < N, "node picture: an edge to node " << j << " of N = " << N);
  AG_CHECK(v.hops == 1 || v.hops == 2, "node picture: hops is 1 or 2, not " << v.hops);
  AG_CHECK(!v.layers.empty(), "node picture: no layer's attention to draw");
  for (const LayerAttention& layer : v.layers) {
    AG_CHECK(!layer.heads.empty(), "node picture: the " << layer.name << " has no heads");
    for (const Weights& A : layer.heads)
      AG_CHECK(static_cast<int64_t>(A.size()) == E,
               "node picture: the " << layer.name << " has " << A.size() << " weights for E = " << E << " edges");
  }
}

// The heaviest weight of node i's row over every drawn head, rounded up: the colour scale's full end.
double full_scale_of(const NodeView& v) {
  double most = 0;
  for (const LayerAttention& layer : v.layers)
    for (const Weights& A : layer.heads)
      for (int64_t e = v.row_ptr[v.node]; e < v.row_ptr[v.node + 1]; ++e) most = std::max(most, A[e]);
  return most > 0 ? std::ceil(10 * most) / 10 : 1.0;  // up to a tenth: the scale's numbers stay round
}

// The title, the node's classes, what the edges mean, the colour scale and the classes' colours.
std::string header_svg(const NodeView& v, const Layout& l, double full_scale, double& y) {
  const int64_t i = v.node, neighbours = static_cast<int64_t>(l.first.size());
  std::string svg = text_element(kGap, 20, v.title, "font-size=\"14\"");
  svg += text_element(kGap, 40, "node " + std::to_string(i) + " (" + v.split + "): class " + std::to_string(v.labels[i]) +
                                    ", predicted class " + std::to_string(v.predictions[i]) +
                                    (v.labels[i] == v.predictions[i] ? " (right)" : " (wrong)"));
  svg += text_element(kGap, 56, "edges: A_ij, node i's softmax weights over itself (the loop) and its " +
                                    std::to_string(neighbours) + " neighbours j (A + I; the row sums to 1)");
  svg += text_element(kGap, 70, "as width and colour; nodes filled by their true class" +
                                    std::string(v.hops == 2 ? "; grey: two steps away, not attended to in one layer" : ""));
  y = 84;
  svg += "<g class=\"colour-scale\">\n" + interp::colour_scale_svg(kGap, y, 200, full_scale, "node-ramp") + "</g>\n";
  double x = kGap + 240;
  for (int64_t c = 0; c < v.classes; ++c) {
    const std::string name = "class " + std::to_string(c);
    if (x + 18 + text_width(name, interp::kMinFontSize) > kWidth - kGap) x = kGap + 240, y += 16;
    svg += "<circle cx=\"" + num(x + 5) + "\" cy=\"" + num(y + 5) + "\" r=\"5\" fill=\"" + class_colour(c) + "\"/>\n";
    svg += text_element(x + 14, y + 9, name);
    x += 26 + text_width(name, interp::kMinFontSize);
  }
  y += 40;
  if (l.undrawn > 0) {
    svg += text_element(kGap, y, "(" + std::to_string(l.undrawn) + " more nodes two steps away not drawn)");
    y += 16;
  }
  return svg;
}

std::string head_title(const LayerAttention& layer, size_t h) {
  return layer.name + ", head " + std::to_string(h + 1) + " of " + std::to_string(layer.heads.size());
}

// Node i's row of A as a matrix: one row per drawn head (every layer's), one column per key j
// (itself first, then the neighbours as the panels place them), each cell coloured by A_ij on
// the panels' scale, with its number when there are at most kMostNumbered neighbours.
std::string strip_svg(const NodeView& v, const Layout& l, double full_scale, double& y) {
  std::vector<int64_t> keys, edges;  // the columns: j and its edge e
  if (l.self_edge >= 0) keys.push_back(v.node), edges.push_back(l.self_edge);
  for (const Placed& n : l.first) keys.push_back(n.node), edges.push_back(n.link);
  const bool numbered = static_cast<int64_t>(l.first.size()) <= kMostNumbered;
  const double label = 130, cell_h = 18;
  const double cell_w = std::min(56.0, (kWidth - 2 * kGap - label) / static_cast<double>(keys.size()));
  std::string svg = "<g class=\"strip\">\n" + text_element(kGap, y + 12, "node " + std::to_string(v.node) +
                                                                              "'s row of A, every head (columns: the keys j)",
                                                            "font-size=\"12\"");
  y += 22;
  if (static_cast<int64_t>(l.first.size()) <= kMostLabelled)
    for (size_t k = 0; k < keys.size(); ++k)
      svg += text_element(kGap + label + (static_cast<double>(k) + 0.5) * cell_w, y + 10, std::to_string(keys[k]),
                          "text-anchor=\"middle\"" + std::string(numbered ? "" : " font-size=\"9\""));
  y += 14;
  for (const LayerAttention& layer : v.layers)
    for (size_t h = 0; h < layer.heads.size(); ++h) {
      svg += text_element(kGap, y + 13, head_title(layer, h));
      for (size_t k = 0; k < keys.size(); ++k) {
        const double w = layer.heads[h][edges[k]], x = kGap + label + static_cast<double>(k) * cell_w;
        svg += "<rect class=\"strip-cell\" x=\"" + num(x) + "\" y=\"" + num(y) + "\" width=\"" + num(cell_w) + "\" height=\"" +
               num(cell_h) + "\" fill=\"" + interp::weight_colour(w / full_scale) + "\" stroke=\"white\"/>\n";
        if (numbered)
          svg += text_element(x + cell_w / 2, y + 13, short_number(w),
                              "text-anchor=\"middle\" fill=\"" + std::string(w / full_scale > 0.55 ? "white" : "black") + "\"");
      }
      y += cell_h;
    }
  y += kGap;
  return svg + "</g>\n";
}

}  // namespace

void check_node(int64_t node, int64_t N) {
  AG_CHECK(node >= 0 && node < N, "node " << node << " is not in the graph: it has N = " << N << " nodes, ids 0 … " << N - 1);
}

std::string node_attention_svg(const NodeView& v) {
  check_view(v);
  const Layout l = layout_of(v);
  const double full_scale = full_scale_of(v);
  double y = 0;
  std::string body = header_svg(v, l, full_scale, y);
  const LayerAttention& first = v.layers[0];
  for (size_t h = 0; h < first.heads.size(); ++h) {  // the first layer's heads, large, one under another
    body += "<g class=\"panel\">\n" + text_element(kGap, y + 12, head_title(first, h), "font-size=\"12\"");
    const double radius = v.hops == 2 ? 160 : 190;
    body += panel_svg(v, l, first.heads[h], {.cx = kWidth / 2, .cy = y + 20 + kLarge / 2, .radius = radius, .large = true},
                      full_scale);
    body += "</g>\n";
    y += 20 + kLarge + kGap;
  }
  const int64_t columns = static_cast<int64_t>((kWidth - kGap) / (kSmall + kGap));
  for (size_t k = 1; k < v.layers.size(); ++k) {  // the others, small, `columns` to a row
    const LayerAttention& layer = v.layers[k];
    body += text_element(kGap, y + 12, layer.name + ": " + std::to_string(layer.heads.size()) + " heads, the same colour scale",
                         "font-size=\"12\"");
    y += 20;
    for (size_t h = 0; h < layer.heads.size(); ++h) {
      const double left = kGap + static_cast<double>(static_cast<int64_t>(h) % columns) * (kSmall + kGap);
      const double top = y + static_cast<double>(static_cast<int64_t>(h) / columns) * (kSmall + kGap);
      body += "<g class=\"small-panel\">\n" + text_element(left, top + 12, "head " + std::to_string(h + 1));
      body += panel_svg(v, l, layer.heads[h],
                        {.cx = left + kSmall / 2, .cy = top + 16 + (kSmall - 16) / 2, .radius = 58, .large = false}, full_scale);
      body += "</g>\n";
    }
    y += static_cast<double>((static_cast<int64_t>(layer.heads.size()) + columns - 1) / columns) * (kSmall + kGap);
  }
  body += strip_svg(v, l, full_scale, y);
  const double height = y;
  return "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"" + num(kWidth) + "\" height=\"" + num(height) +
         "\" viewBox=\"0 0 " + num(kWidth) + " " + num(height) + "\" font-family=\"sans-serif\" font-size=\"" +
         num(interp::kMinFontSize) + "\">\n<rect width=\"" + num(kWidth) + "\" height=\"" + num(height) +
         "\" fill=\"white\"/>\n" + body + "</svg>\n";
}

std::vector<std::vector<double>> per_edge(const Tensor& A, const EdgeList& edges) {
  const std::vector<int64_t> row_ptr = edges.row_ptr.to_indices(), col = edges.col.to_indices();
  const int64_t N = static_cast<int64_t>(row_ptr.size()) - 1, E = static_cast<int64_t>(col.size());
  const bool dense = A.dim() == 4;
  AG_CHECK((A.dim() == 3 && A.size(2) == E) || (dense && A.size(2) == N && A.size(3) == N),
           "per_edge: A " << to_string(A.shape()) << " is neither [1, H, E = " << E << "] nor [1, H, N, N] with N = " << N);
  const int64_t H = A.size(1);
  const std::vector<double> a = A.to_vector();
  std::vector<std::vector<double>> heads(static_cast<size_t>(H), std::vector<double>(static_cast<size_t>(E)));
  for (int64_t h = 0; h < H; ++h)
    for (int64_t i = 0; i < N; ++i)
      for (int64_t e = row_ptr[i]; e < row_ptr[i + 1]; ++e) heads[h][e] = dense ? a[(h * N + i) * N + col[e]] : a[h * E + e];
  return heads;
}

NodeView gat_node_view(const GatModel& model, const GraphData& data, const GraphTensors& g, int64_t node, int64_t hops,
                       const std::string& title) {
  check_node(node, data.nodes);
  const NoGradGuard no_grad;
  const Tensor logits = model.forward(g, {});  // [N, C]
  const int64_t N = logits.size(0), C = logits.size(1);
  const std::vector<double> z = logits.to_vector();
  std::vector<int64_t> predictions(static_cast<size_t>(N));
  for (int64_t n = 0; n < N; ++n) predictions[n] = std::max_element(z.begin() + n * C, z.begin() + (n + 1) * C) - (z.begin() + n * C);
  const GatModel::Attention A = model.attention(g);
  static constexpr const char* kSplits[] = {"train", "val", "test", "unlabeled"};
  return {.node = node, .hops = hops, .row_ptr = g.edges.row_ptr.to_indices(), .col = g.edges.col.to_indices(),
          .labels = data.labels, .predictions = predictions, .classes = C,
          .split = kSplits[static_cast<int>(data.split[node])],
          .layers = {{"output layer", per_edge(A.output, g.edges)}, {"hidden layer", per_edge(A.hidden, g.edges)}},
          .title = title};
}

}  // namespace ag::graph
