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
#include <cstdint>
#include <vector>

#include "core/tensor.h"
#include "nn/gpt.h"

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

struct TrainConfig {
  int64_t n_layer = 2, n_head = 4, n_embd = 64;
  int64_t batch_size = 64, iters = 500, warmup_iters = 50;
  double lr = 1e-3, min_lr = 1e-4, weight_decay = 0.1, grad_clip = 1.0;
  uint64_t seed = 1337;
  int64_t log_interval = 100;  // a progress line every N iterations
  int64_t eval_sequences = 5000;  // held-out inputs scored at the end (0: none)
  bool quiet = false;             // no progress lines (tests)
};

struct TrainResult {
  std::vector<double> batch_losses;  // the training loss of each iteration, in order
  double final_loss = 0;  // mean batch loss over the last 10% of iterations
  double accuracy = 0;    // exact-sequence accuracy on eval_sequences Test inputs, the same for every seed
  double train_seconds = 0, eval_seconds = 0;
};

TrainResult train(const TrainConfig& config);

}  // namespace ag::sort_task
