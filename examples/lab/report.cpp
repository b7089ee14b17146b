#include "examples/lab/report.h"

#include <algorithm>
#include <cmath>
#include <functional>
#include <map>
#include <set>

#include "examples/common/files.h"
#include "examples/interp/svg.h"

namespace ag::lab {

namespace {
// Ten strong colours, then four lighter ones: a task's six mixers on two tasks (the memory preset) get twelve of their own.
const char* const kColours[] = {"#1f77b4", "#ff7f0e", "#2ca02c", "#d62728", "#9467bd", "#8c564b", "#e377c2",
                                "#7f7f7f", "#bcbd22", "#17becf", "#aec7e8", "#ffbb78", "#98df8a", "#ff9896"};

double number(const Row& row, const std::string& column) {
  const auto found = row.find(column);
  return found == row.end() ? std::nan("") : std::stod(found->second);
}

std::string field(const Row& row, const std::string& column) {
  const auto found = row.find(column);
  return found == row.end() ? "" : found->second;
}

bool trained(const Row& row) { return field(row, "status") == "ok"; }

// Series of (x, y) points grouped by name, sorted by x, coloured in order of first appearance.
// Points of one series at one x (the seeds of a cell) are drawn as their mean, with a band
// from the lowest to the highest: the seeds' spread.
class SeriesSet {
 public:
  void add(const std::string& name, double x, double y) {
    if (std::isnan(x) || std::isnan(y)) return;
    if (!points_.count(name)) order_.push_back(name);
    points_[name][x].push_back(y);
  }
  std::vector<interp::Series> series(bool markers = true) const {
    std::vector<interp::Series> out;
    for (size_t i = 0; i < order_.size(); ++i) {
      interp::Series s{order_[i], kColours[i % std::size(kColours)], {}, {}, markers};
      bool spread = false;
      for (const auto& [x, ys] : points_.at(order_[i])) {
        double sum = 0;
        for (const double y : ys) sum += y;
        s.x.push_back(x);
        s.y.push_back(sum / static_cast<double>(ys.size()));
        s.low.push_back(*std::min_element(ys.begin(), ys.end()));
        s.high.push_back(*std::max_element(ys.begin(), ys.end()));
        spread = spread || ys.size() > 1;
      }
      if (!spread) s.low.clear(), s.high.clear();
      out.push_back(std::move(s));
    }
    return out;
  }
  bool empty() const { return order_.empty(); }

 private:
  std::vector<std::string> order_;
  std::map<std::string, std::map<double, std::vector<double>>> points_;
};

// A mixer and the width, the series of the accuracy plots ("softmax C=64"); the width only when several are.
std::string series_name(const Row& row, bool widths_vary, bool heads_vary) {
  std::string name = field(row, "mixer");
  if (widths_vary) name += " C=" + field(row, "n_embd");
  if (heads_vary) name += " H=" + field(row, "n_head");
  return name;
}

bool varies(const std::vector<Row>& rows, const std::string& column) {
  std::set<std::string> values;
  for (const Row& row : rows) values.insert(field(row, column));
  return values.size() > 1;
}

struct Labels {
  std::string title, x, y;
};
}  // namespace

std::vector<std::pair<double, std::string>> points_per_series(std::vector<interp::Series>& series, std::string& x_label) {
  std::set<double> xs;
  for (const interp::Series& s : series) xs.insert(s.x.begin(), s.x.end());
  if (xs.size() != 1) return {};
  std::vector<std::pair<double, std::string>> ticks;
  for (size_t i = 0; i < series.size(); ++i) {
    series[i].x.assign(series[i].x.size(), static_cast<double>(i));
    series[i].markers = true;
    ticks.emplace_back(static_cast<double>(i), series[i].name);
  }
  x_label += " (one value: a point per series)";
  return ticks;
}

namespace {
// The picture every per-cell plot is: one line per name(row) through (x(row),
// the row's `y` column) of the trained rows `keep` takes, seeds as a band; "" when none is taken.
// An accuracy spans 0 to 1, and every axis leaves a margin so no point lies on the frame; an x
// axis of one value becomes a point per series (points_per_series). `x_ticks` names the x ticks.
std::string rows_chart(const std::vector<Row>& rows, const std::function<bool(const Row&)>& keep,
                       const std::function<std::string(const Row&)>& name, const std::function<double(const Row&)>& x,
                       const std::string& y, const Labels& labels,
                       std::vector<std::pair<double, std::string>> x_ticks = {}) {
  SeriesSet set;
  for (const Row& row : rows)
    if (trained(row) && keep(row)) set.add(name(row), x(row), number(row, y));
  if (set.empty()) return "";
  std::vector<interp::Series> series = set.series();
  std::string x_label = labels.x;
  if (auto one = points_per_series(series, x_label); !one.empty()) x_ticks = std::move(one);
  return interp::line_chart_svg({.title = labels.title, .x_label = x_label, .left_label = labels.y, .right_label = "",
                                 .left = series, .right = {},
                                 .left_span = y == "accuracy" ? std::vector<interp::AxisSpan>{{0, 1}} : std::vector<interp::AxisSpan>{},
                                 .x_ticks = x_ticks, .inset = true});
}

std::function<double(const Row&)> column(const std::string& name) {
  return [name](const Row& row) { return number(row, name); };
}

std::function<bool(const Row&)> task_is(const std::string& task) {
  return [task](const Row& row) { return field(row, "task") == task; };
}

std::string accuracy_vs_length(const std::vector<Row>& rows, const std::string& task) {
  const bool widths = varies(rows, "n_embd"), heads = varies(rows, "n_head");
  return rows_chart(rows, task_is(task), [&](const Row& row) { return series_name(row, widths, heads); },
                    column("block_size"), "accuracy",
                    {.title = task + ": held-out accuracy against sequence length",
                     .x = "sequence length T (--block-size)", .y = "accuracy"});
}

// Held-out accuracy against the decoder's state, a line per task and mixer through its widths
// (and other sizes), at one length T (0: every length), with the frontier: the best accuracy any
// cell reached at that state or less.
std::string accuracy_vs_state(const std::vector<Row>& rows, double T) {
  const auto keep = [T](const Row& row) {
    return field(row, "task") != "text" && (T == 0 || number(row, "block_size") == T);
  };
  SeriesSet set;
  std::map<std::pair<std::string, double>, std::vector<double>> cells;  // (series, log2 state) -> accuracies
  const bool tasks = varies(rows, "task");
  for (const Row& row : rows) {
    if (!trained(row) || !keep(row)) continue;
    const std::string name = (tasks ? field(row, "task") + " " : "") + field(row, "mixer");
    const double x = std::log2(number(row, "state_floats")), y = number(row, "accuracy");
    set.add(name, x, y);
    cells[{name, x}].push_back(y);
  }
  if (set.empty()) return "";
  std::map<double, double> best;  // log2 state -> the best mean accuracy there
  for (const auto& [key, ys] : cells) {
    double sum = 0;
    for (const double y : ys) sum += y;
    best[key.second] = std::max(best.count(key.second) ? best[key.second] : 0.0, sum / static_cast<double>(ys.size()));
  }
  std::vector<interp::Series> series = set.series();
  std::string x_label = "log2 of the floats a decoder holds after T positions (KV cache or recurrent state)";
  const std::vector<std::pair<double, std::string>> x_ticks = points_per_series(series, x_label);
  if (x_ticks.empty() && best.size() > 1) {
    interp::Series frontier{"frontier: the best at this state or less", "#000000", {}, {}, false};
    double so_far = 0;
    for (const auto& [x, y] : best) frontier.x.push_back(x), frontier.y.push_back(so_far = std::max(so_far, y));
    series.push_back(std::move(frontier));
  }
  const std::string where = T == 0 ? "every cell" : "T = " + std::to_string(static_cast<int64_t>(T));
  return interp::line_chart_svg({.title = "held-out accuracy against the decoder's state (" + where + ")",
                                 .x_label = x_label, .left_label = "accuracy", .right_label = "", .left = series,
                                 .right = {}, .left_span = {{0, 1}}, .x_ticks = x_ticks, .inset = true});
}

// Zoology's figure 2: at one (T, P), held-out accuracy against the width d_model, a line per mixer
// (the best of its learning rates; a band where there are seeds), widths on a log scale.
std::string accuracy_vs_width(const std::vector<Row>& rows, double T) {
  std::set<double> widths;
  std::string pairs;
  for (const Row& row : rows)
    if (trained(row) && field(row, "task") == "mqar" && number(row, "block_size") == T)
      widths.insert(number(row, "n_embd")), pairs = field(row, "pairs");
  if (widths.size() < 2) return "";
  std::vector<std::pair<double, std::string>> ticks;
  for (const double C : widths) ticks.emplace_back(std::log2(C), std::to_string(static_cast<int64_t>(C)));
  const bool heads = varies(rows, "n_head"), layers = varies(rows, "n_layer");
  return rows_chart(
      rows, [T](const Row& row) { return field(row, "task") == "mqar" && number(row, "block_size") == T; },
      [&](const Row& row) {
        return field(row, "mixer") + (heads ? " H=" + field(row, "n_head") : "") + (layers ? " L=" + field(row, "n_layer") : "");
      },
      [](const Row& row) { return std::log2(number(row, "n_embd")); }, "accuracy",
      {.title = "mqar, T = " + std::to_string(static_cast<int64_t>(T)) + ", P = " + pairs +
                ": held-out accuracy against the width (best learning rate; band: the seeds' spread)",
       .x = "model width d_model (--n-embd, log scale)", .y = "accuracy"},
      ticks);
}

// At one (T, P), each mixer's accuracy at each width: the mean over seeds, their range where there
// are several, and the learning rate each seed kept; the table beside accuracy_vs_width's plot.
std::string width_table_html(const std::vector<Row>& rows, double T) {
  std::set<double> widths;
  std::vector<std::string> mixers;
  std::map<std::pair<std::string, double>, std::vector<const Row*>> cells;
  for (const Row& row : rows) {
    if (!trained(row) || field(row, "task") != "mqar" || number(row, "block_size") != T) continue;
    const std::string mixer = field(row, "mixer");
    if (std::find(mixers.begin(), mixers.end(), mixer) == mixers.end()) mixers.push_back(mixer);
    widths.insert(number(row, "n_embd"));
    cells[{mixer, number(row, "n_embd")}].push_back(&row);
  }
  std::string html = "<table><tr><th>mixer</th>";
  for (const double C : widths) html += "<th>d_model " + std::to_string(static_cast<int64_t>(C)) + "</th>";
  html += "</tr>\n";
  for (const std::string& mixer : mixers) {
    html += "<tr><td>" + interp::escape_xml(mixer) + "</td>";
    for (const double C : widths) {
      const auto found = cells.find({mixer, C});
      if (found == cells.end()) {
        html += "<td></td>";
        continue;
      }
      double sum = 0, low = 1, high = 0;
      std::string lrs;
      for (const Row* row : found->second) {
        const double a = number(*row, "accuracy");
        sum += a, low = std::min(low, a), high = std::max(high, a);
        lrs += (lrs.empty() ? "" : ", ") + field(*row, "lr");
      }
      char text[96];
      const size_t n = found->second.size();
      if (n > 1) std::snprintf(text, sizeof text, "%.3f (%.3f–%.3f, %zu seeds)", sum / static_cast<double>(n), low, high, n);
      else std::snprintf(text, sizeof text, "%.3f", sum);
      html += "<td>" + std::string(text) + "<br><small>lr " + lrs + "</small></td>";
    }
    html += "</tr>\n";
  }
  return html + "</table>\n";
}

// The cells at the longest T of the first task, each its winning run's training loss over time.
std::string loss_vs_time(const std::vector<Row>& rows, const std::vector<Curve>& curves) {
  if (rows.empty() || rows.size() != curves.size()) return "";
  const std::string task = field(rows.front(), "task");
  double longest = 0;
  for (const Row& row : rows)
    if (trained(row) && field(row, "task") == task) longest = std::max(longest, number(row, "block_size"));
  std::vector<interp::Series> series;
  for (size_t i = 0; i < rows.size(); ++i) {
    if (!trained(rows[i]) || field(rows[i], "task") != task || number(rows[i], "block_size") != longest) continue;
    interp::Series s{field(rows[i], "mixer") + " C=" + field(rows[i], "n_embd") + " H=" + field(rows[i], "n_head"),
                     kColours[series.size() % std::size(kColours)], {}, {}, false};
    // Every k-th step, some 400 points a line: enough for the eye, and the SVG stays small.
    const std::vector<CurvePoint>& points = curves[i].points;
    const size_t every = std::max<size_t>(1, points.size() / 400);
    for (size_t p = 0; p < points.size(); p += every) s.x.push_back(points[p].seconds), s.y.push_back(points[p].loss);
    if (!s.x.empty()) series.push_back(std::move(s));
  }
  if (series.empty()) return "";
  return interp::line_chart_svg({.title = task + " at T = " + std::to_string(static_cast<int64_t>(longest)) +
                                          ": training loss against wall-clock time (the best learning rate's run)",
                                 .x_label = "seconds of training", .left_label = "training loss", .right_label = "",
                                 .left = series, .right = {}});
}

// Passkey's needle-in-a-haystack picture: accuracy against the needle's depth,
// one line per mixer and length, so that both where the number sits and how
// long the haystack is can be read off.
std::string passkey_by_depth(const std::vector<Row>& rows) {
  const bool widths = varies(rows, "n_embd"), heads = varies(rows, "n_head");
  return rows_chart(
      rows, task_is("passkey"),
      [&](const Row& row) { return series_name(row, widths, heads) + " T=" + field(row, "block_size"); },
      column("depth"), "accuracy",
      {.title = "passkey: held-out digit accuracy by the number's depth and the length T",
       .x = "depth of the number in the filler (0: the start, 1: just before the question)",
       .y = "accuracy"});
}

// The heads question ("how few heads suffice?"): the score against the number
// of query heads, a line per task and mixer; `text` true draws the text task's
// val loss (lower is better), false the other tasks' accuracy.
std::string score_vs_heads(const std::vector<Row>& rows, bool text) {
  if (!varies(rows, "n_head")) return "";
  const bool widths = varies(rows, "n_embd"), lengths = varies(rows, "block_size");
  return rows_chart(
      rows, [&](const Row& row) { return (field(row, "task") == "text") == text; },
      [&](const Row& row) {
        return field(row, "task") + " " + series_name(row, widths, false) +
               (lengths ? " T=" + field(row, "block_size") : "");
      },
      column("n_head"), text ? "loss" : "accuracy",
      {.title = std::string(text ? "text: val loss" : "held-out accuracy") +
                " against the number of query heads (softmax:gqa=1: one K/V head for all)",
       .x = "query heads H (--n-head)", .y = text ? "val loss" : "accuracy"});
}

// The depth question (issue 51: a transformer against a message-passing network on
// graphs): held-out accuracy against the number of layers, a line per task, mixer and
// graph mask, on an axis from 0 to 1; "" unless the layers vary.
std::string accuracy_vs_layers(const std::vector<Row>& rows) {
  if (!varies(rows, "n_layer")) return "";
  const bool widths = varies(rows, "n_embd"), heads = varies(rows, "n_head"), lengths = varies(rows, "block_size");
  SeriesSet set;
  for (const Row& row : rows) {
    if (!trained(row) || field(row, "task") == "text") continue;
    const std::string mask = field(row, "graph_mask");
    set.add(field(row, "task") + " " + series_name(row, widths, heads) + (mask.empty() ? "" : " mask=" + mask) +
                (lengths ? " T=" + field(row, "block_size") : ""),
            number(row, "n_layer"), number(row, "accuracy"));
  }
  if (set.empty()) return "";
  return interp::line_chart_svg({.title = "held-out accuracy against the number of layers",
                                 .x_label = "layers N (--n-layer)", .left_label = "accuracy", .right_label = "",
                                 .left = set.series(), .right = {}, .left_span = {{0, 1}}, .inset = true});
}

std::string cost_vs_length(const std::vector<Row>& rows) {
  SeriesSet ms, mb;
  for (const Row& row : rows) {
    if (!trained(row)) continue;
    const std::string name = field(row, "mixer") + " C=" + field(row, "n_embd");
    ms.add(name + " ms/iter", number(row, "block_size"), number(row, "ms_per_iter"));
    mb.add(name + " MB", number(row, "block_size"), number(row, "peak_mb"));
  }
  if (ms.empty()) return "";
  // A mixer's two lines share its colour: the legend and the axes tell them apart. At one T,
  // each mixer's two points stand at its own place on the x axis, named there.
  std::vector<interp::Series> left = ms.series(), right = mb.series();
  std::string x_label = "sequence length T";
  std::vector<std::pair<double, std::string>> x_ticks = points_per_series(left, x_label);
  for (size_t i = 0; i < x_ticks.size() && i < right.size(); ++i) {
    right[i].x.assign(right[i].x.size(), static_cast<double>(i));
    right[i].markers = true;
    x_ticks[i].second = x_ticks[i].second.substr(0, x_ticks[i].second.rfind(' '));  // the mixer, not " ms/iter"
  }
  return interp::line_chart_svg({.title = "cost against sequence length: ms per training step (left axis), peak MB (right axis)",
                                 .x_label = x_label, .left_label = "ms/iter", .right_label = "peak MB above setup",
                                 .left = left, .right = right, .x_ticks = x_ticks, .inset = true});
}

std::string table_html(const std::vector<Row>& rows) {
  const std::vector<std::string> columns = {"task", "mixer", "block_size", "pairs", "n_embd", "n_head", "n_kv_head",
                                            "n_layer", "seed", "params", "state_floats", "lr", "steps", "accuracy", "loss",
                                            "ms_per_iter", "tokens_per_s", "peak_mb", "cell_seconds", "device", "status"};
  std::string html = "<table><tr>";
  for (const std::string& c : columns) html += "<th>" + c + "</th>";
  html += "</tr>\n";
  for (const Row& row : rows) {
    html += "<tr>";
    for (const std::string& c : columns) html += "<td>" + interp::escape_xml(field(row, c)) + "</td>";
    html += "</tr>\n";
  }
  return html + "</table>\n";
}
}  // namespace

std::vector<CurvePoint> parse_curve(const std::string& text) {
  std::vector<CurvePoint> points;
  size_t start = text.find('\n');
  while (start != std::string::npos && start + 1 < text.size()) {
    const size_t end = text.find('\n', start + 1);
    const std::vector<std::string> f = split_list(text.substr(start + 1, end - start - 1) + ",");
    if (f.size() >= 3)
      points.push_back({std::stod(f[0]), std::stoll(f[1]), std::stod(f[2]), f.size() > 3 ? std::stod(f[3]) : std::nan("")});
    start = end;
  }
  return points;
}

namespace {
// Accuracy against the state, and Zoology's accuracy against the width, at each length: their
// files written, their HTML (each plot, the width's beside its table) appended to by_state, by_width.
void plots_by_length(const std::string& dir, const std::vector<Row>& rows, std::string& by_state, std::string& by_width) {
  std::set<double> lengths;
  for (const Row& row : rows)
    if (trained(row) && field(row, "task") != "text") lengths.insert(number(row, "block_size"));
  for (const double T : lengths.size() > 1 ? lengths : std::set<double>{0}) {
    const std::string svg = accuracy_vs_state(rows, T);
    if (svg.empty()) continue;
    replace_file(dir + "/accuracy_vs_state" + (T == 0 ? "" : "_T" + std::to_string(static_cast<int64_t>(T))) + ".svg", svg);
    by_state += "<div>" + svg + "</div>\n";
  }
  for (const double T : lengths) {
    const std::string svg = accuracy_vs_width(rows, T);
    if (svg.empty()) continue;
    replace_file(dir + "/accuracy_vs_width_T" + std::to_string(static_cast<int64_t>(T)) + ".svg", svg);
    by_width += "<div class=\"beside\"><div>" + svg + "</div><div>" + width_table_html(rows, T) + "</div></div>\n";
  }
}
}  // namespace

void write_report(const std::string& dir, const std::vector<Row>& rows, const std::vector<Curve>& curves,
                  const std::string& command) {
  std::set<std::string> tasks;
  for (const Row& row : rows)
    if (field(row, "task") != "text") tasks.insert(field(row, "task"));
  std::string by_length;
  for (const std::string& task : tasks) {
    const std::string svg = accuracy_vs_length(rows, task);
    if (svg.empty()) continue;
    replace_file(dir + "/accuracy_vs_length" + (task == "mqar" ? "" : "_" + task) + ".svg", svg);
    by_length += "<div>" + svg + "</div>\n";
  }
  std::string by_state, by_width;
  plots_by_length(dir, rows, by_state, by_width);
  const std::string by_time = loss_vs_time(rows, curves), cost = cost_vs_length(rows);
  const std::string by_depth = passkey_by_depth(rows);
  if (!by_depth.empty()) replace_file(dir + "/passkey_by_depth.svg", by_depth);
  std::string by_heads;
  for (const bool text : {false, true}) {
    const std::string svg = score_vs_heads(rows, text);
    if (svg.empty()) continue;
    replace_file(dir + (text ? "/loss_vs_heads.svg" : "/accuracy_vs_heads.svg"), svg);
    by_heads += "<div>" + svg + "</div>\n";
  }
  const std::string by_layers = accuracy_vs_layers(rows);
  if (!by_layers.empty()) replace_file(dir + "/accuracy_vs_layers.svg", by_layers);
  if (!by_time.empty()) replace_file(dir + "/loss_vs_time.svg", by_time);
  if (!cost.empty()) replace_file(dir + "/cost_vs_length.svg", cost);

  std::string problems;
  for (const Row& row : rows)
    if (!trained(row))
      problems += "<li><code>" + interp::escape_xml(field(row, "cell")) + "</code>: " + field(row, "status") + ", " +
                  interp::escape_xml(field(row, "reason")) + "</li>\n";
  const auto none = [](const std::string& svg, const char* what) {
    return svg.empty() ? std::string("<p>No trained cell to draw ") + what + " from.</p>\n" : "<div>" + svg + "</div>\n";
  };
  std::string text_rows;
  for (const Row& row : rows)
    if (trained(row) && field(row, "task") == "text")
      text_rows += "<li><code>" + interp::escape_xml(field(row, "cell")) + "</code>: val loss " + field(row, "loss") +
                   ", next-character accuracy " + field(row, "accuracy") + "</li>\n";
  const std::string html =
      "<!DOCTYPE html>\n<html lang=\"en\"><head><meta charset=\"utf-8\"><title>attograd lab</title>\n"
      "<style>body{font-family:sans-serif;margin:24px;max-width:1300px}"
      "table{border-collapse:collapse}td,th{border:1px solid #ccc;padding:2px 8px;text-align:left}"
      "section{margin-bottom:32px}section svg{max-width:100%;height:auto}"
      ".beside{display:flex;flex-wrap:wrap;gap:16px;align-items:flex-start}.beside>div{flex:1 1 480px}</style></head><body>\n"
      "<h1>The attention lab</h1>\n"
      "<section id=\"config\"><h2>The grid</h2>\n<p><code>" + interp::escape_xml(command) + "</code></p>\n<p>" +
      std::to_string(rows.size()) + " cells; each trained at every learning rate of its sweep, the best held-out "
      "score kept.</p></section>\n" +
      (by_width.empty() ? "" : std::string("<section id=\"accuracy-width\"><h2>Accuracy against the width at each length (Zoology's figure 2)</h2>\n") +
                                   by_width + "</section>\n") +
      "<section id=\"accuracy-length\"><h2>Accuracy against sequence length</h2>\n" + none(by_length, "it") +
      (text_rows.empty() ? "" : "<p>The text cells (scored by val loss):</p><ul>" + text_rows + "</ul>\n") + "</section>\n" +
      (by_depth.empty() ? "" : "<section id=\"passkey-depth\"><h2>Passkey: accuracy by length and depth</h2>\n<div>" +
                                   by_depth + "</div></section>\n") +
      (by_layers.empty() ? "" : "<section id=\"layers\"><h2>Accuracy against the number of layers</h2>\n<div>" +
                                    by_layers + "</div></section>\n") +
      (by_heads.empty() ? "" : "<section id=\"heads\"><h2>Score against the number of heads</h2>\n" + by_heads +
                                   "</section>\n") +
      "<section id=\"accuracy-state\"><h2>Accuracy against state size</h2>\n<p>Softmax attention's state is its KV "
      "cache, which grows with T; linear attention's and ssd's is a fixed recurrent state.</p>\n" +
      none(by_state, "it") + "</section>\n"
      "<section id=\"loss-time\"><h2>Loss against wall-clock time</h2>\n" + none(by_time, "it") + "</section>\n"
      "<section id=\"cost\"><h2>Time and memory against sequence length</h2>\n" + none(cost, "it") + "</section>\n"
      "<section id=\"results\"><h2>Every cell (results.csv)</h2>\n" + table_html(rows) +
      (problems.empty() ? "" : "<h3>Cells not trained</h3><ul>" + problems + "</ul>\n") + "</section>\n"
      "</body></html>\n";
  replace_file(dir + "/lab_report.html", html);
}

}  // namespace ag::lab
