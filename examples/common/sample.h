// Sampling from a character-level GPT (char_lm sample, train's closing sample,
// the report's): the character-level GPT's machinery in examples/common (train.h says why).
#pragma once
#include <memory>
#include <string>
#include <vector>

#include "core/options.h"
#include "examples/common/sample_options.h"
#include "examples/common/text_data.h"
#include "nn/gpt.h"

namespace ag::char_lm {

// char_lm sample's options, from the table in examples/common/sample_options.h.
struct SampleOptions {
  AG_DECLARE_OPTIONS(AG_CHAR_LM_SAMPLE_OPTIONS)
};

// How far back generation conditions, which the model's positions decide
// (context_of), one rule for both ways of getting logits so that they agree at
// any length (greedy text included):
//   Restart  learned positions end at block_size, so a KV cache cannot roll
//            over (a key computed at position p would have to move to p − 1,
//            which changes it). The window starts at the first token and grows;
//            when it would pass block_size it restarts with the last
//            block_size / 2 tokens (the last block_size on the first call, for a
//            prompt longer than that) and grows again. Each token conditions on
//            between block_size / 2 and block_size tokens, and a cache pays one
//            prefill every block_size / 2 tokens instead of a full forward per
//            token.
//   Stop     rope, alibi and none go on past block_size: the window is the whole
//            sequence, up to `span` (--max-context) tokens; then generation stops.
//   Roll     the same, for a model whose queries see only a window (and global
//            keys): its cache rolls (LayerKVCache), so it never fills and its
//            memory stays constant; generation goes on for as long as asked.
struct Context {
  enum class AtEnd { Restart, Stop, Roll };
  AtEnd at_end;
  int64_t span;     // tokens the window may hold: block_size (Restart), --max-context (Stop), unbounded (Roll)
  int64_t chunk;    // tokens per forward: block_size (learned positions end there; a rolling cache holds that many new)
  std::string why;  // what the user is told at the first restart, or at the stop
};
Context context_of(const nn::GPT& model, const SampleOptions& options);

// Where generation gets the next token's logits from. Each call passes the
// whole sequence so far, which extends the previous call's by the tokens drawn
// since; an implementation keeps whatever state it needs (a KV cache, a
// recurrent state) and computes only what is new.
class NextTokenLogits {
 public:
  virtual ~NextTokenLogits() = default;
  // The logits [V] of the token after `ids`, on the host.
  virtual std::vector<double> next(const std::vector<int64_t>& ids) = 0;
  // The rules of its context, and whether it can give the logits after n tokens
  // (false past a Stop model's span).
  virtual const Context& context() const = 0;
  bool takes(int64_t n) const { return context().at_end != Context::AtEnd::Stop || n <= context().span; }
  // A document starts at ids[at] (sample --documents): the next calls condition on ids[at …) only,
  // at positions from 0 again, as a model trained on packed documents saw each (state emptied).
  virtual void start_document(int64_t at) = 0;
};

// The window of the sequence a token is generated from, under Context's rules.
class ContextWindow {
 public:
  explicit ContextWindow(const Context& context) : context_(context) {}
  // Moves the window for a sequence of n tokens (takes(n)), n growing from call
  // to call; returns true when it restarted (a cache must then be emptied).
  bool advance(int64_t n);
  int64_t start() const { return start_; }  // the window is ids[start, n)
  void start_document(int64_t at) { start_ = at; }
  const Context& context() const { return context_; }

 private:
  Context context_;
  int64_t start_ = 0;
  bool started_ = false;
};

// Reruns the model on the whole window every time (no state): the reference.
class RecomputeLogits : public NextTokenLogits {
 public:
  RecomputeLogits(nn::GPT& model, const Context& context) : model_(model), window_(context) {}
  std::vector<double> next(const std::vector<int64_t>& ids) override;
  const Context& context() const override { return window_.context(); }
  void start_document(int64_t at) override { window_.start_document(at); }

 private:
  nn::GPT& model_;
  ContextWindow window_;
};

// Runs only the new tokens, through a KV cache (nn/kv_cache.h): the first call
// prefills the prompt (in chunks), each later one decodes the drawn token, and
// when the window restarts the cache is emptied and prefilled with the new
// window. Its capacity: block_size (Restart), span (Stop), or what a rolling
// cache needs for a chunk (Roll: constant however long generation goes).
class CachedLogits : public NextTokenLogits {
 public:
  CachedLogits(nn::GPT& model, const Context& context);
  std::vector<double> next(const std::vector<int64_t>& ids) override;
  const Context& context() const override { return window_.context(); }
  void start_document(int64_t at) override {
    window_.start_document(at);
    cache_.clear();
  }
  // The cache has taken ids[window_start() … window_start() + cache().length()).
  int64_t window_start() const { return window_.start(); }
  const nn::KVCache& cache() const { return cache_; }

 private:
  nn::GPT& model_;
  nn::KVCache cache_;
  ContextWindow window_;
};

// Where the document of ids' last token starts (sample --documents): just after the last
// occurrence of `separator` that ends before that token, or 0.
int64_t document_start(const std::vector<int64_t>& ids, const std::vector<int64_t>& separator);

// Continues `prompt` (not options.prompt, so callers can loop) by `tokens`
// characters, one at a time, each drawn from softmax(logits / temperature) over
// the top_k most likely next characters (top_k = 1: greedy). Returns the prompt
// and its continuation.
std::string generate(NextTokenLogits& logits, const text::Tokenizer& tokenizer, const std::string& prompt,
                     const SampleOptions& options);
// The same from a model, through its KV cache unless options.no_kv_cache.
std::string generate(nn::GPT& model, const text::Tokenizer& tokenizer, const std::string& prompt,
                     const SampleOptions& options);

// Candidate continuations of a prompt scored in one forward (char_lm sample --tree): their
// characters laid out as a token tree (a trie: a beginning the candidates share is one node),
// decoded after the prompt's cache by GPT::forward_tree. A candidate's log-probability is the
// sum over its characters of log p(character | the prompt and the characters before it).
struct ScoredContinuation {
  std::string text;
  int64_t characters = 0;
  double log_prob = 0;
};
struct TreeScores {
  std::vector<ScoredContinuation> candidates;  // in the order given
  int64_t nodes = 0;                           // the tree's, at most the candidates' characters
};
TreeScores score_continuations(nn::GPT& model, const text::Tokenizer& tokenizer, const std::string& prompt,
                               const std::vector<std::string>& candidates);
// --tree's list: candidates separated by '|' (none empty).
std::vector<std::string> split_candidates(const std::string& list);

}  // namespace ag::char_lm
