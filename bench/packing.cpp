// bench_packing: training on short documents, packed against padded (issue 50): the real
// tokens of documents per second of training steps (loss + backward), each way over the same
// documents. char_lm's default model shape (4 layers × 128 wide, 4 heads), float32, block T.
//   packed         each row holds whole documents back to back (GPT::set_documents: each sees its
//                  own, at positions from 0) until the next would not fit; the rest of the row padded;
//   padded to T    one document per row, padded to the block (a fixed-shape batch);
//   padded to max  one document per row, padded to the batch's longest (dynamic padding).
// Padding positions are ignored targets; in every way a document's positions 0 … L − 2 are
// scored (predicting its next token) and its last is not, so each way learns the same thing
// from a document. Document lengths are uniform in [--min, --max] from a fixed seed. Medians of
// wall (or, --clock cpu, the process's CPU) ms per step.
//
//   ./build/bench_packing --threads 2 --T 256 --B 8 --min 16 --max 64
#include <algorithm>
#include <cstdio>
#include <string>
#include <vector>

#include "bench/measure.h"
#include "core/autograd.h"
#include "core/random.h"
#include "core/threads.h"
#include "examples/common/command_line.h"
#include "nn/gpt.h"

using namespace ag;

namespace {

struct Batch {
  Tensor x, y, documents;  // documents undefined: one per row
  int64_t real_tokens = 0;
};

// B rows of documents whose lengths are read from `lengths` at `next` on: packed, whole documents
// per row while they fit; else one per row, padded to T or to the batch's longest (to_max).
Batch make_batch(const std::vector<int64_t>& lengths, size_t& next, int64_t B, int64_t T, bool packed, bool to_max,
                 int64_t V) {
  std::vector<std::vector<int64_t>> row_docs(static_cast<size_t>(B));
  for (auto& docs : row_docs) {
    int64_t used = 0;
    do {
      const int64_t L = lengths[next % lengths.size()];
      if (used + L > T) break;
      docs.push_back(L);
      used += L;
      ++next;
    } while (packed);
  }
  int64_t width = T;
  if (!packed && to_max) {
    width = 0;
    for (const auto& docs : row_docs) width = std::max(width, docs.front());
  }
  std::vector<int64_t> x(static_cast<size_t>(B * width), 0), y(x.size(), -100), ids(x.size(), 0);
  Batch batch;
  for (int64_t b = 0; b < B; ++b) {
    int64_t t = 0, doc = 0;
    for (const int64_t L : row_docs[static_cast<size_t>(b)]) {
      for (int64_t i = 0; i < L; ++i, ++t) {
        const auto at = static_cast<size_t>(b * width + t);
        x[at] = (t * 7 + doc * 3 + 1) % V;
        ids[at] = doc;
        if (i + 1 < L) y[at] = ((t + 1) * 7 + doc * 3 + 1) % V;
      }
      batch.real_tokens += L;
      ++doc;
    }
    for (; t < width; ++t) ids[static_cast<size_t>(b * width + t)] = doc;  // the padding, a document of its own
  }
  batch.x = Tensor::from_indices(x, {B, width});
  batch.y = Tensor::from_indices(y, {B, width});
  if (packed) batch.documents = Tensor::from_indices(ids, {B, width});
  return batch;
}

// Whether `name` is one of the comma-separated items of `list`.
bool listed(const std::string& list, const std::string& name) {
  const std::vector<std::string> items = cli::split_list(list);
  return std::ranges::find(items, name) != items.end();
}

}  // namespace

int main(int argc, char** argv) {
  cli::Program program{"Packed against padded training on short documents (see bench/packing.cpp)"};
  cli::Command& command = program.command();
  int threads = 2;
  int64_t T = 256, B = 8, min_length = 16, max_length = 64;
  std::string impl = "flash";
  double budget_s = 5;
  command.option("--threads", threads, "CPU threads (OpenMP and OpenBLAS)");
  command.option("--T", T, "block size");
  command.option("--B", B, "rows per batch");
  command.option("--min", min_length, "shortest document");
  command.option("--max", max_length, "longest document (at most T)");
  command.option("--impl", impl, "attention implementation: dense or flash").one_of({"dense", "flash", "composed"});
  command.option("--budget-s", budget_s, "seconds of repeats per way");
  std::string ways = "padded to T,padded to max,packed";
  command.option("--ways", ways, "which ways, comma-separated (one alone for AG_PROFILE=1's table)");
  std::string clock = "wall";
  command.option("--clock", clock, "wall, or cpu: the process's CPU time (for one thread on a busy machine)")
      .one_of({"wall", "cpu"});
  if (const int code = program.parse_plain(argc, argv); code >= 0) return code;
  AG_CHECK(1 <= min_length && min_length <= max_length && max_length <= T, "bench_packing: need 1 <= min <= max <= T");
  set_num_threads(threads);
  nn::GPTConfig config{.vocab_size = 65, .block_size = T, .n_layer = 4, .n_head = 4, .n_embd = 128};
  config.attn_impl = option_from_string<AttentionImpl>(impl, "--impl");
  Generator gen(7);
  nn::GPT model(config, gen);
  std::vector<int64_t> lengths(4096);
  for (int64_t& L : lengths) L = min_length + static_cast<int64_t>(gen.integer(max_length - min_length + 1));
  std::printf("threads %d, T %lld, B %lld, documents of %lld … %lld tokens, GPT 4 x 128, 4 heads, %s, float32, %s ms\n",
              threads, static_cast<long long>(T), static_cast<long long>(B), static_cast<long long>(min_length),
              static_cast<long long>(max_length), impl.c_str(), clock.c_str());
  // The last column is each way's rate over the first way's run (padded to T unless --ways leaves it out).
  std::printf("%-14s %12s %14s %12s %14s\n", "way", "ms/step", "tokens/step", "tokens/s",
              listed(ways, "padded to T") ? "vs padded to T" : "vs the first");
  double padded_rate = 0;
  for (const auto& way : {std::tuple{"padded to T", false, false}, std::tuple{"padded to max", false, true},
                          std::tuple{"packed", true, false}}) {
    const char* name = std::get<0>(way);
    const bool packed = std::get<1>(way), to_max = std::get<2>(way);  // named: clang 14 captures no bindings
    if (!listed(ways, name)) continue;
    size_t next = 0;
    double tokens = 0;
    int64_t steps = 0;
    const double ms = bench::median_ms(
        [&] {
          const Batch batch = make_batch(lengths, next, B, T, packed, to_max, config.vocab_size);
          model.set_documents(batch.documents);
          model.zero_grad();
          model.loss(batch.x, batch.y).backward();
          tokens += static_cast<double>(batch.real_tokens);
          ++steps;
        },
        clock == "cpu" ? bench::Clock::Cpu : bench::Clock::Wall, 5, 1000, 1e3 * budget_s);
    const double per_step = tokens / static_cast<double>(steps), rate = per_step / (ms / 1e3);
    if (padded_rate == 0) padded_rate = rate;
    std::printf("%-14s %12.2f %14.1f %12.0f %13.2fx\n", name, ms, per_step, rate, rate / padded_rate);
  }
  return 0;
}
