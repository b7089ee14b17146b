#include "examples/sort/sort_task.h"

#include <algorithm>
#include <chrono>
#include <cstdio>

#include "core/autograd.h"
#include "core/error.h"
#include "core/ops.h"
#include "optim/adam.h"

namespace ag::sort_task {

namespace {
using Clock = std::chrono::steady_clock;

double seconds_since(Clock::time_point since) {
  return std::chrono::duration<double>(Clock::now() - since).count();
}

// The hash behind the split; a constant, so the split is the same for every seed.
constexpr uint64_t kSplitSeed = 0x5027;
}  // namespace

Split split_of(const std::vector<int64_t>& digits) {
  AG_CHECK(static_cast<int64_t>(digits.size()) == kLength, "sort: an input has " << kLength << " digits, not " << digits.size());
  uint64_t code = 0;  // the input read as a base-kDigits number: one code per input
  for (int64_t d : digits) code = code * kDigits + static_cast<uint64_t>(d);
  return random_bits(kSplitSeed, code) % 4 == 0 ? Split::Test : Split::Train;
}

std::vector<int64_t> draw_input(Split split, Generator& gen) {
  std::vector<int64_t> digits(kLength);
  do {
    for (int64_t& d : digits) d = static_cast<int64_t>(gen.integer(kDigits));
  } while (split_of(digits) != split);
  return digits;
}

void get_batch(Split split, int64_t B, Generator& gen, Tensor& x, Tensor& y) {
  constexpr int64_t T = kBlockSize;
  std::vector<int64_t> xs(B * T), ys(B * T);
  for (int64_t b = 0; b < B; ++b) {
    std::vector<int64_t> tokens = draw_input(split, gen);  // input ‖ sorted(input), 2·kLength
    std::vector<int64_t> sorted = tokens;
    std::sort(sorted.begin(), sorted.end());
    tokens.insert(tokens.end(), sorted.begin(), sorted.end());
    std::copy_n(tokens.begin(), T, xs.begin() + b * T);
    std::copy_n(tokens.begin() + 1, T, ys.begin() + b * T);
    // Predicting the next input digit is guessing noise: only the sorted half is scored.
    std::fill_n(ys.begin() + b * T, kLength - 1, kIgnore);
  }
  x = Tensor::from_indices(xs, {B, T});
  y = Tensor::from_indices(ys, {B, T});
}

Tensor sort_greedy(nn::GPT& model, const Tensor& inputs) {
  AG_CHECK(inputs.dim() == 2 && inputs.size(1) == kLength, "sort_greedy: inputs " << describe(inputs) << " are not [N, " << kLength << "]");
  NoGradGuard no_grad;
  const bool was_training = model.is_training();
  model.eval();
  const int64_t N = inputs.size(0), V = kDigits;
  std::vector<int64_t> ids = inputs.to_indices();  // [N, T], T growing by one per step
  std::vector<int64_t> out(N * kLength);
  for (int64_t k = 0; k < kLength; ++k) {
    const int64_t T = kLength + k;
    const Tensor logits = model.forward(Tensor::from_indices(ids, {N, T}));  // [N, T, V]
    const std::vector<double> last = slice(logits, 1, T - 1, T).to_vector();  // [N, 1, V]
    std::vector<int64_t> next(N * (T + 1));
    for (int64_t n = 0; n < N; ++n) {
      const auto row = last.begin() + n * V;
      out[n * kLength + k] = std::max_element(row, row + V) - row;
      std::copy_n(ids.begin() + n * T, T, next.begin() + n * (T + 1));
      next[n * (T + 1) + T] = out[n * kLength + k];
    }
    ids = std::move(next);
  }
  model.train(was_training);
  return Tensor::from_indices(out, {N, kLength});
}

double exact_accuracy(nn::GPT& model, int64_t n, uint64_t seed) {
  AG_CHECK(n > 0, "exact_accuracy: n must be positive, got " << n);
  Generator gen(seed);
  std::vector<int64_t> inputs;
  for (int64_t i = 0; i < n; ++i) {
    const std::vector<int64_t> digits = draw_input(Split::Test, gen);
    inputs.insert(inputs.end(), digits.begin(), digits.end());
  }
  // Decoded in chunks: one batch of thousands of sequences makes large
  // activations, and allocating them fresh is slower than the arithmetic.
  constexpr int64_t kChunk = 500;
  std::vector<int64_t> outputs;
  for (int64_t first = 0; first < n; first += kChunk) {
    const int64_t m = std::min(kChunk, n - first);
    const std::vector<int64_t> chunk(inputs.begin() + first * kLength, inputs.begin() + (first + m) * kLength);
    const std::vector<int64_t> sorted = sort_greedy(model, Tensor::from_indices(chunk, {m, kLength})).to_indices();
    outputs.insert(outputs.end(), sorted.begin(), sorted.end());
  }
  int64_t correct = 0;
  for (int64_t i = 0; i < n; ++i) {
    std::vector<int64_t> expected(inputs.begin() + i * kLength, inputs.begin() + (i + 1) * kLength);
    std::sort(expected.begin(), expected.end());
    correct += std::equal(expected.begin(), expected.end(), outputs.begin() + i * kLength);
  }
  return static_cast<double>(correct) / static_cast<double>(n);
}

TrainResult train(const TrainConfig& c) {
  c.model.check();
  AG_CHECK(c.model.vocab_size == kDigits && c.model.block_size >= kBlockSize,
           "sort: the model needs vocab_size " << kDigits << " and block_size >= " << kBlockSize);
  check_option_ranges(c.run);
  Generator init(c.optim.seed);
  nn::GPT model(c.model, init);
  model.train();
  optim::AdamW optimizer(optim::decay_groups(model.named_parameters(), c.optim.weight_decay),
                         {c.optim.lr, c.optim.beta1, c.optim.beta2, 1e-8});
  optim::TrainStep step(optimizer, c.optim,
                        [&](const Tensor& x, const Tensor& y, std::span<const int64_t> y_host) {
                          return model.loss(x, y, Reduction::Sum, kIgnore, y_host);
                        },
                        Device::CPU, kIgnore);
  const int64_t iters = c.run.max_iters;
  if (!c.quiet)
    std::printf("sort: %lld parameters; %lld digits of 0..%lld; batch %lld, %lld iterations\n",
                static_cast<long long>(model.num_parameters()), static_cast<long long>(kLength),
                static_cast<long long>(kDigits - 1), static_cast<long long>(c.optim.batch_size * c.optim.grad_accum),
                static_cast<long long>(iters));

  TrainResult result;
  Generator batches(c.optim.seed + 1);
  const auto start = Clock::now();
  for (int64_t iter = 0; iter < iters; ++iter) {
    std::vector<optim::Batch> micro(c.optim.grad_accum);
    for (optim::Batch& b : micro) get_batch(Split::Train, c.optim.batch_size, batches, b.x, b.y);
    const optim::StepResult r = step.run(iter, micro);
    step.check_finite();
    result.batch_losses.push_back(r.loss.item());
    if (!c.quiet && (iter % c.run.log_interval == 0 || iter + 1 == iters)) {
      std::printf("iter %5lld/%lld | loss %.4f | lr %.2e | %5.1f s\n", static_cast<long long>(iter),
                  static_cast<long long>(iters), result.batch_losses.back(), r.lr, seconds_since(start));
      std::fflush(stdout);
    }
  }
  result.train_seconds = seconds_since(start);

  const int64_t tail = std::max<int64_t>(1, iters / 10);
  for (int64_t i = iters - tail; i < iters; ++i) result.final_loss += result.batch_losses[i] / static_cast<double>(tail);
  if (c.run.eval_sequences > 0) {
    const auto eval_start = Clock::now();
    constexpr uint64_t kTestSetSeed = 7;  // not the run's seed: one test set for all runs
    result.accuracy = exact_accuracy(model, c.run.eval_sequences, kTestSetSeed);
    result.eval_seconds = seconds_since(eval_start);
  }
  return result;
}

}  // namespace ag::sort_task
