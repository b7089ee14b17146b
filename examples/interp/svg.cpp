#include "examples/interp/svg.h"

#include <algorithm>
#include <cmath>
#include <cstdio>

#include "core/error.h"

namespace ag::interp {

namespace {
// svg_number, short: the attributes below are full of them.
std::string num(double v) { return svg_number(v); }

struct Range {
  double low, high;
  double at(double v, double from, double to) const {  // v mapped linearly from [low, high] to [from, to]
    return from + (v - low) / (high - low) * (to - from);
  }
};

// Round numbers inside the range, 1, 2 or 5 × 10^k apart, about `count` of them.
// The step is at least 4/7 of the range's count-th, so there are at most 2·count + 1
// ticks: the loop counts them rather than adding steps, so that a step below the
// values' resolution (a range one rounding wide) cannot keep it from ending.
std::vector<double> ticks(const Range& r, int count) {
  const double rough = (r.high - r.low) / count, power = std::pow(10.0, std::floor(std::log10(rough)));
  const double step = power * (rough / power < 1.5 ? 1 : rough / power < 3.5 ? 2 : rough / power < 7.5 ? 5 : 10);
  std::vector<double> at;
  if (!(step > 0) || !std::isfinite(step)) return at;
  const double first = std::ceil(r.low / step) * step;
  for (int i = 0; i <= 2 * count; ++i) {
    const double v = first + i * step;
    if (!(v <= r.high + 1e-9 * step)) break;
    at.push_back(std::fabs(v) < 1e-12 * step ? 0.0 : v);
  }
  return at;
}

Range span(const std::vector<Series>& series, bool of_x) {
  double low = INFINITY, high = -INFINITY;
  for (const Series& s : series)
    for (const double v : of_x ? s.x : s.y) {
      low = std::min(low, v);
      high = std::max(high, v);
    }
  // Empty, one value, or values that differ by rounding alone (two cells' 0.225 one
  // ulp apart, which made a step below the values' resolution): a unit range around them.
  if (!(low < high) || high - low <= 1e-12 * std::max(std::fabs(low), std::fabs(high))) {
    low = std::isfinite(low) ? low - 0.5 : 0.0;
    high = low + 1.0;
  }
  return {low, high};
}
}  // namespace

std::string svg_number(double v) {
  char text[32];
  std::snprintf(text, sizeof text, "%.6g", v);
  return text;
}

std::string weight_colour(double w) {
  w = std::clamp(w, 0.0, 1.0);
  const auto channel = [w](int dark) { return static_cast<int>(std::lround(255.0 - (255.0 - dark) * w)); };
  return "rgb(" + std::to_string(channel(8)) + "," + std::to_string(channel(48)) + "," + std::to_string(channel(107)) + ")";
}

std::string short_number(double v) {
  char text[32];
  std::snprintf(text, sizeof text, "%.3g", v);
  return text;
}

double text_width(const std::string& utf8, double font_size) {
  const auto characters = std::count_if(utf8.begin(), utf8.end(), [](char c) { return (c & 0xC0) != 0x80; });
  return 0.6 * font_size * static_cast<double>(characters);
}

std::string text_element(double x, double y, const std::string& text, const std::string& attributes) {
  return "<text x=\"" + num(x) + "\" y=\"" + num(y) + "\"" + (attributes.empty() ? "" : " " + attributes) + ">" +
         escape_xml(text) + "</text>\n";
}

std::string colour_scale_svg(double x, double y, double width, double full_scale, const std::string& ramp_id) {
  const double height = kColourScaleHeight;
  // weight_colour is linear in RGB, as the gradient is: the ramp shows the colours the weights are drawn in.
  std::string svg = "<defs><linearGradient id=\"" + ramp_id + "\"><stop offset=\"0\" stop-color=\"" + weight_colour(0) +
                    "\"/><stop offset=\"1\" stop-color=\"" + weight_colour(1) + "\"/></linearGradient></defs>\n";
  svg += "<rect x=\"" + num(x) + "\" y=\"" + num(y) + "\" width=\"" + num(width) + "\" height=\"" + num(height) +
         "\" fill=\"url(#" + ramp_id + ")\" stroke=\"#888\"/>\n";
  for (const double fraction : {0.0, 0.25, 0.5, 0.75, 1.0}) {
    const double at = x + fraction * width;
    svg += "<line x1=\"" + num(at) + "\" y1=\"" + num(y + height) + "\" x2=\"" + num(at) + "\" y2=\"" + num(y + height + 3) +
           "\" stroke=\"#444\"/>\n";
    svg += text_element(at, y + height + 15, short_number(fraction * full_scale), "text-anchor=\"middle\"");
  }
  return svg;
}

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
                             const std::function<bool(size_t, int64_t, int64_t)>& visible, double max_width,
                             const std::string& id) {
  const int64_t T = static_cast<int64_t>(labels.size());
  AG_CHECK(!panels.empty(), "heatmap_grid_svg: no panels");
  const double full_scale = panels[0].full_scale;
  for (const Heatmap& p : panels) {
    AG_CHECK(static_cast<int64_t>(p.values.size()) == T * T,
             "heatmap_grid_svg: panel '" << p.title << "' has " << p.values.size() << " values for T = " << T);
    AG_CHECK(p.full_scale == full_scale, "heatmap_grid_svg: panel '" << p.title << "' has full scale " << p.full_scale
                                                                      << ", the first " << full_scale << " (one colour scale serves them all)");
  }
  const double font = kMinFontSize, title_font = 14, panel_title_font = 12;
  const double cell = 12, label_room = 18, gap = 24, panel_title = 18;
  const double scale_top = 28, scale_width = 200, scale_height = kColourScaleHeight, title_room = 70;
  const double panel = label_room + T * cell;
  const int64_t columns = std::max<int64_t>(1, static_cast<int64_t>((max_width - gap) / (panel + gap)));
  const int64_t rows = (static_cast<int64_t>(panels.size()) + columns - 1) / columns;
  const int64_t used_columns = std::min<int64_t>(columns, static_cast<int64_t>(panels.size()));
  double width = std::max(used_columns * (panel + gap) + gap, 2 * gap + text_width(title, title_font));
  for (const Heatmap& p : panels) width = std::max(width, 2 * gap + text_width(p.title, panel_title_font));
  const double height = title_room + rows * (panel_title + panel + gap);
  std::string svg = "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"" + num(width) + "\" height=\"" +
                    num(height) + "\" viewBox=\"0 0 " + num(width) + " " + num(height) +
                    "\" font-family=\"monospace\" font-size=\"" + num(font) + "\">\n";
  const std::string hatch = "masked-" + id, ramp = "ramp-" + id;
  svg += "<defs><pattern id=\"" + hatch + "\" width=\"4\" height=\"4\" patternUnits=\"userSpaceOnUse\">"
         "<rect width=\"4\" height=\"4\" fill=\"#d0d0d0\"/><path d=\"M0,4 L4,0\" stroke=\"#909090\" "
         "stroke-width=\"1\"/></pattern></defs>\n";
  svg += text_element(gap, 18, title, "font-size=\"" + num(title_font) + "\" font-family=\"sans-serif\"");
  svg += "<g class=\"colour-scale\">\n" + colour_scale_svg(gap, scale_top, scale_width, full_scale, ramp);
  const double swatch = gap + scale_width + 36;
  svg += "<rect x=\"" + num(swatch) + "\" y=\"" + num(scale_top) + "\" width=\"" + num(2 * scale_height) + "\" height=\"" +
         num(scale_height) + "\" fill=\"url(#" + hatch + ")\" stroke=\"#888\"/>\n";
  svg += text_element(swatch + 2 * scale_height + 6, scale_top + scale_height, "masked", "font-family=\"sans-serif\"");
  svg += "</g>\n";
  for (size_t p = 0; p < panels.size(); ++p) {
    const double left = gap + static_cast<double>(p % columns) * (panel + gap);
    const double top = title_room + static_cast<double>(p / columns) * (panel_title + panel + gap);
    svg += "<g class=\"panel\">\n" +
           text_element(left, top + 12, panels[p].title, "font-size=\"" + num(panel_title_font) + "\" font-family=\"sans-serif\"");
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
               "\" fill=\"" + (shown ? weight_colour(panels[p].values[i * T + j] / full_scale) : "url(#" + hatch + ")") + "\"/>\n";
      }
    svg += "</g>\n";
  }
  return svg + "</svg>\n";
}

namespace {
// Where a series' points land: its x and y axes' ranges and the plot's box.
struct PlotBox {
  Range x, y;
  double left, top, width, height;
  double px(double v) const { return x.at(v, left, left + width); }
  double py(double v) const { return y.at(v, top + height, top); }
};

// One series of a line chart: its band (low to high, if it has one) under its line, and its markers.
std::string series_svg(const Series& s, const PlotBox& at) {
  std::string out;
  AG_CHECK(s.x.size() == s.y.size(), "line_chart_svg: series '" << s.name << "' has " << s.x.size() << " x and "
                                                                 << s.y.size() << " y values");
  if (!s.low.empty()) {  // the band first, under its line: low left to right, then high right to left
    AG_CHECK(s.low.size() == s.x.size() && s.high.size() == s.x.size(),
             "line_chart_svg: series '" << s.name << "' has a band of " << s.low.size() << " and " << s.high.size()
                                        << " values for " << s.x.size() << " points");
    std::string outline;
    for (size_t i = 0; i < s.x.size(); ++i)
      outline += num(at.px(s.x[i])) + "," + num(at.py(s.low[i])) + " ";
    for (size_t i = s.x.size(); i-- > 0;)
      outline += num(at.px(s.x[i])) + "," + num(at.py(s.high[i])) + " ";
    out += "<polygon class=\"band\" fill=\"" + s.colour + "\" fill-opacity=\"0.18\" stroke=\"none\" points=\"" + outline + "\"/>\n";
  }
  std::string points;
  for (size_t i = 0; i < s.x.size(); ++i) {
    const double px = at.px(s.x[i]), py = at.py(s.y[i]);
    points += num(px) + "," + num(py) + " ";
    if (s.markers)
      out += "<circle cx=\"" + num(px) + "\" cy=\"" + num(py) + "\" r=\"2.5\" fill=\"" + s.colour + "\"/>\n";
  }
  out += "<polyline class=\"series\" fill=\"none\" stroke=\"" + s.colour + "\" stroke-width=\"1.5\" points=\"" +
         points + "\"/>\n";
  return out;
}
}  // namespace

std::string line_chart_svg(const LineChart& chart) {
  const double width = 720, left = 64, right = 84, bottom = 48, plot_h = 280, legend_row = 16, title_font = 14;
  const double plot_w = width - left - right;
  std::vector<Series> all = chart.left;
  all.insert(all.end(), chart.right.begin(), chart.right.end());
  // The legend first: its rows decide where the plot starts.
  struct LegendEntry {
    double x;
    int row;
  };
  std::vector<LegendEntry> legend;
  double legend_x = left;
  int legend_rows = 1;
  for (const Series& s : all) {
    const double entry = 24 + text_width(s.name, kMinFontSize);
    if (legend_x > left && legend_x + entry > width - 16) {
      legend_x = left;
      ++legend_rows;
    }
    legend.push_back({legend_x, legend_rows - 1});
    legend_x += entry;
  }
  const double top = 36 + legend_rows * legend_row, height = top + plot_h + bottom;
  const auto widen = [&](Range r) {
    if (!chart.inset) return r;
    const double margin = 0.05 * (r.high - r.low);
    return Range{r.low - margin, r.high + margin};
  };
  Range left_data = span(chart.left, false);
  if (!chart.left_span.empty()) left_data = {chart.left_span[0].low, chart.left_span[0].high};
  const Range x_range = widen(span(all, true)), left_range = widen(left_data), right_range = widen(span(chart.right, false));
  std::string svg = "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"" + num(width) + "\" height=\"" + num(height) +
                    "\" viewBox=\"0 0 " + num(width) + " " + num(height) +
                    "\" font-family=\"sans-serif\" font-size=\"" + num(kMinFontSize) + "\">\n";
  svg += "<rect x=\"0\" y=\"0\" width=\"" + num(width) + "\" height=\"" + num(height) + "\" fill=\"white\"/>\n";
  svg += text_element(left, 18, chart.title, "font-size=\"" + num(title_font) + "\"");
  svg += "<rect x=\"" + num(left) + "\" y=\"" + num(top) + "\" width=\"" + num(plot_w) + "\" height=\"" + num(plot_h) +
         "\" fill=\"none\" stroke=\"#444\"/>\n";
  std::vector<std::pair<double, std::string>> x_ticks = chart.x_ticks;
  if (x_ticks.empty())
    for (const double v : ticks(x_range, 5)) x_ticks.emplace_back(v, num(v));
  for (const auto& [v, label] : x_ticks) {
    const double x = x_range.at(v, left, left + plot_w);
    svg += "<line x1=\"" + num(x) + "\" y1=\"" + num(top) + "\" x2=\"" + num(x) + "\" y2=\"" + num(top + plot_h) +
           "\" stroke=\"#e4e4e4\"/>\n";
    svg += text_element(x, top + plot_h + 16, label, "text-anchor=\"middle\"");
  }
  for (const double v : ticks(chart.left_span.empty() ? left_range : left_data, 5)) {
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
  for (size_t k = 0; k < all.size(); ++k) {
    const Range& y_range = k < chart.left.size() ? left_range : right_range;
    svg += series_svg(all[k], {.x = x_range, .y = y_range, .left = left, .top = top, .width = plot_w, .height = plot_h});
    const Series& s = all[k];
    const double baseline = 43 + legend[k].row * legend_row;
    svg += "<rect x=\"" + num(legend[k].x) + "\" y=\"" + num(baseline - 5) + "\" width=\"12\" height=\"3\" fill=\"" + s.colour + "\"/>\n";
    svg += text_element(legend[k].x + 16, baseline, s.name);
  }
  return svg + "</svg>\n";
}

}  // namespace ag::interp
