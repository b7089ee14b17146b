#include "examples/char_lm/compare.h"

#include <cstdio>
#include <filesystem>
#include <set>

#include "core/error.h"
#include "core/safetensors.h"
#include "examples/common/checkpoint.h"
#include "examples/common/files.h"
#include "examples/common/loss_log.h"
#include "examples/interp/svg.h"

namespace ag::char_lm {

namespace {
namespace fs = std::filesystem;

struct Run {
  std::string dir;
  Metadata options;  // dashed keys, as the training state keeps them
  LossLog log;
};

Run read_run(const std::string& dir) {
  AG_CHECK(fs::is_directory(dir), "compare: the run directory '" << dir << "' does not exist");
  const std::string log = dir + "/log.csv";
  AG_CHECK(fs::is_regular_file(log), "compare: '" << dir << "' has no log.csv (is it a directory of char_lm train?)");
  const std::string state = train_state_path(find_checkpoint(dir));
  AG_CHECK(fs::is_regular_file(state), "compare: '" << dir << "' has no " << state << " (its options)");
  return {dir, load_train_state(state).metadata, read_loss_log(log)};
}

// Each run's options that are not the same in every run, as "key=value, ...";
// a run's directory where all runs share every option.
std::vector<std::string> legend_names(const std::vector<Run>& runs) {
  std::set<std::string> keys;
  for (const Run& r : runs)
    for (const auto& entry : r.options) keys.insert(entry.first);
  const auto value_of = [](const Run& r, const std::string& key) {
    const auto found = r.options.find(key);
    return found == r.options.end() ? std::string("(unset)") : found->second.empty() ? std::string("\"\"") : found->second;
  };
  std::vector<std::string> names(runs.size());
  for (const std::string& key : keys) {
    bool differs = false;
    for (const Run& r : runs) differs = differs || value_of(r, key) != value_of(runs[0], key);
    if (!differs) continue;
    for (size_t i = 0; i < runs.size(); ++i)
      names[i] += (names[i].empty() ? "" : ", ") + key + "=" + value_of(runs[i], key);
  }
  for (size_t i = 0; i < runs.size(); ++i)
    if (names[i].empty()) names[i] = runs[i].dir;
  return names;
}
}  // namespace

std::string compare_svg(const std::vector<std::string>& run_dirs) {
  AG_CHECK(run_dirs.size() >= 2, "compare: needs at least two run directories, got " << run_dirs.size());
  std::vector<Run> runs;
  for (const std::string& dir : run_dirs) runs.push_back(read_run(dir));
  const std::vector<std::string> names = legend_names(runs);
  static const char* const palette[] = {"#1f77b4", "#ff7f0e", "#2ca02c", "#d62728", "#9467bd",
                                        "#8c564b", "#e377c2", "#7f7f7f", "#bcbd22", "#17becf"};
  std::vector<interp::Series> curves;
  for (size_t i = 0; i < runs.size(); ++i)
    curves.push_back({names[i], palette[i % std::size(palette)], runs[i].log.val.iter, runs[i].log.val.value, true});
  return interp::line_chart_svg({.title = "validation loss of " + std::to_string(runs.size()) + " runs",
                                 .x_label = "iteration",
                                 .left_label = kLossAxis,
                                 .right_label = "",
                                 .left = curves,
                                 .right = {}});
}

int run_compare(const CompareOptions& o) {
  const std::string svg = compare_svg(o.runs);
  replace_file(o.out, svg);
  std::printf("%s\n", o.out.c_str());
  return 0;
}

}  // namespace ag::char_lm
