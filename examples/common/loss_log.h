// A training run's log.csv (char_lm train writes it: iter,kind,loss,lr,ms_per_iter)
// read back as curves, and its chart (char_lm train keeps RUN/loss.svg up to
// date at every evaluation; char_lm report and compare draw it too).
#pragma once
#include <string>
#include <vector>

namespace ag {

// A run's log.csv, by kind of row: each a curve of (iteration, value).
struct LossLog {
  struct Curve {
    std::vector<double> iter, value;
  };
  Curve batch, train, val;  // the loss of each training batch, and the evaluations' mean losses
  Curve lr;                 // the learning rate of each batch
};
LossLog read_loss_log(const std::string& log_csv_path);
inline constexpr const char* kLossAxis = "cross-entropy (nats per character)";

// The training and validation loss of a run's log.csv against the iteration,
// the batch loss faintly behind them, the learning rate on a second axis
// (an SVG, examples/interp/svg.h).
std::string loss_chart_svg(const std::string& log_csv_path);
// The same, written to svg_path (replace_file).
void write_loss_chart(const std::string& log_csv_path, const std::string& svg_path);

}  // namespace ag
