// Pictures for people, written by hand as SVG text (no plotting library): the
// attention heatmaps and the loss curves that char_lm's report inlines and
// `char_lm attention` / `char_lm train` write as files. Each function returns
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

// One T×T panel of weights in [0, 1]: values[i·T + j] is row i (the query
// position), column j (the key position).
struct Heatmap {
  std::string title;
  std::vector<double> values;  // [T·T], row-major
  double full_scale = 1.0;     // the weight drawn darkest (values above it too)
};

// Panels side by side (`columns` per row of the grid), rows and columns
// labelled with `labels` (T of them). A cell (i, j) of panel p with
// visible(p, i, j) false is masked (each head may have a mask of its own: sparse
// random blocks), drawn hatched grey (class "masked"): never mistaken for a weight of 0,
// which is white. Visible cells (class "cell") go from white (0) to dark blue
// (the panel's full_scale), linearly. `id` names the SVG's hatch pattern, so several SVGs fit in one page.
std::string heatmap_grid_svg(const std::string& title, const std::vector<Heatmap>& panels,
                             const std::vector<std::string>& labels,
                             const std::function<bool(size_t panel, int64_t i, int64_t j)>& visible, int64_t columns,
                             const std::string& id);

struct Series {
  std::string name, colour;  // colour: any SVG colour ("#1f77b4")
  std::vector<double> x, y;
  bool markers = false;  // a dot at each point (sparse series such as evaluations)
};

// A line chart: `left` against the left axis, `right` (may be empty) against a
// second axis on the right, sharing x. Each axis spans its data, ticked at round
// numbers (1, 2 or 5 × 10^k apart).
struct LineChart {
  std::string title, x_label, left_label, right_label;
  std::vector<Series> left, right;
};
std::string line_chart_svg(const LineChart& chart);

}  // namespace ag::interp
