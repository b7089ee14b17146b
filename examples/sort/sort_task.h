// The sort task (minGPT's demo, with ten digits): a GPT reads six digits and
// writes them back in ascending order. It needs no data, trains in seconds, and
// is only solved if embeddings, attention, the MLP, the loss, autograd and AdamW
// all work: a quick proof that the whole stack learns.
//
// One example is the 12 tokens  input ‖ sorted(input), e.g.
//   3 1 4 1 5 9 | 1 1 3 4 5 9
// The model sees x = tokens[0..11) and predicts y = tokens[1..12); the loss is
// only on the six positions whose target is a sorted digit, the first five
// targets being ignore_index (-100):
//   x:  3    1    4    1    5    9 1 1 3 4 5
//   y: -100 -100 -100 -100 -100  1 1 3 4 5 9
//
// Held-out sequences: a fixed hash of the input puts a quarter of the 10^6
// possible inputs in the test split, for every seed; training draws only from
// the rest, so a test sequence is never trained on.
#pragma once
#include "examples/sort/sort_options.h"
#include <cstdint>
#include <vector>

#include "core/tensor.h"
#include "nn/gpt.h"
#include "optim/train_step.h"

namespace ag::sort_task {

inline constexpr int64_t kLength = 6;                // digits to sort
inline constexpr int64_t kDigits = 10;               // vocabulary: 0..9
inline constexpr int64_t kBlockSize = 2 * kLength - 1;  // T = 11
inline constexpr int64_t kIgnore = -100;             // target ignored by the loss

enum class Split { Train, Test };

// The split an input of kLength digits belongs to (by a hash that does not
// depend on any seed: a quarter of all inputs are Test).
Split split_of(const std::vector<int64_t>& digits);

// A uniformly random input of kLength digits from `split` (rejection sampling).
std::vector<int64_t> draw_input(Split split, Generator& gen);

// B inputs from `split` as a training batch: x, y int64 [B, T] as in the header
// comment.
void get_batch(Split split, int64_t B, Generator& gen, Tensor& x, Tensor& y);

// Greedy decoding: inputs int64 [N, kLength] -> the model's kLength output
// digits, int64 [N, kLength], each the argmax given the inputs and the digits
// before it.
Tensor sort_greedy(nn::GPT& model, const Tensor& inputs);

// The fraction of `n` Test inputs (drawn from their own generator, `seed`) whose
// greedy output equals the sorted input in all kLength places.
double exact_accuracy(nn::GPT& model, int64_t n, uint64_t seed);

// sort's own options, from the table in examples/sort/sort_options.h.
struct SortOptions {
  AG_DECLARE_OPTIONS(AG_SORT_OPTIONS)
};

// The three tables, with sort's defaults: a 2-layer, 64-wide GPT with GPT-2's
// tanh GELU (as minGPT; the exact erf one costs a fifth of the run here), batch
// 64, and the cosine decay over the whole run.
struct TrainConfig {
  nn::GPTConfig model = [] {
    nn::GPTConfig m;
    m.vocab_size = kDigits;
    m.block_size = kBlockSize;
    m.n_layer = 2;
    m.n_embd = 64;
    m.gelu = GeluApprox::Tanh;
    return m;
  }();
  optim::TrainOptions optim = [] {
    optim::TrainOptions o;
    o.batch_size = 64;
    o.warmup_iters = 50;
    o.lr_decay_iters = 500;  // = run.max_iters
    return o;
  }();
  SortOptions run;
  bool quiet = false;  // no progress lines (tests)
};

struct TrainResult {
  std::vector<double> batch_losses;  // the training loss of each iteration, in order
  double final_loss = 0;  // mean batch loss over the last 10% of iterations
  double accuracy = 0;    // exact-sequence accuracy on eval_sequences Test inputs, the same for every seed
  double train_seconds = 0, eval_seconds = 0;
};

TrainResult train(const TrainConfig& config);

}  // namespace ag::sort_task
