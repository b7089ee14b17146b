// Data-parallel training (dist/communicator.h, optim/data_parallel.h).
//
// Cases named "data parallel (every process): ..." call collectives. CTest runs
// them alone (one process, where a collective leaves its tensor as it is);
// "data parallel: the every-process cases pass on 2 MPI processes" runs them
// again in two processes at once under mpirun. The other cases start char_lm
// under mpirun as a user would and compare it with train() in this process.
// Without MPI the mpirun cases print [SKIP] (CTest: Skipped).
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <fstream>
#include <functional>
#include <optional>
#include <sstream>
#include <thread>
#include <tuple>

#include "dist/communicator.h"
#include "examples/common/eval.h"
#include "examples/common/train.h"
#include "nn/gpt.h"
#include "optim/data_parallel.h"
#include "tests/char_lm_helpers.h"
#include "tests/helpers.h"

// The file's names and using-directives stay its own in a unity build, where the test
// files compile as one translation unit (CMakeLists.txt).
namespace data_parallel_test {

using namespace ag;
using namespace ag::char_lm;
using ag::test::mpirun_or_skip;
using ag::test::occurrences;
using ag::test::run_command;

namespace {
using Clock = std::chrono::steady_clock;

double seconds_since(Clock::time_point start) {
  return std::chrono::duration<double>(Clock::now() - start).count();
}

const ag::test::TempDir& temp_root() {
  static const ag::test::TempDir root("data_parallel_tests");
  return root;
}

std::string char_lm_command(const TrainConfig& c) {
  return std::string(ATTOGRAD_CHAR_LM).append(" ").append(ag::test::train_arguments(c)).append(" --threads 1");
}

// A 40-iteration run of the tiny model, logging every loss. No dropout: each
// process draws masks of its own, so with dropout runs on different numbers of
// processes agree only in distribution.
TrainConfig parallel_run(const std::string& name) {
  TrainConfig c = ag::test::tiny_run(temp_root().file(name));
  c.model.dropout = 0;
  c.run.max_iters = 40;
  c.optim.lr_decay_iters = 40;
  c.run.eval_interval = 20;
  c.run.log_interval = 1;
  return c;
}

// The losses of one kind ("batch", "train" or "val") in a run's log.csv, in order.
std::vector<double> logged_losses(const std::string& out, const std::string& kind) {
  std::ifstream in(out + "/log.csv");
  std::vector<double> losses;
  std::string line;
  while (std::getline(in, line)) {
    const size_t at = line.find("," + kind + ",");
    if (at != std::string::npos) losses.push_back(std::stod(line.substr(at + kind.size() + 2)));
  }
  return losses;
}

// log.csv holds 6 significant digits, well inside the tolerance.
void check_same_losses(const std::vector<double>& got, const std::vector<double>& expected, double rtol = 1e-4) {
  REQUIRE(got.size() == expected.size());
  for (size_t i = 0; i < got.size(); ++i) {
    CAPTURE(i);
    CAPTURE(got[i]);
    CAPTURE(expected[i]);
    CHECK(std::abs(got[i] - expected[i]) <= rtol * std::abs(expected[i]));
  }
}

// Every process's float64 copy of `tensors`, gathered exactly: process q fills
// row q and leaves the others zero, so the all-reduce's sums are x + 0 = x.
std::vector<std::vector<double>> gather(const std::vector<Tensor>& tensors, dist::Communicator& comm) {
  std::vector<double> mine;
  for (const Tensor& t : tensors)
    for (double v : t.to_vector()) mine.push_back(v);
  const size_t P = mine.size();
  std::vector<double> rows(P * static_cast<size_t>(comm.size()), 0.0);
  std::copy(mine.begin(), mine.end(), rows.begin() + static_cast<std::ptrdiff_t>(P) * comm.rank());
  const Tensor all = Tensor::from_vector(rows, {static_cast<int64_t>(rows.size())}, DType::Float64);
  comm.all_reduce_sum(all);
  const std::vector<double> gathered = all.to_vector();
  std::vector<std::vector<double>> per_process;
  for (int q = 0; q < comm.size(); ++q)
    per_process.emplace_back(gathered.begin() + static_cast<std::ptrdiff_t>(P) * q,
                             gathered.begin() + static_cast<std::ptrdiff_t>(P) * (q + 1));
  return per_process;
}

std::unique_ptr<nn::GPT> tiny_float64_gpt(uint64_t seed) {
  const nn::GPTConfig config{.vocab_size = 11, .block_size = 8, .n_layer = 1, .n_head = 2, .n_embd = 8};
  Generator gen(seed);
  auto model = std::make_unique<nn::GPT>(config, gen);
  model->to(DType::Float64);
  return model;
}

// --- processes started in the background, for killing one of them ------------------------
// Starts `command` through the shell in a process group of its own, output to `log_file`.
pid_t start_in_background(const std::string& command, const std::string& log_file) {
  const std::string line = "exec " + command + " >" + log_file + " 2>&1";
  const pid_t pid = fork();
  REQUIRE(pid >= 0);
  if (pid == 0) {
    setpgid(0, 0);
    execl("/bin/sh", "sh", "-c", line.c_str(), static_cast<char*>(nullptr));
    _exit(127);
  }
  setpgid(pid, pid);
  return pid;
}

// Its wait status if `pid` exits within `seconds`; otherwise kills its whole process group.
std::optional<int> wait_for_exit(pid_t pid, double seconds) {
  const auto start = Clock::now();
  while (seconds_since(start) < seconds) {
    int status = 0;
    if (waitpid(pid, &status, WNOHANG) == pid) return status;
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  kill(-pid, SIGKILL);
  waitpid(pid, nullptr, 0);
  return std::nullopt;
}

// The processes whose parent is `parent` and whose command name is `name`
// (any name if empty), from /proc.
std::vector<pid_t> children_named(pid_t parent, const std::string& name = "") {
  std::vector<pid_t> found;
  for (const auto& entry : std::filesystem::directory_iterator("/proc")) {
    const std::string pid_text = entry.path().filename().string();
    if (pid_text.find_first_not_of("0123456789") != std::string::npos) continue;
    std::ifstream stat(entry.path() / "stat");
    std::string line;
    if (!std::getline(stat, line)) continue;  // gone meanwhile
    // "pid (comm) state ppid ...": comm may hold spaces, so split at the last ')'.
    const size_t open = line.find('('), close = line.rfind(')');
    if (open == std::string::npos || close == std::string::npos) continue;
    std::istringstream rest(line.substr(close + 1));
    char state = 0;
    pid_t ppid = 0;
    rest >> state >> ppid;
    if (ppid == parent && (name.empty() || line.substr(open + 1, close - open - 1) == name))
      found.push_back(std::stoi(pid_text));
  }
  return found;
}
}  // namespace

// --- collectives, in every process -------------------------------------------------------

TEST_CASE("data parallel (every process): all_reduce_sum and broadcast of each dtype, and of text") {
  dist::Communicator& comm = dist::world();
  const int N = comm.size(), r = comm.rank();
  const double sum_of_ranks_plus_one = N * (N + 1) / 2.0;
  for (const DType dtype : {DType::Float32, DType::Float64, DType::Int64}) {
    CAPTURE(dtype);
    std::vector<double> mine;  // process r holds (r + 1) · (1, 2, 3, 4, 5)
    for (int i = 1; i <= 5; ++i) mine.push_back((r + 1) * i);
    const Tensor summed = Tensor::from_vector(mine, {5}, dtype);
    comm.all_reduce_sum(summed);
    const Tensor broadcast = Tensor::from_vector(mine, {5}, dtype);
    comm.broadcast(broadcast, 0);
    for (int i = 1; i <= 5; ++i) {
      CHECK(summed.to_vector()[i - 1] == sum_of_ranks_plus_one * i);
      CHECK(broadcast.to_vector()[i - 1] == i);  // rank 0's
    }
  }
  CHECK(dist::sum(comm, r + 1) == static_cast<int64_t>(sum_of_ranks_plus_one));
  for (const std::string text : {"", "7 bytes", "more than eight bytes, not a multiple of 8"})
    CHECK(dist::broadcast(comm, r == 0 ? text : "another text", 0) == text);
}

TEST_CASE("data parallel (every process): a process given another run than rank 0's is told which options differ") {
  dist::Communicator& comm = dist::world();
  CHECK_NOTHROW(dist::check_same_on_every_process(comm, {{"lr", "0.001"}}, "test"));
  const Metadata mine = {{"lr", "0.001"}, {"seed", comm.rank() == 0 ? "1" : "2"}};
  if (comm.rank() == 0) CHECK_NOTHROW(dist::check_same_on_every_process(comm, mine, "test"));
  else CHECK_THROWS_WITH_AS(dist::check_same_on_every_process(comm, mine, "test"),
                            doctest::Contains("seed: 2 here, 1 on rank 0"), Error);
}

TEST_CASE("data parallel (every process): replicate gives every process rank 0's weights, bit for bit") {
  dist::Communicator& comm = dist::world();
  const std::unique_ptr<nn::GPT> model = tiny_float64_gpt(100 + static_cast<uint64_t>(comm.rank()));
  if (comm.size() > 1) {  // the test can fail: the processes start from other weights
    const auto before = gather(model->parameters(), comm);
    CHECK(before[1] != before[0]);
  }
  optim::replicate(model->parameters(), comm);
  const auto after = gather(model->parameters(), comm);
  std::vector<double> rank0_weights;
  for (const Tensor& p : tiny_float64_gpt(100)->parameters())
    for (double v : p.to_vector()) rank0_weights.push_back(v);
  for (int q = 0; q < comm.size(); ++q) {
    CAPTURE(q);
    CHECK(after[static_cast<size_t>(q)] == rank0_weights);
  }
}

TEST_CASE("data parallel (every process): each process takes its rows of the batch") {
  dist::Communicator& comm = dist::world();
  const int64_t N = comm.size(), r = comm.rank();
  std::vector<int64_t> rows;
  for (int64_t i = 0; i < 2 * N * 3; ++i) rows.push_back(i);
  const Tensor shard = optim::shard(Tensor::from_indices(rows, {2 * N, 3}), comm);
  CHECK(shard.shape() == Shape{2, 3});
  CHECK(shard.to_indices() == std::vector<int64_t>(rows.begin() + 6 * r, rows.begin() + 6 * (r + 1)));
  if (N > 1) CHECK_THROWS_WITH_AS(optim::shard(Tensor::zeros({N + 1, 3}), comm), doctest::Contains("multiple of"), Error);
}

TEST_CASE("data parallel: the every-process cases pass on 2 MPI processes") {
  const std::string mpirun = mpirun_or_skip(2);
  if (mpirun.empty()) return;
  const std::string self = std::filesystem::read_symlink("/proc/self/exe").string();
  int status = 0;  // not a structured binding: INFO's lambda cannot capture one in clang 14
  std::string output;
  std::tie(status, output) =
      run_command(mpirun + " " + self + " --no-colors=true '--test-case=data parallel (every process)*'");
  INFO(output);
  CHECK(status == 0);
  CHECK(occurrences(output, "Status: SUCCESS!") == 2);  // doctest's summary, once per process
  CHECK(occurrences(output, "test cases: 0 ") == 0);
}

// --- char_lm under mpirun ---------------------------------------------------------------------

TEST_CASE("data parallel: 40 iterations on 2 processes log the losses of one process training the same batches") {
  const std::string mpirun = mpirun_or_skip(2);
  if (mpirun.empty()) return;
  const TrainResult alone = train(parallel_run("alone"));
  REQUIRE(alone.batch_losses.size() == 40);

  const TrainConfig c = parallel_run("two");
  int status = 0;
  std::string output;
  std::tie(status, output) = run_command(mpirun + " " + char_lm_command(c));
  INFO(output);
  REQUIRE(status == 0);
  check_same_losses(logged_losses(c.run.out, "batch"), alone.batch_losses);
  std::vector<double> train_evals, val_evals;
  for (const EvalRecord& e : alone.evals) {
    train_evals.push_back(e.train_loss);
    val_evals.push_back(e.val_loss);
  }
  check_same_losses(logged_losses(c.run.out, "train"), train_evals);
  check_same_losses(logged_losses(c.run.out, "val"), val_evals);
  // Rank 0 alone prints, and says how many processes train.
  CHECK(occurrences(output, "char_lm: ") == 1);
  CHECK(occurrences(output, "data-parallel on 2 processes (MPI): each computes 2 of every batch's 4 sequences") == 1);
  CHECK(occurrences(output, "done: 40 iterations") == 1);
}

namespace {

// A run of 40 iterations cut in two, the halves on different process counts: 20
// iterations under `mpirun`, then 20 more resumed on one process; and 20 on one, then
// 20 more resumed under `mpirun`. Each resumed half logs the straight run's losses.
// run(name) makes the run's config; on_processes(c, parallel) sets what differs between
// the two (context parallelism's P; data parallelism needs nothing: mpirun's count).
void check_resumes_across_process_counts(const std::string& mpirun, const std::function<TrainConfig(const std::string&)>& run,
                                         const std::string& prefix,
                                         const std::function<void(TrainConfig&, bool)>& on_processes) {
  const TrainResult straight = train(run(prefix + "straight"));
  const std::vector<double> second_half(straight.batch_losses.begin() + 20, straight.batch_losses.end());
  const auto under_mpirun = [&](const TrainConfig& c) {
    int status = 0;
    std::string output;
    std::tie(status, output) = run_command(mpirun + " " + char_lm_command(c));
    INFO(output);
    REQUIRE(status == 0);
  };
  {
    INFO("20 iterations on 2 processes, then 20 more on 1");
    TrainConfig c = run(prefix + "two_then_one");
    c.run.max_iters = 20;
    on_processes(c, true);
    under_mpirun(c);
    c.run.max_iters = 40;
    c.run.resume = true;
    on_processes(c, false);
    check_same_losses(train(c).batch_losses, second_half);
  }
  {
    INFO("20 iterations on 1 process, then 20 more on 2");
    TrainConfig c = run(prefix + "one_then_two");
    c.run.max_iters = 20;
    on_processes(c, false);
    train(c);
    c.run.max_iters = 40;
    c.run.resume = true;
    on_processes(c, true);
    under_mpirun(c);
    const std::vector<double> logged = logged_losses(c.run.out, "batch");
    REQUIRE(logged.size() == 40);  // the first run's 20 rows, and the resumed run's
    check_same_losses(std::vector<double>(logged.begin() + 20, logged.end()), second_half);
  }
}

}  // namespace

TEST_CASE("data parallel: checkpoints from 2 processes resume on 1, and from 1 on 2") {
  const std::string mpirun = mpirun_or_skip(2);
  if (mpirun.empty()) return;
  check_resumes_across_process_counts(mpirun, parallel_run, "", [](TrainConfig&, bool) {});
}

TEST_CASE("data parallel: a batch the processes cannot split evenly is a clear error") {
  const std::string mpirun = mpirun_or_skip(2);
  if (mpirun.empty()) return;
  TrainConfig c = parallel_run("uneven");
  c.optim.batch_size = 3;
  int status = 0;
  std::string output;
  std::tie(status, output) = run_command(mpirun + " " + char_lm_command(c));
  INFO(output);
  CHECK(status != 0);
  CHECK(output.find("--batch-size 3: each batch's sequences are split evenly among the 2 processes, so it must be a "
                    "multiple of 2") != std::string::npos);
  CHECK(!std::filesystem::exists(c.run.out));  // checked before anything is written
}

TEST_CASE("data parallel: processes given different options stop, naming the option") {
  const std::string mpirun = mpirun_or_skip(1);
  if (mpirun.empty()) return;
  const TrainConfig c = parallel_run("different");
  TrainConfig other = c;
  other.run.max_iters = 30;
  // mpirun's MPMD form: one process of each command, in one run.
  const auto start = Clock::now();
  int status = 0;
  std::string output;
  std::tie(status, output) = run_command(mpirun + " " + char_lm_command(c) + " : -np 1 " + char_lm_command(other));
  INFO(output);
  CHECK(status != 0);
  CHECK(output.find("char_lm (rank 1 of 2): train: this process was given another run than rank 0") !=
        std::string::npos);
  CHECK(output.find("max-iters: 30 here, 40 on rank 0") != std::string::npos);
  CHECK(seconds_since(start) < 60);
}

TEST_CASE("data parallel: when one process fails, the others end at once instead of waiting for it") {
  const std::string mpirun = mpirun_or_skip(1);
  if (mpirun.empty()) return;
  TrainConfig c = parallel_run("one_fails");
  c.run.max_iters = 1'000'000;  // far more than the test waits for
  c.optim.lr_decay_iters = 1'000'000;
  TrainConfig failing = c;
  failing.run.data = temp_root().file("no_such_text.txt");
  const auto start = Clock::now();
  int status = 0;
  std::string output;
  std::tie(status, output) = run_command(mpirun + " " + char_lm_command(c) + " : -np 1 " + char_lm_command(failing));
  const double seconds = seconds_since(start);
  INFO(output);
  MESSAGE("the run ended " << seconds << " s after it started");
  CHECK(status != 0);
  CHECK(status != 124);  // not ended by the test's timeout
  CHECK(output.find("char_lm (rank 1 of 2): data: '" + failing.run.data + "' does not exist") != std::string::npos);
  CHECK(seconds < 60);
}

TEST_CASE("data parallel: when a process is killed mid-run, the others end within seconds") {
  const std::string mpirun = mpirun_or_skip(2);
  if (mpirun.empty()) return;
  TrainConfig c = parallel_run("killed");
  c.run.max_iters = 1'000'000;
  c.optim.lr_decay_iters = 1'000'000;
  const std::string log_file = temp_root().file("killed.txt");
  const pid_t launcher = start_in_background(mpirun + " " + char_lm_command(c), log_file);

  // Training has begun once rank 0 logs a step.
  const auto start = Clock::now();
  while (logged_losses(c.run.out, "batch").empty() && seconds_since(start) < 60)
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
  // `timeout` runs mpirun, which starts the char_lm processes.
  std::vector<pid_t> ranks;
  for (const pid_t mpirun_pid : children_named(launcher))
    for (const pid_t rank : children_named(mpirun_pid, "char_lm")) ranks.push_back(rank);
  REQUIRE_MESSAGE(ranks.size() == 2, "char_lm processes found: " << ranks.size());

  kill(ranks.back(), SIGKILL);
  const auto killed = Clock::now();
  const std::optional<int> status = wait_for_exit(launcher, 60);
  const double seconds = seconds_since(killed);
  std::ifstream in(log_file);
  const std::string output(std::istreambuf_iterator<char>(in), {});
  INFO(output);
  MESSAGE("the run ended " << seconds << " s after one of its processes was killed");
  REQUIRE(status.has_value());
  CHECK(WIFEXITED(*status));
  CHECK(WEXITSTATUS(*status) != 0);
  CHECK(WEXITSTATUS(*status) != 124);  // mpirun ended it, not the timeout
  CHECK(output.find("exited on signal 9 (Killed)") != std::string::npos);
  CHECK(seconds < 20);
}

namespace {
// mpirun for one process on the GPU, or "" when the case skips (no device, NCCL or MPI: it says which).
std::string one_gpu_process_or_skip() {
  if (!ag::test::cuda_or_skip() || !ag::test::nccl_or_skip()) return "";
  return mpirun_or_skip(1);
}
}  // namespace

TEST_CASE("cuda: one MPI process on the GPU (NCCL collectives) trains as one process alone") {
  const std::string mpirun = one_gpu_process_or_skip();
  if (mpirun.empty()) return;
  TrainConfig c = parallel_run("cuda_alone");
  c.run.device = Device::CUDA;
  const TrainResult alone = train(c);
  c.run.out = temp_root().file("cuda_mpi");
  int status = 0;
  std::string output;
  std::tie(status, output) = run_command(mpirun + " " + char_lm_command(c));
  INFO(output);
  REQUIRE(status == 0);
  check_same_losses(logged_losses(c.run.out, "batch"), alone.batch_losses, 1e-5);
  std::vector<double> val_evals;
  for (const EvalRecord& e : alone.evals) val_evals.push_back(e.val_loss);
  check_same_losses(logged_losses(c.run.out, "val"), val_evals, 1e-5);
}

// eval, too, takes its GPU and joins NCCL under mpirun (its losses are all-reduced over the
// processes, a collective on CUDA tensors): it once did neither and stopped at that all-reduce.
TEST_CASE("cuda: char_lm eval on one MPI process on the GPU gives the loss it gives alone") {
  const std::string mpirun = one_gpu_process_or_skip();
  if (mpirun.empty()) return;
  TrainConfig c = parallel_run("cuda_eval");
  c.run.device = Device::CUDA;
  train(c);
  EvalOptions o;
  o.ckpt = c.run.out;
  o.device = Device::CUDA;
  o.eval_iters = 2;
  const EvalResult alone = evaluate_checkpoint(o);
  int status = 0;
  std::string output;
  std::tie(status, output) = run_command(mpirun + " " + ATTOGRAD_CHAR_LM + " eval --ckpt '" + c.run.out +
                                         "' --device cuda --eval-iters 2 --threads 1");
  INFO(output);
  REQUIRE(status == 0);
  char expected[64];
  std::snprintf(expected, sizeof expected, "val loss %.4f", alone.losses.val_loss);
  CHECK(output.find(expected) != std::string::npos);
}

// --- char_lm --context-parallel (issue 26): cases named "context parallel: …" ----------------
// (scripts/sanitize.sh runs every case that starts mpirun by these two prefixes.)

namespace {

// parallel_run at the size: blocks of 256 positions, batches of 4.
TrainConfig context_run(const std::string& name) {
  TrainConfig c = parallel_run(name);
  c.model.block_size = 256;
  return c;
}

std::vector<double> eval_losses(const TrainResult& r, bool validation) {
  std::vector<double> losses;
  for (const EvalRecord& e : r.evals) losses.push_back(validation ? e.val_loss : e.train_loss);
  return losses;
}

// Runs c as `processes` processes with --context-parallel 2 (writing to `out`) and checks that they
// log `alone`'s losses; returns what they printed ("" without MPI: the caller returns).
std::string check_logs_one_process(TrainConfig c, const std::string& out, const TrainResult& alone, int processes) {
  const std::string mpirun = mpirun_or_skip(processes, 300);
  if (mpirun.empty()) return "";
  c.run.out = temp_root().file(out);
  c.run.context_parallel = 2;
  int status = 0;
  std::string output;
  std::tie(status, output) = run_command(mpirun + " " + char_lm_command(c));
  INFO(output);
  REQUIRE(status == 0);
  check_same_losses(logged_losses(c.run.out, "batch"), alone.batch_losses);
  check_same_losses(logged_losses(c.run.out, "train"), eval_losses(alone, false));
  check_same_losses(logged_losses(c.run.out, "val"), eval_losses(alone, true));
  return output;
}

}  // namespace

TEST_CASE("context parallel: char_lm on 2 processes (1 x 2) and on 4 (2 x 2) logs one process's losses") {
  const TrainConfig c = context_run("cp_alone");
  const TrainResult alone = train(c);
  REQUIRE(alone.batch_losses.size() == 40);
  for (const int processes : {2, 4}) {
    CAPTURE(processes);
    const std::string output = check_logs_one_process(c, "cp_" + std::to_string(processes), alone, processes);
    if (output.empty()) return;
    // Rank 0 alone prints, and says the grid.
    CHECK(occurrences(output, "char_lm: ") == 1);
    const std::string grid = std::to_string(processes) + " processes (MPI) as " + std::to_string(processes / 2) +
                             " data-parallel × 2 context-parallel: each computes " + std::to_string(8 / processes) +
                             " of every batch's 4 sequences, 128 of each one's 256 positions (ring attention)";
    CHECK(occurrences(output, grid) == 1);
    CHECK(occurrences(output, "done: 40 iterations") == 1);
  }
}

TEST_CASE("context parallel: a checkpoint of 2 context-parallel processes resumes on 1, and one of 1 on 2") {
  const std::string mpirun = mpirun_or_skip(2, 300);
  if (mpirun.empty()) return;
  check_resumes_across_process_counts(mpirun, context_run, "cp_",
                                      [](TrainConfig& c, bool parallel) { c.run.context_parallel = parallel ? 2 : 1; });
}

TEST_CASE("context parallel: a grid or a block that does not split, or a group given other options, is a clear error on every process") {
  struct BadRun {
    std::string name;
    int64_t P, block_size;
    std::string error;
  };
  const std::vector<BadRun> runs = {
      {"cp_uneven_grid", 3, 256, "--context-parallel 3: the 2 processes do not form groups of 3 (start a multiple of 3)"},
      {"cp_uneven_block", 2, 250, "--context-parallel 2: --block-size 250 does not split into 2·P = 4 equal chunks"},
  };
  const std::string mpirun = mpirun_or_skip(2);
  if (mpirun.empty()) return;
  for (const BadRun& bad : runs) {
    CAPTURE(bad.name);
    TrainConfig c = context_run(bad.name);
    c.run.context_parallel = bad.P;
    c.model.block_size = bad.block_size;
    const auto start = Clock::now();
    int status = 0;
    std::string output;
    std::tie(status, output) = run_command(mpirun + " " + char_lm_command(c));
    INFO(output);
    CHECK(status != 0);
    CHECK(occurrences(output, bad.error) == 2);  // each process says it
    CHECK(!std::filesystem::exists(c.run.out));  // checked before anything is written
    CHECK(seconds_since(start) < 60);
  }
  // One process of the group split over 2, the other alone: they train different runs.
  const std::string one = mpirun_or_skip(1);
  TrainConfig c = context_run("cp_different");
  c.run.context_parallel = 2;
  TrainConfig other = c;
  other.run.context_parallel = 1;
  const auto start = Clock::now();
  int status = 0;
  std::string output;
  std::tie(status, output) = run_command(one + " " + char_lm_command(c) + " : -np 1 " + char_lm_command(other));
  INFO(output);
  CHECK(status != 0);
  CHECK(output.find("char_lm (rank 1 of 2): train: this process was given another run than rank 0") != std::string::npos);
  CHECK(output.find("context-parallel: 1 here, 2 on rank 0") != std::string::npos);
  CHECK(seconds_since(start) < 60);
}

TEST_CASE("context parallel: char_lm with linear and with ssd attention on 2 processes logs one process's losses") {
  for (const AttentionFunction function : {AttentionFunction::Linear, AttentionFunction::Ssd}) {
    const std::string name = name_of(function);
    CAPTURE(name);
    TrainConfig c = context_run("cp_" + name + "_alone");
    c.model.attention = function;  // ssd: its convolution (width 4) and gate, the defaults
    if (check_logs_one_process(c, "cp_" + name + "_two", train(c), 2).empty()) return;
  }
}

}  // namespace data_parallel_test
