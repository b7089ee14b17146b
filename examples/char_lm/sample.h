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

// The context each token is generated from, the one rule both ways of getting
// logits follow, so that they agree at any length (greedy text included).
// Learned absolute positions end at block_size, so a KV cache cannot roll over
// (a key computed at position p would have to move to p − 1, which changes it).
// So the window starts at the first token and grows; when it would pass
// block_size it restarts with the last block_size / 2 tokens (the last
// block_size on the first call, for a prompt longer than that) and grows again.
// Each token thus conditions on between block_size / 2 and block_size tokens,
// and a cache pays one prefill every block_size / 2 tokens instead of a full
// forward per token. (Sliding the window one token at a time would give every
// token block_size of context, but only by recomputing everything each step.)
class ContextWindow {
 public:
  explicit ContextWindow(int64_t block_size) : block_size_(block_size) {}
  // Moves the window for a sequence of n tokens, n growing from call to call;
  // returns true when it restarted (a cache must then be emptied).
  bool advance(int64_t n);
  int64_t start() const { return start_; }  // the window is ids[start, n)

 private:
  int64_t block_size_;
  int64_t start_ = 0;
  bool started_ = false;
};

// Reruns the model on the whole window every time (no state): the reference.
class RecomputeLogits : public NextTokenLogits {
 public:
  explicit RecomputeLogits(nn::GPT& model) : model_(model), window_(model.config().block_size) {}
  std::vector<double> next(const std::vector<int64_t>& ids) override;

 private:
  nn::GPT& model_;
  ContextWindow window_;
};

// Runs only the new tokens, through a KV cache (nn/kv_cache.h): the first call
// prefills the prompt, each later one decodes the drawn token, and when the
// window restarts the cache is emptied and prefilled with the new window.
class CachedLogits : public NextTokenLogits {
 public:
  explicit CachedLogits(nn::GPT& model)
      : model_(model), cache_(model.make_kv_cache(1)), window_(model.config().block_size) {}
  std::vector<double> next(const std::vector<int64_t>& ids) override;
  // The cache holds ids[window_start() … window_start() + cache().length()).
  int64_t window_start() const { return window_.start(); }
  const nn::KVCache& cache() const { return cache_; }

 private:
  nn::GPT& model_;
  nn::KVCache cache_;
  ContextWindow window_;
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
