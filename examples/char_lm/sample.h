#pragma once
#include <memory>
#include <string>
#include <vector>

#include "core/options.h"
#include "examples/char_lm/sample_options.h"
#include "examples/char_lm/data.h"
#include "nn/gpt.h"

namespace ag::char_lm {

// char_lm sample's options, from the table in examples/char_lm/sample_options.h.
struct SampleOptions {
  AG_DECLARE_OPTIONS(AG_CHAR_LM_SAMPLE_OPTIONS)
};

// Where generation gets the next token's logits from. Each call passes the
// whole sequence so far, which extends the previous call's by the tokens drawn
// since; an implementation keeps whatever state it needs (a KV cache, a
// recurrent state) and computes only what is new.
class NextTokenLogits {
 public:
  virtual ~NextTokenLogits() = default;
  // The logits [V] of the token after `ids`, on the host.
  virtual std::vector<double> next(const std::vector<int64_t>& ids) = 0;
};

// Reruns the model on the last block_size tokens every time (no state): the reference.
class RecomputeLogits : public NextTokenLogits {
 public:
  explicit RecomputeLogits(nn::GPT& model) : model_(model) {}
  std::vector<double> next(const std::vector<int64_t>& ids) override;

 private:
  nn::GPT& model_;
};

// Runs only the new tokens, through a KV cache (nn/kv_cache.h): the first call
// prefills the prompt, each later one decodes the drawn token. Learned absolute
// positions end at block_size, so a cache cannot roll over (a key computed at
// position p would have to move to p − 1, which changes it). When the context
// would pass block_size, the cache keeps the last block_size / 2 tokens: it is
// emptied and re-prefilled with them at positions 0 … block_size / 2 − 1, and
// then decodes block_size / 2 more tokens before the next refill. So each token
// conditions on between block_size / 2 and block_size tokens (recomputing
// always sees block_size), at the cost of one prefill every block_size / 2 tokens.
class CachedLogits : public NextTokenLogits {
 public:
  explicit CachedLogits(nn::GPT& model) : model_(model), cache_(model.make_kv_cache(1)) {}
  std::vector<double> next(const std::vector<int64_t>& ids) override;
  // The cache holds ids[window_start() … window_start() + cache().length()).
  int64_t window_start() const { return window_start_; }
  const nn::KVCache& cache() const { return cache_; }

 private:
  nn::GPT& model_;
  nn::KVCache cache_;
  int64_t window_start_ = 0;
};

// Continues `prompt` (not options.prompt, so callers can loop) by `tokens`
// characters, one at a time, each drawn from softmax(logits / temperature) over
// the top_k most likely next characters (top_k = 1: greedy). Returns the prompt
// and its continuation.
std::string generate(NextTokenLogits& logits, const Tokenizer& tokenizer, const std::string& prompt,
                     const SampleOptions& options);
// The same from a model, through its KV cache unless options.no_kv_cache.
std::string generate(nn::GPT& model, const Tokenizer& tokenizer, const std::string& prompt,
                     const SampleOptions& options);

}  // namespace ag::char_lm
