#include "examples/char_lm/sample.h"

#include <algorithm>
#include <cmath>

#include "core/autograd.h"
#include "core/ops.h"

namespace ag::char_lm {

namespace {
// The last row of logits [1, T, V], on the host in float64.
std::vector<double> last_row(const Tensor& logits) {
  const int64_t T = logits.size(1), V = logits.size(2);
  return slice(logits.reshape({T, V}), 0, T - 1, T).to(DType::Float64).to_vector();
}

Tensor as_batch(std::vector<int64_t>::const_iterator begin, std::vector<int64_t>::const_iterator end,
                const nn::GPT& model) {
  const std::vector<int64_t> tokens(begin, end);
  return Tensor::from_indices(tokens, {1, static_cast<int64_t>(tokens.size())}).to(model.parameters()[0].device());
}
}  // namespace

bool ContextWindow::advance(int64_t n) {
  const bool restart = n - start_ > block_size_;
  if (restart) start_ = n - (started_ ? std::max<int64_t>(1, block_size_ / 2) : block_size_);
  started_ = true;
  return restart;
}

std::vector<double> RecomputeLogits::next(const std::vector<int64_t>& ids) {
  window_.advance(static_cast<int64_t>(ids.size()));
  return last_row(model_.forward(as_batch(ids.begin() + window_.start(), ids.end(), model_)));
}

std::vector<double> CachedLogits::next(const std::vector<int64_t>& ids) {
  const int64_t n = static_cast<int64_t>(ids.size());
  AG_CHECK(n > window_.start() + cache_.length(), "CachedLogits: no new token since the last call");
  if (window_.advance(n)) cache_.clear();
  const auto unseen = ids.begin() + window_.start() + cache_.length();
  return last_row(model_.forward_cached(as_batch(unseen, ids.end(), model_), cache_));
}

std::string generate(NextTokenLogits& logits, const Tokenizer& tokenizer, const std::string& prompt,
                     const SampleOptions& options) {
  AG_CHECK(options.temperature > 0, "sample: temperature " << options.temperature << " must be positive");
  NoGradGuard no_grad;
  Generator gen(options.seed);
  const int64_t V = tokenizer.vocab_size();
  // Without a prompt, start at the beginning of a line (or from the first
  // character of the vocabulary, for a text without newlines); that start is
  // not part of the returned text.
  std::vector<int64_t> ids = {tokenizer.id(U'\n').value_or(0)};
  if (!prompt.empty()) {
    try {
      ids = tokenizer.encode(prompt);
    } catch (const Error& e) {
      throw Error(std::string("sample: the prompt: ") + e.what());
    }
  }
  const size_t start_length = prompt.empty() ? 1 : 0;
  for (int64_t n = 0; n < options.tokens; ++n) {
    std::vector<double> scaled = logits.next(ids);
    for (double& s : scaled) s /= options.temperature;
    if (options.top_k > 0 && options.top_k < V) {
      std::vector<double> sorted = scaled;
      std::nth_element(sorted.begin(), sorted.begin() + (options.top_k - 1), sorted.end(), std::greater<>());
      const double kth = sorted[options.top_k - 1];
      for (double& s : scaled)
        if (s < kth) s = -INFINITY;
    }
    const std::vector<double> probs = softmax(Tensor::from_vector(scaled, {V}, DType::Float64)).to_vector();
    double u = gen.uniform(), cumulative = 0;
    // Rounding can leave u just above the last cumulative sum: fall back to the likeliest.
    int64_t next = std::max_element(probs.begin(), probs.end()) - probs.begin();
    for (int64_t v = 0; v < V; ++v) {
      cumulative += probs[v];
      if (u < cumulative) {
        next = v;
        break;
      }
    }
    ids.push_back(next);
  }
  return tokenizer.decode({ids.begin() + static_cast<std::ptrdiff_t>(start_length), ids.end()});
}

std::string generate(nn::GPT& model, const Tokenizer& tokenizer, const std::string& prompt,
                     const SampleOptions& options) {
  model.eval();
  if (options.no_kv_cache) {
    RecomputeLogits recompute(model);
    return generate(recompute, tokenizer, prompt, options);
  }
  CachedLogits cached(model);
  return generate(cached, tokenizer, prompt, options);
}

}  // namespace ag::char_lm
