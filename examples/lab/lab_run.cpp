#include "examples/lab/lab_run.h"

#include <spawn.h>
#include <sys/wait.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <optional>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <set>
#include <sstream>
#include <tuple>

#include "dist/communicator.h"
#include "examples/common/files.h"
#include "examples/lab/report.h"

extern char** environ;

namespace ag::lab {

namespace fs = std::filesystem;

// Zoology's figure 2 as its code ran it (zoology/experiments/paper_configs/iclr24_zoology_figure2/configs.py,
// zoology/data/multiquery_ar.py, zoology/train.py; docs/lab.md, "The zoology preset"): MQAR at
// (T, P) = (64, 4), (128, 8), (256, 16), (512, 64), vocabulary 8192, the filler the token 0;
// 100k fixed training examples passed over 64 times in batches of 512 (T <= 128), 256 (T = 256)
// or 128 (T = 512), no warm-up, the cosine decay to 0, a run stopped once its held-out accuracy
// passes 0.99; 3000 held-out examples; 2 layers of width 64 … 512, one head, no MLP (the state
// mixer the identity), dropout 0.1, learned positions for attention alone; the best of four
// learning rates log-spaced from 1e-4 to 1e-2. Zoology's mixers are its own; these stand for them:
// softmax for its attention, linear:elu1 for Based's linear feature map, ssd for Mamba, s4 for H3's
// and Hyena's long convolutions, the LSTM for the recurrent baseline, a 16-key window for sliding
// attention. Three seeds, the first seed's whole figure before the second's (a run cut short keeps
// whole figures).
//
// zoology-cpu is the same experiment cut to an hour on 2 cores: T = 64 alone, widths 64 and 128, a
// smaller fixed set, fewer epochs and batches of 64 (docs/lab.md says what each costs).
namespace {
constexpr const char* kZoologyCpuExamples = "5000";
constexpr const char* kZoologyCpuEpochs = "12";
Preset zoology_preset(bool cpu) {
  const char* const attention_only_positions =
      "softmax,linear:elu1:position=none,ssd:position=none,softmax:window=16,s4:position=none,lstm:position=none";
  Preset p{.grids = {}, .lab_options = {{"mixers", attention_only_positions},
                                        {"lr", "0.0001,0.00046415888336127773,0.0021544346900318843,0.01"},
                                        {"eval_interval", "200"}, {"jobs", cpu ? "2" : "4"}, {"threads", "1"}}};
  const std::vector<std::pair<std::string, std::string>> shared = {
      {"task", "mqar"}, {"vocab", "8192"}, {"random_filler", "false"}, {"n_layer", "2"}, {"n_head", "1"},
      {"state_mixer", "identity"}, {"dropout", "0.1"}, {"warmup", "0"}, {"final_lr", "0"},
      {"stop_accuracy", "0.99"}, {"eval_examples", cpu ? "1000" : "3000"}};
  for (const char* seed : {"1337", "1338", "1339"}) {
    if (cpu) {
      std::vector<std::pair<std::string, std::string>> grid = {
          {"seed", seed}, {"block_size", "64"}, {"pairs", "4"}, {"n_embd", "64,128"}, {"batch_size", "64"},
          {"train_examples", kZoologyCpuExamples}, {"epochs", kZoologyCpuEpochs}};
      grid.insert(grid.end(), shared.begin(), shared.end());
      p.grids.push_back(std::move(grid));
      break;  // one seed: an hour holds no more
    }
    for (const auto& [T, pairs, batch] : {std::tuple{"64", "4", "512"}, {"128", "8", "512"}, {"256", "16", "256"}, {"512", "64", "128"}}) {
      std::vector<std::pair<std::string, std::string>> grid = {
          {"seed", seed}, {"block_size", T}, {"pairs", pairs}, {"n_embd", "64,128,256,512"}, {"batch_size", batch},
          {"train_examples", "100000"}, {"epochs", "64"}};
      grid.insert(grid.end(), shared.begin(), shared.end());
      p.grids.push_back(std::move(grid));
    }
  }
  return p;
}
}  // namespace

// The quick preset's vocabulary is 256, not the default 1024: with fewer keys
// to learn, softmax attention leaves MQAR's plateau (predicting one of the
// values it has seen: accuracy 1/P) within its budget; its long warmup (a
// thousand steps) is the preset's because the runs that left did so with
// one (with a tenth, runs of 2000 and 3000 steps stayed at 1/P; one seed
// each, the warmup not isolated as the cause: docs/lab.md). Its three cells train at once, a
// process each.
Preset preset(const std::string& name) {
  const std::string recall_mixers = "softmax,softmax:window=16,linear:elu1,linear:favor,ssd";
  if (name == "quick")
    return {.grids = {{{"task", "mqar"}, {"block_size", "64"}, {"pairs", "4"}, {"vocab", "256"}, {"n_embd", "64"},
                       {"n_layer", "2"}, {"n_head", "2"}, {"max_iters", "4000"}, {"warmup", "0.25"},
                       {"eval_examples", "1000"}}},
            .lab_options = {{"mixers", "softmax,linear:elu1,ssd"}, {"lr", "0.003"}, {"eval_interval", "500"},
                            {"jobs", "3"}, {"threads", "1"}}};
  if (name == "recall") {
    // Zoology's figure 2: the pairs grow with the length. The step count is what
    // softmax attention was measured to need to leave MQAR's plateau at this
    // vocabulary (docs/lab.md, "The recall preset").
    Preset p{.grids = {}, .lab_options = {{"mixers", recall_mixers}, {"lr", "0.001,0.003"}, {"eval_interval", "500"},
                                          {"jobs", "2"}, {"threads", "1"}}};
    for (const auto& [T, pairs] : {std::pair{"64", "4"}, {"128", "8"}, {"256", "16"}, {"512", "64"}})
      p.grids.push_back({{"task", "mqar"}, {"block_size", T}, {"pairs", pairs}, {"n_embd", "64,128"}, {"n_layer", "2"},
                         {"n_head", "2"}, {"max_iters", "15000"}, {"warmup", "0.2"}, {"eval_examples", "1000"}});
    return p;
  }
  if (name == "heads")
    return {.grids = {{{"task", "mqar"}, {"block_size", "64"}, {"pairs", "4"}, {"vocab", "256"}, {"n_embd", "64"},
                       {"n_layer", "2"}, {"n_head", "1,2,4,8"}, {"max_iters", "5000"}, {"warmup", "0.2"},
                       {"eval_examples", "1000"}},
                      {{"task", "text"}, {"block_size", "64"}, {"n_embd", "64"}, {"n_layer", "2"}, {"n_head", "1,2,4,8"},
                       {"max_iters", "5000"}, {"warmup", "0.2"}, {"eval_examples", "1000"}}},
            .lab_options = {{"mixers", "softmax,softmax:gqa=1"}, {"lr", "0.003"}, {"eval_interval", "500"},
                            {"jobs", "2"}, {"threads", "1"}}};
  if (name == "memory") {
    // The seeds' question, "where is the memory": attention keeps every key and value, the recurrent
    // mixers a state of fixed size. Each at about 120k parameters (docs/lab.md, "The memory preset"):
    // width 64 but the LSTM's 56 (8C² per layer where attention's projections have 4C²); two
    // lengths of MQAR and of selective copying, two seeds, on a budget of minutes on one core.
    Preset p{.grids = {}, .lab_options = {{"mixers", "softmax,softmax:window=8,linear:elu1,ssd,s4,lstm:n-embd=56"},
                                          {"lr", "0.003"}, {"eval_interval", "250"}, {"jobs", "1"}, {"threads", "1"}}};
    const std::vector<std::pair<std::string, std::string>> shared = {
        {"n_embd", "64"}, {"n_layer", "2"}, {"n_head", "2"}, {"batch_size", "32"}, {"seed", "1337,1338"},
        {"max_iters", "1000"}, {"warmup", "0.3"}, {"eval_examples", "500"}};
    for (const auto& [T, pairs, copied] : {std::tuple{"32", "2", "4"}, {"64", "4", "8"}}) {
      p.grids.push_back({{"task", "mqar"}, {"block_size", T}, {"pairs", pairs}, {"vocab", "128"}});
      p.grids.push_back({{"task", "copy"}, {"block_size", T}, {"copy_tokens", copied}, {"vocab", "16"}});
    }
    for (auto& grid : p.grids) grid.insert(grid.end(), shared.begin(), shared.end());
    return p;
  }
  if (name == "graphs") {
    // Issue 51's depth question: per graph task, the same transformer with full attention (the
    // edges read as tokens) and with the graph's adjacency as its mask (a message-passing
    // network), at 1 to 6 layers; graphs of 12 to 16 nodes, pairs up to 5 hops apart
    // (docs/graphs.md, "Graph reasoning in the lab"). Twenty-four cells, minutes each on one core.
    Preset p{.grids = {}, .lab_options = {{"mixers", "softmax"}, {"lr", "0.003"}, {"eval_interval", "250"},
                                          {"jobs", "2"}, {"threads", "1"}}};
    for (const char* task : {"connectivity", "shortest-path"})
      p.grids.push_back({{"task", task}, {"graph_mask", "full,adjacency"}, {"n_layer", "1,2,3,4,5,6"}, {"block_size", "64"},
                         {"nodes", "16"}, {"min_nodes", "12"}, {"max_distance", "5"}, {"n_embd", "64"}, {"n_head", "2"},
                         {"batch_size", "32"}, {"max_iters", "1200"}, {"warmup", "0.1"}, {"eval_examples", "1000"}});
    return p;
  }
  if (name == "zoology" || name == "zoology-cpu") return zoology_preset(name == "zoology-cpu");
  throw Error("--preset '" + name + "' is not one of quick, recall, heads, memory, graphs, zoology, zoology-cpu");
}

std::vector<Cell> lab_cells(const LabSpec& spec) {
  std::vector<Cell> cells;
  std::set<std::string> ids;
  for (const Grid& grid : spec.grids)
    for (const Cell& cell : expand(grid, spec.defaults))
      if (ids.insert(cell.id()).second) cells.push_back(cell);
  return cells;
}

namespace {
using Clock = std::chrono::steady_clock;

std::string duration_text(double seconds) {
  char buffer[32];
  const int s = static_cast<int>(seconds);
  std::snprintf(buffer, sizeof buffer, "%dm%02ds", s / 60, s % 60);
  return buffer;
}

std::string read_file(const std::string& path) {
  std::ifstream in(path);
  std::stringstream text;
  text << in.rdbuf();
  return text.str();
}

struct Shard {
  int64_t index = 0, count = 1;
};

Shard parse_shard(const std::string& text) {
  const size_t slash = text.find('/');
  AG_CHECK(slash != std::string::npos, "--shard '" << text << "' is not i/N");
  const Shard s{option_from_string<int64_t>(text.substr(0, slash), "--shard"),
                option_from_string<int64_t>(text.substr(slash + 1), "--shard")};
  AG_CHECK(s.count >= 1 && s.index >= 0 && s.index < s.count, "--shard '" << text << "' is not i/N with 0 <= i < N");
  return s;
}

// Starts `jobs` processes of this program, each with --shard i/jobs, and waits for them.
void run_jobs(const LabSpec& spec) {
  std::vector<pid_t> children;
  for (int64_t i = 0; i < spec.options.jobs; ++i) {
    std::vector<std::string> args{"lab"};  // its name in ps; the program itself is /proc/self/exe
    args.insert(args.end(), spec.arguments.begin(), spec.arguments.end());
    args.insert(args.end(), {"--shard", std::to_string(i) + "/" + std::to_string(spec.options.jobs)});
    std::vector<char*> argv;
    for (std::string& a : args) argv.push_back(a.data());
    argv.push_back(nullptr);
    pid_t pid = 0;
    AG_CHECK(posix_spawn(&pid, "/proc/self/exe", nullptr, nullptr, argv.data(), environ) == 0,
             "--jobs: cannot start a process of the lab");
    children.push_back(pid);
  }
  int failed = 0;
  for (const pid_t pid : children) {
    int status = 0;
    waitpid(pid, &status, 0);
    failed += !(WIFEXITED(status) && WEXITSTATUS(status) == 0);
  }
  AG_CHECK(failed == 0, "--jobs: " << failed << " of the lab's " << spec.options.jobs << " processes failed");
}

// This process's cells: trains each not finished yet, writing its row and curve under DIR/cells.
void run_share(const LabSpec& spec, const std::vector<Cell>& cells, const Shard& shard, const TextData* text,
               LabSummary& summary) {
  const LabOptions& o = spec.options;
  const RunSettings settings{o.eval_interval, o.device, o.out + "/cells"};
  const std::string prefix =
      shard.count > 1 ? std::string("[").append(std::to_string(shard.index)).append("/").append(std::to_string(shard.count)).append("] ")
                      : std::string();
  std::vector<size_t> mine;
  for (size_t i = 0; i < cells.size(); ++i) {
    if (static_cast<int64_t>(i) % shard.count != shard.index) continue;
    if (fs::exists(o.out + "/cells/" + cells[i].id() + ".csv")) ++summary.skipped;
    else mine.push_back(i);
  }
  if (!spec.quiet && summary.skipped > 0)
    std::printf("%sresuming: %lld finished cells skipped\n", prefix.c_str(), static_cast<long long>(summary.skipped));
  const auto start = Clock::now();
  for (size_t n = 0; n < mine.size(); ++n) {
    const Cell& cell = cells[mine[n]];
    const double runs = static_cast<double>(cell.lrs.size());
    size_t run = 0;
    double last_lr = cell.lrs.front();
    const CellResult result = run_cell(cell, settings, text, [&](double lr, int64_t step, double loss, double accuracy) {
      if (lr != last_lr) ++run, last_lr = lr;
      if (spec.quiet || (step % o.eval_interval != 0 && step != 1)) return;
      const double done = static_cast<double>(n) + (static_cast<double>(run) + static_cast<double>(step) / static_cast<double>(run_steps(cell))) / runs;
      const double elapsed = std::chrono::duration<double>(Clock::now() - start).count();
      char held_out[32] = "-";
      if (!std::isnan(accuracy)) std::snprintf(held_out, sizeof held_out, "%.3f", accuracy);
      std::printf("%scell %zu/%zu %s | lr %g step %lld/%lld loss %.4f held-out acc %s | %zu of %zu cells here done | ETA %s\n",
                  prefix.c_str(), mine[n] + 1, cells.size(), cell.label().c_str(), lr, static_cast<long long>(step),
                  static_cast<long long>(run_steps(cell)), loss, held_out, n, mine.size(),
                  duration_text(elapsed / done * (static_cast<double>(mine.size()) - done)).c_str());
      std::fflush(stdout);
    });
    const std::string base = o.out + "/cells/" + cell.id();
    replace_file(base + ".curve.csv", curve_csv(result.curve));
    replace_file(base + ".csv", csv_text({result.row}));  // last: its presence marks the cell finished
    ++summary.trained;
    if (!spec.quiet) {
      const Row& r = result.row;
      std::printf("%scell %zu/%zu %s: %s", prefix.c_str(), mine[n] + 1, cells.size(), cell.label().c_str(),
                  r.at("status").c_str());
      if (r.at("status") == "ok")
        std::printf(", accuracy %s, loss %s at lr %s, %s ms/iter", r.at("accuracy").c_str(), r.at("loss").c_str(),
                    r.at("lr").c_str(), r.at("ms_per_iter").c_str());
      else std::printf(": %s", r.at("reason").c_str());
      std::printf("\n");
      std::fflush(stdout);
    }
  }
}
}  // namespace

LabSummary run_lab(const LabSpec& spec) {
  const auto start = Clock::now();
  const LabOptions& o = spec.options;
  check_option_ranges(o, "lab");
  require_device(o.device);
  const std::vector<Cell> cells = lab_cells(spec);
  AG_CHECK(!cells.empty(), "lab: the grid has no cells");
  LabSummary summary;
  summary.cells = static_cast<int64_t>(cells.size());
  fs::create_directories(o.out + "/cells");

  dist::Communicator& comm = dist::world();
  const bool worker = !o.shard.empty();
  Shard shard = worker ? parse_shard(o.shard) : Shard{comm.rank(), comm.size()};
  const auto finished = [&] {
    return std::count_if(cells.begin(), cells.end(),
                         [&](const Cell& cell) { return fs::exists(o.out + "/cells/" + cell.id() + ".csv"); });
  };
  if (o.report_only) {
    summary.skipped = finished();
  } else if (!worker && comm.size() == 1 && o.jobs > 1) {
    summary.skipped = finished();
    run_jobs(spec);
    summary.trained = finished() - summary.skipped;
  } else {
    std::optional<TextData> text;
    for (const Cell& cell : cells)
      if (cell.task.task == Task::Text && !text) {
        const std::string path = text::resolve_data_path(cell.task.data);
        text = TextData{path, text::read_text(path)};
      }
    run_share(spec, cells, shard, text ? &*text : nullptr, summary);
    // Every rank's cells written before rank 0 reads them (the sums wait for all of them).
    summary.trained = dist::sum(comm, summary.trained);
    summary.skipped = dist::sum(comm, summary.skipped);
  }
  summary.seconds = std::chrono::duration<double>(Clock::now() - start).count();
  if (worker || comm.rank() != 0) return summary;

  std::vector<Curve> curves;
  for (const Cell& cell : cells) {
    const std::string base = o.out + "/cells/" + cell.id();
    if (!fs::exists(base + ".csv")) continue;  // a process that failed: its cells are missing, and run again next time
    const std::vector<Row> rows = parse_csv(read_file(base + ".csv"));
    summary.rows.insert(summary.rows.end(), rows.begin(), rows.end());
    if (fs::exists(base + ".curve.csv")) curves.push_back({cell.label(), parse_curve(read_file(base + ".curve.csv"))});
    else curves.push_back({cell.label(), {}});
  }
  replace_file(o.out + "/results.csv", csv_text(summary.rows));
  write_report(o.out, summary.rows, curves, spec.command);
  return summary;
}

}  // namespace ag::lab
