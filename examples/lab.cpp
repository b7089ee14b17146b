// lab: attention functions trained side by side on tasks where they differ
// (multi-query associative recall, passkey retrieval, selective copying) and
// on text, over a grid of sizes; one row per cell in DIR/results.csv, the
// plots and DIR/lab_report.html (docs/lab.md).
//
//   lab --task mqar --block-size 64,128,256 --pairs 4 --n-embd 64,128 --mixers softmax,linear:elu1,ssd --out DIR
//   lab --preset quick | recall | heads | memory | zoology | zoology-cpu [--out DIR] [--jobs N]
//
// Every option of the model, the training step and the task takes a comma
// list, named as `char_lm train` names it (examples/lab/grid.h); --lr's list
// is each cell's learning-rate sweep. The cells live in examples/lab/, a library
// the tests drive too; this file only reads the options.
#include <algorithm>
#include <cstdio>
#include <deque>
#include <string>
#include <vector>

#include "dist/communicator.h"
#include "examples/common/command_line.h"
#include "examples/lab/lab_run.h"

using namespace ag;

namespace {
// The lab's model and training defaults: Zoology's MQAR models are two layers
// of width 64 and up; a batch of 64 sequences as its training.
lab::Cell lab_defaults() {
  lab::Cell cell;
  cell.model.block_size = 64;
  cell.model.n_layer = 2;
  cell.model.n_embd = 64;
  cell.model.n_head = 2;
  cell.optim.batch_size = 64;
  return cell;
}
constexpr const char* kDefaultSweep = "0.001,0.003";

// Options the lab sets itself, so it takes no flag for them: the attention
// function comes from --mixers (one place, not two), and each run's schedule
// from --max-iters and its rate (examples/lab/cell.h).
bool derived_by_the_lab(const std::string& name) {
  return name == "attention" || name == "warmup_iters" || name == "lr_decay_iters" || name == "min_lr";
}

// A grid option given on the command line: its name and its list.
struct ListFlag {
  std::string name;
  const std::string* text;
  cli::Option option;
};

// Sets option `name` of `options` (the lab's or the process's) from a preset's
// text, unless the command line gave it. Returns whether `options` has it.
template <class Options>
bool set_preset_option(Options& options, const cli::Command& command, const std::string& name, const std::string& text) {
  bool found = false;
  Options::for_each_option(options, [&](auto& value, const OptionInfo& info) {
    if (info.name != name) return;
    found = true;
    if (!command.given(name)) value = option_from_string<std::decay_t<decltype(value)>>(text, info.flag());
  });
  return found;
}
}  // namespace

int main(int argc, char** argv) {
  cli::Program program("Attention functions trained side by side on recall tasks and text: a grid of cells, each "
                       "trained at the best of a small learning-rate sweep, with results.csv, plots and lab_report.html.",
                       "lab");
  lab::LabSpec spec;
  spec.defaults = lab_defaults();
  cli::ProcessOptions process;
  cli::Command& command = program.command();
  command.bind(spec.options).bind(process);
  std::deque<std::string> texts;
  std::vector<ListFlag> lists;
  lab::Cell::for_each_table(spec.defaults, [&](auto& table) {
    std::decay_t<decltype(table)>::for_each_option(table, [&](const auto& value, const OptionInfo& info) {
      if (info.kind == OptionKind::Derived || derived_by_the_lab(info.name)) return;
      const bool sweep = std::string(info.name) == "lr";
      std::string& text = texts.emplace_back();
      const cli::Option option = command.option(info.flag(), text, std::string(info.help) +
                                                  (sweep ? " (a comma list: the sweep, each cell keeping its best)"
                                                         : " (a comma list: a cell for each)"))
                                     .type_name("LIST")
                                     .default_text(sweep ? kDefaultSweep : option_to_string(value))
                                     .take_last();
      lists.push_back({info.name, &text, option});
    });
  });
  if (const int code = program.parse_and_apply(argc, argv, process); code >= 0) return code;
  try {
    for (int i = 0; i < argc; ++i) spec.command += (i ? " " : "") + std::string(i ? argv[i] : "lab");
    spec.arguments.assign(argv + 1, argv + argc);
    lab::Preset preset{.grids = {{}}, .lab_options = {}};
    if (!spec.options.preset.empty()) preset = lab::preset(spec.options.preset);
    std::string sweep = kDefaultSweep;
    for (const auto& [name, text] : preset.lab_options) {
      if (name == "lr") sweep = text;  // the command line's --lr, read next, wins
      else if (!set_preset_option(spec.options, command, name, text))
        AG_CHECK(set_preset_option(process, command, name, text), "preset option " << name << " is no option of the lab");
    }
    process.apply();
    std::vector<std::pair<std::string, std::string>> given;
    for (const ListFlag& flag : lists)
      if (flag.option.given()) {
        if (flag.name == "lr") sweep = *flag.text;
        else given.emplace_back(flag.name, *flag.text);
      }
    std::vector<double> lrs;
    for (const std::string& lr : lab::split_list(sweep)) lrs.push_back(option_from_string<double>(lr, "--lr"));
    for (auto axes : preset.grids) {
      for (const auto& option : given) {  // not a structured binding: clang 14's lambdas cannot capture one
        const auto same = std::find_if(axes.begin(), axes.end(), [&](const auto& axis) { return axis.first == option.first; });
        if (same != axes.end()) same->second = option.second;
        else axes.push_back(option);
      }
      lab::Grid grid{.axes = {}, .mixers = lab::split_list(spec.options.mixers), .lrs = lrs,
                     .zipped = lab::split_list(spec.options.zip)};
      for (const auto& [name, text] : axes) grid.axes.push_back({name, lab::split_list(text)});
      spec.grids.push_back(std::move(grid));
    }
    const lab::LabSummary summary = lab::run_lab(spec);
    if (!spec.options.shard.empty() || dist::world().rank() != 0) return 0;
    std::printf("lab: %lld cells (%lld trained now, %lld finished before) in %.1f s; %s/results.csv, %s/lab_report.html\n",
                static_cast<long long>(summary.cells), static_cast<long long>(summary.trained),
                static_cast<long long>(summary.skipped), summary.seconds, spec.options.out.c_str(),
                spec.options.out.c_str());
    return 0;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "lab%s: %s\n", dist::process_label().c_str(), e.what());
    std::fflush(stderr);
    dist::end_run_on_error(1);
    return 1;
  }
}
