// Where the milliseconds of one training step go, and how close the step is to
// the machine's floor.
//
// Trains the default char_lm model (4 layers, 4 heads, 128 wide, context 64,
// batch 12, vocabulary 65) on random tokens (a step's cost does not depend on
// the token values) with AdamW and gradient clipping, as char_lm does. It times
// --steps steps with the profiler off (the step's wall time), then records
// --steps more with the profiler on (core/profiler.h) and prints, per step
// (medians over the steps, so that one step a busy machine stretches moves nothing):
//   - the time per phase (forward, backward, optimizer) and outside any kernel;
//   - per kernel, per family (core/cpu/<family>.cpp), and every GEMM shape;
//   - the sgemm floor: each GEMM of the step replayed alone with cblas_sgemm
//     (same shape, transposes, leading dims, batch count, beta; warm caches; at
//     the same thread count), summed. A step can only be faster than that by
//     doing fewer or better GEMMs; step / floor is how much time everything else
//     (and the GEMMs' own cold caches) adds.
//
//   ./build/profile_step [--threads 1] [--steps 20] [--n-embd 128] ...   (--help)
// The last line, "floor_ms F step_ms S flops X", is for bench/compare_cpu.sh.
#include <cblas.h>
#include <time.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdlib>
#include <new>
#include <cstdio>
#include <map>

#include "core/autograd.h"
#include "core/caching_allocator.h"
#include "core/profiler.h"
#include "core/threads.h"
#include "examples/common/command_line.h"
#include "examples/common/timing.h"  // median
#include "nn/gpt.h"
#include "optim/adam.h"
#include "optim/train_step.h"

using namespace ag;

// Every C++ heap allocation of the process is counted: tensor memory comes
// from the caching allocator (host_memory_stats), everything else a step
// allocates (TensorImpls, graph nodes, backward closures, shape vectors) from
// operator new.
namespace {
std::atomic<int64_t> heap_allocations{0};
}  // namespace
void* operator new(size_t bytes) {
  ++heap_allocations;
  if (void* p = std::malloc(bytes == 0 ? 1 : bytes)) return p;
  throw std::bad_alloc();
}
// (The default operator delete frees with std::free, which matches.)

namespace {

using Clock = std::chrono::steady_clock;
double ms_since(Clock::time_point t0) { return std::chrono::duration<double, std::milli>(Clock::now() - t0).count(); }

// CPU time of the whole process (every thread), in ms: on a busy machine it
// still measures the work, where wall time also counts the waits for a core.
double process_cpu_ms() {
  timespec t{};
  clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &t);
  return 1e3 * static_cast<double>(t.tv_sec) + 1e-6 * static_cast<double>(t.tv_nsec);
}


// profile_step's own options (core/options.h explains the columns; the model's
// and the training step's come from their tables).
#define AG_PROFILE_OPTIONS(X)                                                                             \
  X(Local, int64_t, steps,      20, 1, 1 << 20, "steps timed, then as many profiled")                     \
  X(Local, int64_t, warmup,     5,  0, 1 << 20, "steps run first, untimed")                               \
  X(Local, int64_t, floor_reps, 50, 1, 1 << 20, "timed repetitions of each GEMM shape for the floor")     \
  X(Local, int64_t, vocab,      65, 1, 1 << 24, "vocabulary size V (tiny Shakespeare's: 65)")
struct ProfileOptions {
  AG_DECLARE_OPTIONS(AG_PROFILE_OPTIONS)
};

// char_lm's training step (optim::TrainStep: forward, loss, backward, clip,
// AdamW; the loss read back and checked for finiteness every step, as char_lm
// does on the CPU), on random tokens.
struct Trainer {
  nn::GPT model;
  optim::AdamW optimizer;
  optim::TrainStep train_step;
  Generator batches{7};
  int64_t B, T, V, micro_batches, iter = 0;

  Trainer(const nn::GPTConfig& config, const optim::TrainOptions& options, Generator init)
      : model(config, init),
        optimizer(optim::decay_groups(model.named_parameters(), options.weight_decay),
                  {options.lr, options.beta1, options.beta2, 1e-8}),
        train_step(optimizer, options,
                   [this](const Tensor& x, const Tensor& y, std::span<const int64_t> y_host) {
                     return model.loss(x, y, Reduction::Sum, -100, y_host);
                   }, Device::CPU),
        B(options.batch_size),
        T(config.block_size),
        V(config.vocab_size),
        micro_batches(options.grad_accum) {
    model.train();
  }

  void step() {
    std::vector<optim::Batch> micro(micro_batches);
    for (optim::Batch& batch : micro) {
      const std::vector<double> draws =
          Tensor::uniform({B, T + 1}, 0, static_cast<double>(V), DType::Float64, &batches).to_vector();
      std::vector<int64_t> x, y;
      for (int64_t b = 0; b < B; ++b)
        for (int64_t t = 0; t < T; ++t) {
          x.push_back(static_cast<int64_t>(draws[b * (T + 1) + t]));
          y.push_back(static_cast<int64_t>(draws[b * (T + 1) + t + 1]));
        }
      batch = {Tensor::from_indices(x, {B, T}), Tensor::from_indices(y, {B, T})};
    }
    const optim::StepResult r = train_step.run(iter++, micro);
    train_step.check_finite();
    (void)r.loss.item();
  }
};

// A step's three phases, told apart without hooks in the step: the forward
// records the graph (grad mode on); backward() and the update run with it off,
// and the update's kernels are the optimizer family.
std::string phase(const profiler::KernelRecord& r) {
  if (r.grad_mode) return "forward";
  return std::string(r.family) == "optimizer" ? "optimizer (clip, AdamW)" : "backward";
}

// Sums each step's records by key (profiler::totals), then takes, for every
// key, the median over the steps: one step stretched by a busy machine moves
// no figure. Calls and FLOPs per key are the same every step.
std::vector<profiler::Total> median_totals(const std::vector<std::vector<profiler::KernelRecord>>& steps,
                                           const std::function<std::string(const profiler::KernelRecord&)>& key) {
  std::map<std::string, profiler::Total> per_step;
  std::map<std::string, std::vector<double>> ms;
  for (const std::vector<profiler::KernelRecord>& records : steps)
    for (const profiler::Total& t : profiler::totals(records, key)) {
      per_step[t.key] = t;
      ms[t.key].push_back(t.ms);
    }
  std::vector<profiler::Total> rows;
  for (auto& [k, t] : per_step) {
    t.ms = median(ms[k]);
    rows.push_back(t);
  }
  std::stable_sort(rows.begin(), rows.end(), [](const auto& a, const auto& b) { return a.ms > b.ms; });
  return rows;
}

// The elements a stored operand spans: `batch` matrices `batch_stride` apart,
// each `rows` rows of `cols` elements, `ld` apart.
int64_t extent(int64_t batch, int64_t batch_stride, int64_t rows, int64_t cols, int64_t ld) {
  return (batch - 1) * batch_stride + (rows - 1) * ld + cols;
}

// Median milliseconds of one call of `g` (its whole batch, every group) done by cblas_sgemm
// alone, as core/cpu/matmul.cpp calls it, on warm buffers.
double time_sgemm(const kernel::GemmShape& g, int reps) {
  const int64_t rows_a = g.trans_a ? g.K : g.M, cols_a = g.trans_a ? g.M : g.K;
  const int64_t rows_b = g.trans_b ? g.N : g.K, cols_b = g.trans_b ? g.K : g.N;
  const auto span = [&](int64_t batch_stride, int64_t group_stride, int64_t rows, int64_t cols, int64_t ld) {
    return (g.groups - 1) * group_stride + extent(g.batch, batch_stride, rows, cols, ld);
  };
  std::vector<float> a(span(g.a_batch_stride, g.a_group_stride, rows_a, cols_a, g.row_stride_a()), 0.5f);
  std::vector<float> b(span(g.b_batch_stride, g.b_group_stride, rows_b, cols_b, g.row_stride_b()), 0.25f);
  std::vector<float> c(span(g.c_batch_stride, g.c_group_stride, g.M, g.N, g.row_stride_c()), 0.0f);
  auto call = [&] {
    for (int64_t group = 0; group < g.groups; ++group)
      for (int64_t i = 0; i < g.batch; ++i)
        cblas_sgemm(CblasRowMajor, g.trans_a ? CblasTrans : CblasNoTrans, g.trans_b ? CblasTrans : CblasNoTrans,
                    static_cast<int>(g.M), static_cast<int>(g.N), static_cast<int>(g.K), static_cast<float>(g.alpha),
                    a.data() + group * g.a_group_stride + i * g.a_batch_stride, static_cast<int>(g.row_stride_a()),
                    b.data() + group * g.b_group_stride + i * g.b_batch_stride, static_cast<int>(g.row_stride_b()),
                    static_cast<float>(g.beta), c.data() + group * g.c_group_stride + i * g.c_batch_stride,
                    static_cast<int>(g.row_stride_c()));
  };
  call();
  std::vector<double> ms;
  for (int r = 0; r < reps; ++r) {
    const auto t0 = Clock::now();
    call();
    ms.push_back(ms_since(t0));
  }
  return median(ms);
}

}  // namespace

int main(int argc, char** argv) {
  cli::Program program{"Profiles one training step of the char_lm model: per kernel, per family, per GEMM shape, "
                       "and the sgemm floor of the step's GEMMs.", "profile_step"};
  ProfileOptions profile;
  nn::GPTConfig config;  // char_lm's defaults, from the model's options table
  optim::TrainOptions train_options;
  cli::ProcessOptions process;
  process.threads = 1;
  cli::Command& command = program.command();
  command.bind(profile).bind(config).bind(train_options).bind(process);
  if (const int code = program.parse_and_apply(argc, argv, process); code >= 0) return code;
  config.vocab_size = profile.vocab;
  const int steps = static_cast<int>(profile.steps), warmup = static_cast<int>(profile.warmup),
            floor_reps = static_cast<int>(profile.floor_reps);
  const int64_t batch = train_options.batch_size;

  Trainer trainer(config, train_options, Generator(1337));
  for (int i = 0; i < warmup; ++i) trainer.step();
  std::vector<double> step_ms, step_cpu_ms;
  const int64_t heap_before = heap_allocations, system_before = host_memory_stats().system_allocs;
  for (int i = 0; i < steps; ++i) {
    const auto t0 = Clock::now();
    const double cpu0 = process_cpu_ms();
    trainer.step();
    step_ms.push_back(ms_since(t0));
    step_cpu_ms.push_back(process_cpu_ms() - cpu0);
  }
  const double heap_per_step = static_cast<double>(heap_allocations - heap_before) / steps;
  const double system_per_step = static_cast<double>(host_memory_stats().system_allocs - system_before) / steps;
  // One recording per step, so every figure below can be a median over steps.
  std::vector<std::vector<profiler::KernelRecord>> recorded;
  std::vector<double> profiled_ms;
  for (int i = 0; i < steps; ++i) {
    profiler::start();
    const auto t0 = Clock::now();
    trainer.step();
    profiled_ms.push_back(ms_since(t0));
    recorded.push_back(profiler::stop());
  }
  const auto by_kernel = [](const profiler::KernelRecord& r) { return std::string(r.kernel); };
  const std::vector<profiler::Total> kernels = median_totals(recorded, by_kernel);
  double kernel_ms = 0;
  for (const profiler::Total& t : kernels) kernel_ms += t.ms;

  const double step = median(step_ms), profiled = median(profiled_ms);
  std::printf("profile_step: B=%lld T=%lld C=%lld layers=%lld heads=%lld V=%lld, %d steps, %s\n",
              static_cast<long long>(batch), static_cast<long long>(config.block_size),
              static_cast<long long>(config.n_embd), static_cast<long long>(config.n_layer),
              static_cast<long long>(config.n_head), static_cast<long long>(config.vocab_size), steps,
              cpu_runtime_summary().c_str());
  std::printf("step %.3f ms (profiler off; %.3f ms of CPU time, all threads); profiled %.3f ms, of which %.3f ms in "
              "kernels and %.3f ms outside them (graph, allocation, dispatch, profiler)\n"
              "(every figure: the median over the steps, per step)\n",
              step, median(step_cpu_ms), profiled, kernel_ms, profiled - kernel_ms);
  std::printf("allocations per step: %.1f of tensor memory from the system (the caching allocator serves the rest), "
              "%.0f small objects from operator new (TensorImpls, graph nodes, closures, shape vectors)\n\n",
              system_per_step, heap_per_step);

  std::printf("%s\n", profiler::table(median_totals(recorded, phase), "phase", 1).c_str());
  std::printf("%s\n", profiler::table(kernels, "kernel", 1).c_str());
  std::printf("%s\n",
              profiler::table(median_totals(recorded, [](const auto& r) { return std::string(r.family); }), "family", 1)
                  .c_str());

  // The largest (kernel, shapes) entries: which call sites the time belongs to.
  std::vector<profiler::Total> calls = median_totals(recorded, [](const profiler::KernelRecord& r) {
    std::string key = std::string(r.kernel) + " " + phase(r).substr(0, 3);
    for (const Shape& s : r.shapes) key.append(" ").append(to_string(s));  // not " " + …: GCC 12's false -Wrestrict
    return key;
  });
  calls.resize(std::min<size_t>(calls.size(), 20));
  std::printf("%s\n", profiler::table(calls, "kernel, phase, shapes (top 20)", 1).c_str());

  // GEMMs by shape, each beside its replay alone.
  std::map<std::string, kernel::GemmShape> shapes;
  for (const profiler::KernelRecord& r : recorded.front())
    if (r.is_gemm) shapes.emplace(profiler::describe_gemm(r.gemm), r.gemm);
  const std::vector<profiler::Total> gemms =
      median_totals(recorded, [](const auto& r) { return r.is_gemm ? profiler::describe_gemm(r.gemm) : ""; });
  std::printf("%-44s %6s %9s %9s %9s %8s\n", "GEMM", "calls", "ms", "GFLOP/s", "alone ms", "in step");
  double floor_ms = 0, gemm_ms = 0, flops = 0;
  for (const profiler::Total& t : gemms) {
    if (t.key.empty()) continue;
    const double alone = static_cast<double>(t.calls) * time_sgemm(shapes.at(t.key), floor_reps);
    floor_ms += alone;
    gemm_ms += t.ms;
    flops += t.flops;
    std::printf("%-44s %6lld %9.3f %9.1f %9.3f %7.2fx\n", t.key.c_str(), static_cast<long long>(t.calls), t.ms,
                t.flops / t.ms / 1e6, alone, t.ms / alone);
  }
  const double counted = static_cast<double>(nn::training_step_flops(config, batch, config.block_size));
  std::printf("%-44s %6s %9.3f %9.1f %9.3f %7.2fx\n\n", "all GEMMs", "", gemm_ms, flops / gemm_ms / 1e6, floor_ms,
              gemm_ms / floor_ms);
  std::printf("step FLOPs: %.4f GFLOP (training_step_flops; the recorded GEMMs did %.4f)\n", counted / 1e9,
              flops / 1e9);
  std::printf("sgemm floor: %.3f ms = step FLOPs / %.1f GFLOP/s (cblas_sgemm alone on the step's shapes)\n",
              floor_ms, counted / floor_ms / 1e6);
  std::printf("step / floor: %.2f (step %.3f ms, %.1f GFLOP/s)\n", step / floor_ms, step, counted / step / 1e6);
  std::printf("floor_ms %.4f step_ms %.4f flops %.0f\n", floor_ms, step, counted);
  return 0;
}
