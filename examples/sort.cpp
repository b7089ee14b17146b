// sort: the synthetic task of minGPT's demo, learned by attograd's GPT. The model
// reads six digits (0..9; minGPT used 0..2) and writes them sorted; nothing is
// downloaded. After training it greedily sorts 5,000 held-out inputs (never
// trained on: examples/sort/sort_task.h) and prints the fraction it gets right
// in all six places. Every number comes from --seed, so a run is repeatable.
//
// One thread by default: a batch is 64 x 11 tokens of width 64, too little to
// split, and where cores are shared, OpenMP threads that spin while they wait
// for each other made a 2-thread run many times slower than one thread
// (docs/performance.md).
//
//   sort [--max-iters N] [--seed S] [--threads N] [model and training options]   (see --help)
//
// The task and the training loop live in examples/sort/ (a library the tests
// drive too); this file only reads the options.
#include <cstdio>

#include "examples/common/command_line.h"
#include "examples/sort/sort_task.h"

using namespace ag;

int main(int argc, char** argv) {
  cli::Program program("Trains a small GPT to sort six digits, then scores exact-sequence accuracy on held-out inputs.",
                       "sort");
  sort_task::TrainConfig config;
  cli::ProcessOptions process;
  process.threads = 1;
  cli::Command& command = program.command();
  command.bind(config.model).bind(config.optim).bind(config.run).bind(process);
  if (const int code = program.parse_and_apply(argc, argv, process); code >= 0) return code;
  try {
    if (!command.given("lr_decay_iters")) config.optim.lr_decay_iters = config.run.max_iters;  // decay over the whole run
    const sort_task::TrainResult r = sort_task::train(config);
    std::printf("held-out exact-sequence accuracy: %.2f%% of %lld sequences\n", 100 * r.accuracy,
                static_cast<long long>(config.run.eval_sequences));
    std::printf("done: %.1f s training, %.1f s evaluating, final loss %.4f\n", r.train_seconds, r.eval_seconds,
                r.final_loss);
    return 0;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "sort: %s\n", e.what());
    return 1;
  }
}
