// The lab's pictures and its page, from results.csv's rows and the cells'
// curves: accuracy against sequence length per mixer (Zoology's figure 2);
// accuracy against the decoder's state size (the recall–memory trade-off);
// training loss against wall-clock time; ms/iter and peak memory against T;
// for passkey cells, accuracy by the needle's depth and the length; where the
// heads vary, the score against their number. Each is SVG (examples/interp/svg.h),
// written to DIR and inlined in one self-contained DIR/lab_report.html.
#pragma once
#include <string>
#include <vector>

#include "examples/lab/cell.h"
#include "examples/lab/grid.h"

namespace ag::lab {

struct Curve {
  std::string cell;  // its label
  std::vector<CurvePoint> points;
};
// A cell's .curve.csv (seconds,step,loss,accuracy).
std::vector<CurvePoint> parse_curve(const std::string& text);

// Writes accuracy_vs_length.svg, accuracy_vs_state.svg, loss_vs_time.svg,
// cost_vs_length.svg, passkey_by_depth.svg (with passkey cells),
// accuracy_vs_heads.svg and loss_vs_heads.svg (where n_head varies; the second
// for text cells), accuracy_vs_layers.svg (where n_layer varies) and lab_report.html to `dir`. `command` is the lab's
// command line, shown on the page.
void write_report(const std::string& dir, const std::vector<Row>& rows, const std::vector<Curve>& curves,
                  const std::string& command);

}  // namespace ag::lab
