// The lab's pictures and its page, from results.csv's rows and the cells'
// curves: accuracy against sequence length per mixer;
// accuracy against the decoder's state size (the recall–memory trade-off);
// training loss against wall-clock time; ms/iter and peak memory against T;
// for passkey cells, accuracy by the needle's depth and the length; where the
// heads vary, the score against their number; where the widths vary, accuracy against
// the width at each length (Zoology's figure 2), each beside its table. Accuracy axes span
// 0 to 1, no point lies on a frame, seeds of a cell are drawn as their mean and a band.
// Each is SVG (examples/interp/svg.h), written to DIR and inlined in one self-contained
// DIR/lab_report.html.
#pragma once
#include <string>
#include <vector>

#include "examples/lab/cell.h"
#include "examples/interp/svg.h"
#include "examples/lab/grid.h"

namespace ag::lab {

struct Curve {
  std::string cell;  // its label
  std::vector<CurvePoint> points;
};
// An x axis of one value (one length, one width) drawn as what it is: each series' points moved to
// x = the series' index, as points, with a tick naming the series, and " (one value: a point per
// series)" added to x_label. Returns those ticks; none, and nothing changed, where x takes several values.
std::vector<std::pair<double, std::string>> points_per_series(std::vector<interp::Series>& series, std::string& x_label);

// A cell's .curve.csv (seconds,step,loss,accuracy).
std::vector<CurvePoint> parse_curve(const std::string& text);

// Writes accuracy_vs_length.svg, accuracy_vs_state.svg (accuracy_vs_state_T<T>.svg per length
// where lengths vary), accuracy_vs_width_T<T>.svg (where widths vary), loss_vs_time.svg,
// cost_vs_length.svg, passkey_by_depth.svg (with passkey cells),
// accuracy_vs_heads.svg and loss_vs_heads.svg (where n_head varies; the second
// for text cells), accuracy_vs_layers.svg (where n_layer varies) and lab_report.html to `dir`. `command` is the lab's
// command line, shown on the page.
void write_report(const std::string& dir, const std::vector<Row>& rows, const std::vector<Curve>& curves,
                  const std::string& command);

}  // namespace ag::lab
