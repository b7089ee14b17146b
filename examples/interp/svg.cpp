#include "examples/interp/svg.h"

#include <algorithm>
#include <cmath>
#include <cstdio>

#include "core/error.h"

namespace ag::interp {

namespace {
// A number for an attribute: short, and never in a locale's format.
std::string num(double v) {
  char text[32];
  std::snprintf(text, sizeof text, "%.6g", v);
  return text;
}

// White (w = 0) to dark blue (w = 1).
std::string weight_colour(double w) {
  w = std::clamp(w, 0.0, 1.0);
  const auto channel = [w](int dark) { return static_cast<int>(std::lround(255.0 - (255.0 - dark) * w)); };
  return "rgb(" + std::to_string(channel(8)) + "," + std::to_string(channel(48)) + "," + std::to_string(channel(107)) + ")";
}

std::string text_element(double x, double y, const std::string& text, const std::string& attributes = "") {
  return "<text x=\"" + num(x) + "\" y=\"" + num(y) + "\"" + (attributes.empty() ? "" : " " + attributes) + ">" +
         escape_xml(text) + "</text>\n";
}

struct Range {
  double low, high;
  double at(double v, double from, double to) const {  // v mapped linearly from [low, high] to [from, to]
    return from + (v - low) / (high - low) * (to - from);
  }
};

// Round numbers inside the range, 1, 2 or 5 × 10^k apart, about `count` of them.
std::vector<double> ticks(const Range& r, int count) {
  const double rough = (r.high - r.low) / count, power = std::pow(10.0, std::floor(std::log10(rough)));
  const double step = power * (rough / power < 1.5 ? 1 : rough / power < 3.5 ? 2 : rough / power < 7.5 ? 5 : 10);
  std::vector<double> at;
  for (double v = std::ceil(r.low / step) * step; v <= r.high + 1e-9 * step; v += step)
    at.push_back(std::fabs(v) < 1e-12 * step ? 0.0 : v);
  return at;
}

Range span(const std::vector<Series>& series, bool of_x) {
  double low = INFINITY, high = -INFINITY;
  for (const Series& s : series)
    for (const double v : of_x ? s.x : s.y) {
      low = std::min(low, v);
      high = std::max(high, v);
    }
  if (!(low < high)) {  // empty, or one value: a unit range around it
    low = std::isfinite(low) ? low - 0.5 : 0.0;
    high = low + 1.0;
  }
  return {low, high};
}
}  // namespace

std::string escape_xml(const std::string& text) {
  std::string out;
  for (const char c : text) {
    switch (c) {
      case '&': out += "&amp;"; break;
      case '<': out += "&lt;"; break;
      case '>': out += "&gt;"; break;
      case '"': out += "&quot;"; break;
      case '\'': out += "&apos;"; break;
      default: out += c;
    }
  }
  return out;
}

std::string visible_char(const std::string& utf8_char) {
  if (utf8_char == " ") return "␣";
  if (utf8_char == "\n") return "↵";
  if (utf8_char == "\t") return "⇥";
  return utf8_char;
}

std::string heatmap_grid_svg(const std::string& title, const std::vector<Heatmap>& panels,
                             const std::vector<std::string>& labels,
                             const std::function<bool(size_t, int64_t, int64_t)>& visible, int64_t columns,
                             const std::string& id) {
  const int64_t T = static_cast<int64_t>(labels.size());
  AG_CHECK(!panels.empty() && columns >= 1, "heatmap_grid_svg: no panels, or no columns");
  for (const Heatmap& p : panels)
    AG_CHECK(static_cast<int64_t>(p.values.size()) == T * T,
             "heatmap_grid_svg: panel '" << p.title << "' has " << p.values.size() << " values for T = " << T);
  const double cell = 12, label_room = 16, gap = 24, title_room = 28, panel_title = 16;
  const double panel = label_room + T * cell;
  const int64_t rows = (static_cast<int64_t>(panels.size()) + columns - 1) / columns;
  const int64_t used_columns = std::min<int64_t>(columns, static_cast<int64_t>(panels.size()));
  const double width = used_columns * (panel + gap) + gap, height = title_room + rows * (panel_title + panel + gap);
  std::string svg = "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"" + num(width) + "\" height=\"" +
                    num(height) + "\" viewBox=\"0 0 " + num(width) + " " + num(height) +
                    "\" font-family=\"monospace\" font-size=\"10\">\n";
  const std::string hatch = "masked-" + id;
  svg += "<defs><pattern id=\"" + hatch + "\" width=\"4\" height=\"4\" patternUnits=\"userSpaceOnUse\">"
         "<rect width=\"4\" height=\"4\" fill=\"#d0d0d0\"/><path d=\"M0,4 L4,0\" stroke=\"#909090\" "
         "stroke-width=\"1\"/></pattern></defs>\n";
  svg += text_element(gap, 18, title, "font-size=\"13\" font-family=\"sans-serif\"");
  for (size_t p = 0; p < panels.size(); ++p) {
    const double left = gap + static_cast<double>(p % columns) * (panel + gap);
    const double top = title_room + static_cast<double>(p / columns) * (panel_title + panel + gap);
    svg += "<g class=\"panel\">\n" + text_element(left, top + 11, panels[p].title, "font-family=\"sans-serif\"");
    const double grid_left = left + label_room, grid_top = top + panel_title + label_room;
    for (int64_t t = 0; t < T; ++t) {  // keys along the top, queries down the side
      svg += text_element(grid_left + (t + 0.5) * cell, grid_top - 4, visible_char(labels[t]), "text-anchor=\"middle\"");
      svg += text_element(grid_left - 3, grid_top + (t + 0.8) * cell, visible_char(labels[t]), "text-anchor=\"end\"");
    }
    for (int64_t i = 0; i < T; ++i)
      for (int64_t j = 0; j < T; ++j) {
        const bool shown = visible(p, i, j);
        svg += "<rect class=\"" + std::string(shown ? "cell" : "masked") + "\" x=\"" + num(grid_left + j * cell) +
               "\" y=\"" + num(grid_top + i * cell) + "\" width=\"" + num(cell) + "\" height=\"" + num(cell) +
               "\" fill=\"" + (shown ? weight_colour(panels[p].values[i * T + j] / panels[p].full_scale) : "url(#" + hatch + ")") + "\"/>\n";
      }
    svg += "</g>\n";
  }
  return svg + "</svg>\n";
}

std::string line_chart_svg(const LineChart& chart) {
  const double width = 720, height = 380, left = 64, right = 84, top = 52, bottom = 48;
  const double plot_w = width - left - right, plot_h = height - top - bottom;
  std::vector<Series> all = chart.left;
  all.insert(all.end(), chart.right.begin(), chart.right.end());
  const Range x_range = span(all, true), left_range = span(chart.left, false), right_range = span(chart.right, false);
  std::string svg = "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"" + num(width) + "\" height=\"" + num(height) +
                    "\" viewBox=\"0 0 " + num(width) + " " + num(height) +
                    "\" font-family=\"sans-serif\" font-size=\"11\">\n";
  svg += "<rect x=\"0\" y=\"0\" width=\"" + num(width) + "\" height=\"" + num(height) + "\" fill=\"white\"/>\n";
  svg += text_element(left, 18, chart.title, "font-size=\"14\"");
  svg += "<rect x=\"" + num(left) + "\" y=\"" + num(top) + "\" width=\"" + num(plot_w) + "\" height=\"" + num(plot_h) +
         "\" fill=\"none\" stroke=\"#444\"/>\n";
  for (const double v : ticks(x_range, 5)) {
    const double x = x_range.at(v, left, left + plot_w);
    svg += "<line x1=\"" + num(x) + "\" y1=\"" + num(top) + "\" x2=\"" + num(x) + "\" y2=\"" + num(top + plot_h) +
           "\" stroke=\"#e4e4e4\"/>\n";
    svg += text_element(x, top + plot_h + 16, num(v), "text-anchor=\"middle\"");
  }
  for (const double v : ticks(left_range, 5)) {
    const double y = left_range.at(v, top + plot_h, top);
    svg += "<line x1=\"" + num(left) + "\" y1=\"" + num(y) + "\" x2=\"" + num(left + plot_w) + "\" y2=\"" + num(y) +
           "\" stroke=\"#e4e4e4\"/>\n";
    svg += text_element(left - 6, y + 4, num(v), "text-anchor=\"end\"");
  }
  if (!chart.right.empty())
    for (const double v : ticks(right_range, 5))
      svg += text_element(left + plot_w + 6, right_range.at(v, top + plot_h, top) + 4, num(v));
  svg += text_element(left + plot_w / 2, height - 10, chart.x_label, "text-anchor=\"middle\"");
  svg += text_element(14, top + plot_h / 2, chart.left_label,
                      "text-anchor=\"middle\" transform=\"rotate(-90 14 " + num(top + plot_h / 2) + ")\"");
  if (!chart.right.empty())
    svg += text_element(width - 12, top + plot_h / 2, chart.right_label,
                        "text-anchor=\"middle\" transform=\"rotate(90 " + num(width - 12) + " " + num(top + plot_h / 2) + ")\"");
  double legend_x = left;  // the legend sits between the title and the plot
  const auto draw = [&](const Series& s, const Range& y_range) {
    AG_CHECK(s.x.size() == s.y.size(), "line_chart_svg: series '" << s.name << "' has " << s.x.size() << " x and "
                                                                   << s.y.size() << " y values");
    std::string points;
    for (size_t i = 0; i < s.x.size(); ++i) {
      const double px = x_range.at(s.x[i], left, left + plot_w), py = y_range.at(s.y[i], top + plot_h, top);
      points += num(px) + "," + num(py) + " ";
      if (s.markers)
        svg += "<circle cx=\"" + num(px) + "\" cy=\"" + num(py) + "\" r=\"2.5\" fill=\"" + s.colour + "\"/>\n";
    }
    svg += "<polyline class=\"series\" fill=\"none\" stroke=\"" + s.colour + "\" stroke-width=\"1.5\" points=\"" +
           points + "\"/>\n";
    svg += "<rect x=\"" + num(legend_x) + "\" y=\"" + num(top - 14) + "\" width=\"12\" height=\"3\" fill=\"" + s.colour + "\"/>\n";
    svg += text_element(legend_x + 16, top - 9, s.name);
    legend_x += 24 + 7.0 * static_cast<double>(s.name.size());
  };
  for (const Series& s : chart.left) draw(s, left_range);
  for (const Series& s : chart.right) draw(s, right_range);
  return svg + "</svg>\n";
}

}  // namespace ag::interp
