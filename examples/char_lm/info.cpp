#include "examples/char_lm/info.h"

#include <cstdio>
#include <filesystem>
#include <sstream>

#include "core/error.h"
#include "core/threads.h"
#include "examples/common/checkpoint.h"
#include "examples/common/format.h"
#include "examples/common/program_header.h"

namespace ag::char_lm {

namespace {
namespace fs = std::filesystem;

// A table's options of the given kinds as the command line that sets them
// ("--lr 0.001 --batch-size 12"), leaving out what does not apply to `model`.
template <class Config>
std::string as_flags(const Config& config, std::initializer_list<OptionKind> kinds, const nn::GPTConfig& model) {
  std::string flags;
  Config::for_each_option(config, [&](const auto& value, const OptionInfo& info) {
    if (!has_kind(kinds, info.kind) || !model.applies(info.name)) return;
    std::string text = option_to_string(value);
    if (text.empty()) return;  // an empty head_mask: every head on
    if (text.find(' ') != std::string::npos) text = "'" + text + "'";
    flags += (flags.empty() ? "" : " ") + info.flag() + " " + text;
  });
  return flags;
}

}  // namespace

std::string checkpoint_info(const InfoOptions& o) {
  if (o.ckpt.empty()) return "runs on: cpu, " + cpu_runtime_summary() + "\n";
  const std::string unit = find_checkpoint(o.ckpt);
  const LoadedModel loaded = load_model(model_path(unit));
  const nn::GPTConfig& model = loaded.model->config();
  std::ostringstream out;
  out << "checkpoint " << unit << (loaded.iter >= 0 ? " (iteration " + std::to_string(loaded.iter) + ")" : "") << "\n";
  out << cli::header(model, Device::CPU) << "\n";
  out << "model options: " << as_flags(model, {OptionKind::Model}, model) << "\n";
  if (fs::exists(train_state_path(unit))) {
    TrainConfig run;
    read_run_options(run, load_train_state(train_state_path(unit)));
    out << "run options: " << as_flags(run.model, {OptionKind::Run, OptionKind::Setting}, model) << " "
        << as_flags(run.optim, {OptionKind::Run, OptionKind::Setting}, model) << " "
        << as_flags(run.run, {OptionKind::Run, OptionKind::Setting}, model) << "\n";
  } else {
    out << "run options: none saved (" << train_state_path(unit) << " does not exist)\n";
  }
  // A unit's run is its parent (RUN/best resolves to a unit too); a directory from
  // before units has no history.
  const fs::path resolved = fs::canonical(unit);
  if (resolved.filename().string().rfind("ckpt-", 0) != 0) return out.str();
  const RunHistory history = run_history(resolved.parent_path().string());
  out << "history: " << history.units.size() << " checkpoint(s) kept:";
  for (const Checkpointed& c : history.units) out << " iteration " << c.iter << " val " << fixed(c.val_loss) << ";";
  out << "\n";
  for (const Checkpointed& c : history.units)
    if (!history.best.empty() && fs::path(c.unit).filename() == fs::path(history.best).filename())
      out << "best: val loss " << fixed(c.val_loss) << " at iteration " << c.iter << "\n";
  return out.str();
}

}  // namespace ag::char_lm
