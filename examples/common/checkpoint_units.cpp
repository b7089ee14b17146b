// char_lm checkpoints' units and run directories (examples/common/checkpoint.h,
// the top of the file): writing a unit in one rename, its manifest, finding the
// newest complete one, the run's history, what a command may write over.
#include "examples/common/checkpoint.h"

#include <fcntl.h>
#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <limits>
#include <map>
#include <optional>
#include <nlohmann/json.hpp>

#include "core/autograd.h"
#include "core/options.h"
#include "core/safetensors.h"

namespace ag::char_lm {

// --- units -------------------------------------------------------------------------------

namespace {
namespace fs = std::filesystem;

constexpr const char* kUnitFiles[] = {"model.safetensors", "train_state.safetensors"};

// FNV-1a, 64 bits: not cryptographic, but any torn or mixed-up write changes it.
std::string checksum(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  AG_CHECK(in, "checkpoint: cannot read '" << path << "'");
  uint64_t h = 0xcbf29ce484222325ull;
  char buffer[1 << 16];
  while (in.read(buffer, sizeof buffer) || in.gcount() > 0)
    for (std::streamsize i = 0; i < in.gcount(); ++i) h = (h ^ static_cast<unsigned char>(buffer[i])) * 0x100000001b3ull;
  char text[17];
  std::snprintf(text, sizeof text, "%016llx", static_cast<unsigned long long>(h));
  return text;
}

void fsync_path(const std::string& path) {
  const int fd = ::open(path.c_str(), O_RDONLY);
  AG_CHECK(fd >= 0, "checkpoint: cannot open '" << path << "' to flush it");
  const int status = ::fsync(fd);
  ::close(fd);
  AG_CHECK(status == 0, "checkpoint: flushing '" << path << "' failed");
}

// A test hook, for killing the writer at each step of a save: with
// ATTOGRAD_CRASH_AT_WRITE=k in the environment the process dies (no cleanup, as
// from kill -9) at the k-th boundary it reaches, counting from 1.
void write_boundary() {
  static const long crash_at = [] {
    const char* v = std::getenv("ATTOGRAD_CRASH_AT_WRITE");
    return v ? std::atol(v) : 0L;
  }();
  static long reached = 0;
  if (crash_at > 0 && ++reached == crash_at) std::_Exit(86);
}

// The unit's manifest, or null if it is missing, unreadable, or does not
// match the files (then `why` says how).
std::optional<nlohmann::json> verified_manifest(const std::string& unit, std::string& why) {
  std::ifstream in(unit + "/manifest.json");
  if (!in) {
    why = "no manifest.json";
    return std::nullopt;
  }
  nlohmann::json manifest;
  try {
    manifest = nlohmann::json::parse(in);
    for (const char* name : kUnitFiles) {
      const std::string path = unit + "/" + name;
      const nlohmann::json& entry = manifest.at("files").at(name);
      if (!fs::exists(path) || fs::file_size(path) != entry.at("bytes").get<uint64_t>() ||
          checksum(path) != entry.at("fnv1a64").get<std::string>()) {
        why = std::string(name) + " does not match the manifest";
        return std::nullopt;
      }
    }
    manifest.at("iter").get<int64_t>();
  } catch (const std::exception& e) {
    why = std::string("bad manifest.json: ") + e.what();
    return std::nullopt;
  }
  return manifest;
}

// The run's units, oldest first (by name: the iteration, zero-padded).
std::vector<std::string> units_of(const std::string& run_dir) {
  std::vector<std::string> units;
  std::error_code error;
  for (const fs::directory_entry& e : fs::directory_iterator(run_dir, error))
    if (e.is_directory() && !e.is_symlink() && e.path().filename().string().rfind("ckpt-", 0) == 0)
      units.push_back(e.path().string());
  std::sort(units.begin(), units.end());
  return units;
}
}  // namespace

std::string unit_name(int64_t iter) {
  char name[32];
  std::snprintf(name, sizeof name, "ckpt-%08lld", static_cast<long long>(iter));
  return name;
}

RunHistory run_history(const std::string& run_dir) {
  RunHistory history;
  for (const std::string& unit : units_of(run_dir)) {
    std::string why;
    if (const auto manifest = verified_manifest(unit, why))
      history.units.push_back({unit, manifest->at("iter").get<int64_t>(), manifest->value("val_loss", 0.0)});
  }
  const fs::path best = fs::path(run_dir) / "best";
  if (fs::is_symlink(best)) history.best = (fs::path(run_dir) / fs::read_symlink(best)).string();
  return history;
}

bool holds_run(const std::string& dir) { return fs::exists(model_path(dir)) || !units_of(dir).empty(); }

void check_output_directory(const std::string& command, const std::string& dir, OutputKind kind, bool overwrite,
                            const std::string& other_choices) {
  if (overwrite) return;
  std::error_code error;
  const bool taken = kind == OutputKind::Run ? holds_run(dir) : fs::exists(dir) && !fs::is_empty(dir, error);
  AG_CHECK(!taken, command << ": '" << dir << "' holds " << (kind == OutputKind::Run ? "a run" : "files")
                           << " already; pass " << other_choices << "--overwrite to replace it, or another --out");
}

void clear_run(const std::string& dir) {
  for (const fs::directory_entry& e : fs::directory_iterator(dir)) {
    const std::string name = e.path().filename().string();
    if (name.starts_with("ckpt-") || name == "best" || name == "model.safetensors" ||
        name == "train_state.safetensors" || name == "log.csv" || name == "loss.svg")
      fs::remove_all(e.path());
  }
}

void remove_stale_temporaries(const std::string& run_dir) {
  std::error_code error;
  for (const fs::directory_entry& e : fs::directory_iterator(run_dir, error))
    if (e.path().filename().string().find(".tmp-") != std::string::npos) fs::remove_all(e.path(), error);
}

void save_checkpoint(const std::string& run_dir, int64_t iter, double val_loss, const nn::GPT& model,
                     const text::Tokenizer& tokenizer, const TrainState& state, const TrainConfig& config,
                     const optim::Optimizer& optimizer, int64_t keep) {
  const std::string name = unit_name(iter), final_dir = run_dir + "/" + name;
  const std::string tmp = run_dir + "/." + name + ".tmp-" + std::to_string(getpid());
  fs::remove_all(tmp);
  fs::create_directories(tmp);
  write_boundary();
  save_model(model_path(tmp), model, tokenizer, iter);
  write_boundary();
  save_train_state(train_state_path(tmp), state, config, optimizer);
  write_boundary();
  nlohmann::json manifest = {{"iter", iter}, {"val_loss", val_loss}, {"files", nlohmann::json::object()}};
  for (const char* file : kUnitFiles)
    manifest["files"][file] = {{"bytes", fs::file_size(tmp + "/" + file)}, {"fnv1a64", checksum(tmp + "/" + file)}};
  {
    std::ofstream out(tmp + "/manifest.json");
    out << manifest.dump(2) << "\n";
    AG_CHECK(out.flush(), "checkpoint: writing '" << tmp << "/manifest.json' failed");
  }
  fsync_path(tmp + "/manifest.json");
  fsync_path(tmp);
  write_boundary();
  // The one visible change: the complete unit appears under its name (a unit of
  // the same iteration, from a run resumed there, is replaced).
  fs::remove_all(final_dir);
  fs::rename(tmp, final_dir);
  fsync_path(run_dir);
  write_boundary();

  // best → this unit, if its validation loss is the lowest: a new link renamed over the old.
  const std::string best = run_dir + "/best";
  std::string why;
  const auto best_manifest = fs::exists(best) ? verified_manifest(best, why) : std::nullopt;
  if (!best_manifest || val_loss < best_manifest->at("val_loss").get<double>()) {
    const std::string link = run_dir + "/.best.tmp-" + std::to_string(getpid());
    fs::remove(link);
    fs::create_directory_symlink(name, link);
    fs::rename(link, best);
    fsync_path(run_dir);
  }
  write_boundary();
  // Keep the newest `keep` units, and the best.
  const std::string best_target = fs::is_symlink(best) ? fs::read_symlink(best).string() : "";
  std::vector<std::string> units = units_of(run_dir);
  for (size_t i = 0; i + static_cast<size_t>(keep) < units.size(); ++i)
    if (fs::path(units[i]).filename().string() != best_target) fs::remove_all(units[i]);
  write_boundary();
}

std::string find_checkpoint(const std::string& dir, std::vector<std::string>* passed_over) {
  AG_CHECK(fs::exists(dir), "checkpoint: '" << dir << "' does not exist");
  AG_CHECK(fs::is_directory(dir), "checkpoint: '" << dir << "' is not a directory");
  if (fs::exists(model_path(dir))) return dir;  // a unit, or a run from before units
  std::vector<std::string> units = units_of(dir);
  for (auto it = units.rbegin(); it != units.rend(); ++it) {
    std::string why;
    if (verified_manifest(*it, why)) return *it;
    if (passed_over) passed_over->push_back(*it + " (" + why + ")");
  }
  throw Error("checkpoint: '" + dir + "' holds no complete checkpoint (no ckpt-*/ whose files match its manifest, "
              "no model.safetensors)");
}

}  // namespace ag::char_lm
