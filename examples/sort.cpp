// sort: the synthetic task of minGPT's demo, learned by attograd's GPT. The model
// reads six digits (0..9; minGPT used 0..2) and writes them sorted; nothing is
// downloaded. After training it greedily sorts 5,000 held-out inputs (never
// trained on: examples/sort/sort_task.h) and prints the fraction it gets right
// in all six places. Every number comes from --seed, so a run is repeatable.
//
// One thread by default: a batch is 64 x 11 tokens of width 64, too little to
// split, and where cores are shared, OpenMP threads that spin while they wait
// for each other made a 2-thread run ten times slower (72 s against 8 s).
//
//   sort [--iters N] [--seed S] [--threads N]
//
// The task and the training loop live in examples/sort/ (a library the tests
// drive too); this file only reads the options.
#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <thread>

#include "core/error.h"
#include "core/threads.h"
#include "examples/sort/sort_task.h"

using namespace ag;

namespace {
const char* kUsage =
    "usage: sort [--iters N] [--seed S] [--threads N]\n"
    "Trains a small GPT to sort six digits, then scores exact-sequence accuracy on held-out inputs.\n"
    "  --iters N    training iterations (default %lld)\n"
    "  --seed S     random seed for the weights and the batches (default %llu)\n"
    "  --threads N  CPU threads (default 1; 0: all cores)\n";

// The value after option argv[i], as an integer; throws if it is missing or not one.
long long integer_after(int argc, char** argv, int i) {
  AG_CHECK(i + 1 < argc, "option " << argv[i] << " needs a value");
  char* end = nullptr;
  const long long value = std::strtoll(argv[i + 1], &end, 10);
  AG_CHECK(*argv[i + 1] != '\0' && *end == '\0', "option " << argv[i] << ": '" << argv[i + 1] << "' is not an integer");
  return value;
}
}  // namespace

int main(int argc, char** argv) {
  sort_task::TrainConfig config;
  long long threads = 1;
  try {
    for (int i = 1; i < argc; ++i) {
      const std::string arg = argv[i];
      if (arg == "--help" || arg == "-h") {
        std::printf(kUsage, static_cast<long long>(config.iters), static_cast<unsigned long long>(config.seed));
        return 0;
      } else if (arg == "--iters") {
        config.iters = integer_after(argc, argv, i++);
      } else if (arg == "--seed") {
        config.seed = static_cast<uint64_t>(integer_after(argc, argv, i++));
      } else if (arg == "--threads") {
        threads = integer_after(argc, argv, i++);
        AG_CHECK(threads >= 0, "--threads: " << threads << " is negative");
      } else {
        AG_CHECK(false, "unknown argument '" << arg << "' (see --help)");
      }
    }
    const unsigned cores = std::max(1u, std::thread::hardware_concurrency());
    set_num_threads(static_cast<int>(threads > 0 ? threads : cores));
    const sort_task::TrainResult r = sort_task::train(config);
    std::printf("held-out exact-sequence accuracy: %.2f%% of %lld sequences\n", 100 * r.accuracy,
                static_cast<long long>(config.eval_sequences));
    std::printf("done: %.1f s training, %.1f s evaluating, final loss %.4f\n", r.train_seconds, r.eval_seconds,
                r.final_loss);
    return 0;
  } catch (const ag::Error& e) {
    std::fprintf(stderr, "sort: %s\n", e.what());
    return 1;
  }
}
