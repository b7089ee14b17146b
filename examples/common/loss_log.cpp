#include "examples/common/loss_log.h"

#include <fstream>
#include <sstream>

#include "core/error.h"
#include "examples/common/files.h"
#include "examples/interp/svg.h"

namespace ag {

LossLog read_loss_log(const std::string& log_csv_path) {
  std::ifstream in(log_csv_path);
  AG_CHECK(in, "cannot read '" << log_csv_path << "'");
  LossLog log;
  std::string line;
  std::getline(in, line);  // iter,kind,loss,lr,ms_per_iter
  while (std::getline(in, line)) {
    std::istringstream fields(line);
    std::string iter, kind, loss, rate;
    if (!std::getline(fields, iter, ',') || !std::getline(fields, kind, ',') || !std::getline(fields, loss, ',')) continue;
    std::getline(fields, rate, ',');
    const double x = std::stod(iter), y = std::stod(loss);
    LossLog::Curve* curve = kind == "train" ? &log.train : kind == "val" ? &log.val : kind == "batch" ? &log.batch : nullptr;
    if (!curve) continue;
    curve->iter.push_back(x);
    curve->value.push_back(y);
    if (kind == "batch" && !rate.empty()) {
      log.lr.iter.push_back(x);
      log.lr.value.push_back(std::stod(rate));
    }
  }
  return log;
}

std::string loss_chart_svg(const std::string& log_csv_path) {
  const LossLog log = read_loss_log(log_csv_path);
  const auto series = [](const LossLog::Curve& c, const std::string& name, const std::string& colour, bool markers) {
    return interp::Series{name, colour, c.iter, c.value, markers};
  };
  return interp::line_chart_svg({.title = "loss (" + log_csv_path + ")",
                                 .x_label = "iteration",
                                 .left_label = kLossAxis,
                                 .right_label = "learning rate",
                                 .left = {series(log.batch, "batch loss", "#c8c8c8", false),
                                          series(log.train, "train loss", "#1f77b4", true),
                                          series(log.val, "val loss", "#ff7f0e", true)},
                                 .right = {series(log.lr, "learning rate", "#2ca02c", false)}});
}

void write_loss_chart(const std::string& log_csv_path, const std::string& svg_path) {
  replace_file(svg_path, loss_chart_svg(log_csv_path));
}

}  // namespace ag
