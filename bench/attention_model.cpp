// bench_attention_model: training steps of a GPT (nn::GPT) at a long block
// size, one attention implementation per process: ms per iteration and the
// peak resident memory. The default is issue 11's case, where attention
// dominates the step: 1 layer, 4 heads, 128 wide (char_lm's defaults), batch 1,
// block size 4096, 65 tokens, char_lm's training step (optim::TrainStep: loss,
// backward, clipping, AdamW). An implementation is a softmax one (dense, flash,
// composed), linear-elu1 / linear-favor (linear attention), ssd (the state
// space, with its default convolution and gate), s4 (S4D's long convolution by
// FFT, state 64) or lstm (both mixers of their own, nn/s4.h and nn/lstm.h).
// (char_lm's default config: --n-layer 4 --T 64 --batch-size 12.)
//
//   ./build/bench_attention_model --threads 2 --T 4096,16384
//
// ms/iter is the median over iterations 2..N (the first allocates AdamW's
// state), wall time and the process's CPU time (all threads: on a busy machine
// it still measures the work); memory is the process's peak resident size
// (VmHWM: model, data and the steps) and the part of it above the state before
// the first step.
//
// Context parallelism (issue 26): one case under mpirun with --context-parallel P
// splits the sequence over P processes (optim::ProcessGrid, ring attention),
// and each process prints its line, with the milliseconds per step its ring
// waited for transfers (bench/context_parallel.sh runs it against one process):
//   mpirun -np 2 ./build/bench_attention_model --threads 1 --context-parallel 2 --case flash 16384
#include <unistd.h>

#include <cstdio>
#include <sstream>
#include <string>
#include <vector>

#include "bench/measure.h"
#include "core/threads.h"
#include "examples/common/command_line.h"
#include "nn/gpt.h"
#include "optim/adam.h"
#include "optim/data_parallel.h"
#include "optim/train_step.h"

using namespace ag;

namespace {

struct Model {
  int64_t T, layers, heads, width, batch;
};

double estimated_gb(const std::string& impl, const Model& m) {
  return bench::attention_matrices(impl) * m.batch * m.layers * m.heads * static_cast<double>(m.T) * m.T * 4 / 1e9;
}

void run_case(const std::string& impl, const Model& m, int iters, int64_t context_parallel) {
  Generator gen(1);
  nn::GPTConfig config{.vocab_size = 65, .block_size = m.T, .n_layer = m.layers, .n_head = m.heads, .n_embd = m.width};
  if (impl == "ssd" || impl == "s4" || impl == "lstm") {
    config.attention = enum_from_name<AttentionFunction>(impl, "--impls");
  } else if (impl.starts_with("linear-")) {
    config.attention = AttentionFunction::Linear;
    config.feature_map = enum_from_name<FeatureMap>(impl.substr(7), "--impls");
  } else {
    config.attn_impl = enum_from_name<AttentionImpl>(impl, "--impls");
  }
  nn::GPT model(config, gen);
  dist::Communicator& world = dist::world();
  const optim::ProcessGrid grid(world, context_parallel);
  model.set_context_parallel(grid.ring());
  optim::AdamW optimizer(optim::decay_groups(model.named_parameters(), 0.1), {1e-3, 0.9, 0.99, 1e-8});
  optim::TrainOptions options;
  options.batch_size = m.batch;
  optim::TrainStep train_step(
      optimizer, options, [&](const Tensor& x, const Tensor& y, std::span<const int64_t> y_host) {
        return model.loss(x, y, Reduction::Sum, -100, y_host);
      },
      Device::CPU);
  optim::make_data_parallel(train_step, world);
  model.train();
  std::vector<int64_t> inputs(m.batch * m.T), targets(m.batch * m.T);
  for (int64_t& t : inputs) t = static_cast<int64_t>(gen.integer(config.vocab_size));
  for (int64_t& t : targets) t = static_cast<int64_t>(gen.integer(config.vocab_size));
  const optim::Batch batch{grid.part(Tensor::from_indices(inputs, {m.batch, m.T})),
                           grid.part(Tensor::from_indices(targets, {m.batch, m.T}))};

  bench::PeakMemory peak;
  std::vector<double> wall_ms, cpu_ms, ring_wait_ms;
  for (int i = 0; i < iters; ++i) {
    const auto t0 = std::chrono::steady_clock::now();
    const double c0 = bench::process_cpu_ms(), wait0 = grid.ring() ? grid.ring()->collective_ms() : 0;
    const optim::StepResult r = train_step.run(i, {batch});
    train_step.check_finite();
    (void)r.loss.item();
    wall_ms.push_back(bench::elapsed_ms(t0));
    cpu_ms.push_back(bench::process_cpu_ms() - c0);
    ring_wait_ms.push_back(grid.ring() ? grid.ring()->collective_ms() - wait0 : 0);
  }
  // iterations 2..N: the first allocates AdamW's state
  const auto steady_median = [&](std::vector<double> v) {
    if (v.size() > 1) v.erase(v.begin());
    return ag::median(std::move(v));
  };
  std::printf("%.1f %.1f %.1f %.1f", steady_median(wall_ms), steady_median(cpu_ms), bench::status_kb("VmHWM") / 1024.0,
              peak.extra_mb());
  if (grid.ring()) std::printf(" %.1f rank %d of %d", steady_median(ring_wait_ms), world.rank(), world.size());
  std::printf("\n");
}

}  // namespace

int main(int argc, char** argv) {
  cli::Program program{"Training steps of a 1-layer GPT at a long block size (see the top of bench/attention_model.cpp)"};
  cli::Command& command = program.command();
  int threads = 2, iters = 5;
  std::string impls = "dense,flash", lengths = "4096";
  Model m{0, 1, 4, 128, 1};
  double memory_limit_gb = 6;
  std::vector<std::string> one_case;
  int64_t context_parallel = 1;
  command.option("--threads", threads, "CPU threads (OpenMP and OpenBLAS)");
  command.option("--impls", impls, "implementations, comma-separated: dense, flash, composed, linear-elu1, linear-favor, ssd, s4, lstm");
  command.option("--T", lengths, "block sizes, comma-separated");
  command.option("--iters", iters, "training steps per case");
  command.option("--n-layer", m.layers);
  command.option("--n-head", m.heads);
  command.option("--n-embd", m.width);
  command.option("--batch-size", m.batch);
  command.option("--memory-limit-gb", memory_limit_gb, "skip cases estimated to need more");
  command.option("--case", one_case, "internal: run one case (impl T)").expected(2);
  command.option("--context-parallel", context_parallel,
                 "with --case under mpirun: split the sequence over groups of P processes (ring attention)");
  if (const int code = program.parse_plain(argc, argv); code >= 0) return code;
  set_num_threads(threads);
  bench::return_freed_memory_to_the_system();

  if (!one_case.empty()) {
    m.T = std::stoll(one_case[1]);
    run_case(one_case[0], m, iters, context_parallel);
    return 0;
  }
  std::printf("%lld layer(s), %lld heads, width %lld, batch %lld, %d steps; %s\n\n",
              static_cast<long long>(m.layers), static_cast<long long>(m.heads), static_cast<long long>(m.width),
              static_cast<long long>(m.batch), iters, cpu_runtime_summary().c_str());
  std::printf("| T | impl | ms/iter | CPU ms/iter | peak RSS MB | above the model's setup MB |\n"
              "|---:|---|---:|---:|---:|---:|\n");
  std::stringstream all(lengths);
  for (std::string T; std::getline(all, T, ',');) {
    std::stringstream names(impls);
    for (std::string impl; std::getline(names, impl, ',');) {
      m.T = std::stoll(T);
      std::printf("| %s | %s | ", T.c_str(), impl.c_str());
      if (estimated_gb(impl, m) > memory_limit_gb) {
        std::printf("skipped: needs about %.0f GB | | | |\n", estimated_gb(impl, m));
        continue;
      }
      std::ostringstream command;
      command << "/proc/" << getpid() << "/exe --threads " << threads << " --iters " << iters << " --n-layer "
              << m.layers << " --n-head " << m.heads << " --n-embd " << m.width << " --batch-size " << m.batch << " --case "
              << impl << ' ' << T;
      double ms, cpu_ms, peak_mb, extra_mb;
      if (std::sscanf(bench::run_and_capture(command.str()).c_str(), "%lf %lf %lf %lf", &ms, &cpu_ms, &peak_mb,
                      &extra_mb) != 4)
        std::printf("failed | | | |\n");
      else
        std::printf("%.0f | %.0f | %.0f | %.0f |\n", ms, cpu_ms, peak_mb, extra_mb);
      std::fflush(stdout);
    }
  }
  return 0;
}
