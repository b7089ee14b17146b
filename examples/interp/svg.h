// Pictures for people, written by hand as SVG text (no plotting library): the
// attention heatmaps and the loss curves that char_lm's report inlines and
// `char_lm attention` / `train` / `compare` write as files, and the pieces they are
// made of, which other pictures reuse (graph's node pictures, examples/graph/picture.h). Each function returns
// one self-contained <svg> element that a browser draws as it is.
#pragma once
#include <cstdint>
#include <functional>
#include <string>
#include <vector>

namespace ag::interp {

// Text made safe inside XML (& < > " ').
std::string escape_xml(const std::string& text);
// A character as a label: a space as ␣, a newline as ↵, a tab as ⇥ (they would be invisible).
std::string visible_char(const std::string& utf8_char);

// The smallest font size (px) of the pictures' text, drawn at their own size:
// the report shows them unscaled when they are no wider than its column.
inline constexpr double kMinFontSize = 11;

// A number for an attribute: short (%.6g), and never in a locale's format.
std::string svg_number(double v);
// A label's number: three significant digits, so a scale reads 0, 0.25, 0.5 or 0.107, 0.214.
std::string short_number(double v);
// The weights' colour: white (w = 0) to dark blue (w = 1), linear in RGB; w is clamped to [0, 1].
std::string weight_colour(double w);
// A line of text's width at `font_size` px, from above: 0.6 em per character is
// a monospace font's advance and more than a sans-serif font's average.
double text_width(const std::string& utf8, double font_size);
// <text> at (x, y) with the text escaped and `attributes` (e.g. text-anchor="middle") as given.
std::string text_element(double x, double y, const std::string& text, const std::string& attributes = "");
// The ramp weight_colour draws, 0 … full_scale: a bar `width` px wide and kColourScaleHeight
// high at (x, y), its gradient defined as `ramp_id` (unique in the page), five numbers under it.
inline constexpr double kColourScaleHeight = 10;
std::string colour_scale_svg(double x, double y, double width, double full_scale, const std::string& ramp_id);

// One T×T panel of weights in [0, 1]: values[i·T + j] is row i (the query
// position), column j (the key position).
struct Heatmap {
  std::string title;
  std::vector<double> values;  // [T·T], row-major
  double full_scale = 1.0;     // the weight drawn darkest (values above it too); the same for every panel of a grid
};

// Panels side by side, as many to a row as fit in `max_width` (at least one),
// rows and columns labelled with `labels` (T of them). A cell (i, j) of panel p with
// visible(p, i, j) false is masked (each head may have a mask of its own: sparse
// random blocks), drawn hatched grey (class "masked"): never mistaken for a weight of 0,
// which is white. Visible cells (class "cell") go from white (0) to dark blue
// (full_scale), linearly; a colour scale under the title (group "colour-scale")
// labels that ramp with its numbers and shows the hatch. Text is at least
// kMinFontSize px. `id` names the SVG's hatch pattern and gradient, so several SVGs fit in one page.
std::string heatmap_grid_svg(const std::string& title, const std::vector<Heatmap>& panels,
                             const std::vector<std::string>& labels,
                             const std::function<bool(size_t panel, int64_t i, int64_t j)>& visible, double max_width,
                             const std::string& id);

struct Series {
  std::string name, colour;  // colour: any SVG colour ("#1f77b4")
  std::vector<double> x, y;
  bool markers = false;  // a dot at each point (sparse series such as evaluations)
  std::vector<double> low = {}, high = {};  // a band from low to high at each x (a spread over seeds); empty: none
};

// A fixed span of an axis, and whether the data's points must stay off the plot's frame.
struct AxisSpan {
  double low = 0, high = 1;
};

// A line chart: `left` against the left axis, `right` (may be empty) against a
// second axis on the right, sharing x. Each axis spans its data, ticked at round
// numbers (1, 2 or 5 × 10^k apart), unless left_span fixes the left one (accuracy: 0 to 1)
// or x_ticks names the x axis's ticks (value, label). With inset, every axis is widened
// by 5 % of its span at both ends, so that no point lies on the frame. The legend, a
// swatch and the name of each series, sits between the title and the plot, wrapped
// into as many rows as it needs.
struct LineChart {
  std::string title, x_label, left_label, right_label;
  std::vector<Series> left, right;
  std::vector<AxisSpan> left_span = {};  // one or none
  std::vector<std::pair<double, std::string>> x_ticks = {};
  bool inset = false;
};
std::string line_chart_svg(const LineChart& chart);

}  // namespace ag::interp
