#include "examples/char_lm/sample.h"

#include <algorithm>
#include <cmath>

#include "core/autograd.h"
#include "core/ops.h"

namespace ag::char_lm {

std::string generate(nn::GPT& model, const Tokenizer& tokenizer, const std::string& prompt,
                     const SampleOptions& options) {
  AG_CHECK(options.temperature > 0, "sample: temperature " << options.temperature << " must be positive");
  NoGradGuard no_grad;
  model.eval();
  Generator gen(options.seed);
  const int64_t V = tokenizer.vocab_size(), block = model.config().block_size;
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
  const Device device = model.parameters()[0].device();
  // The logits [1, V] after ids[from, to), given a state holding ids before `from` (or none).
  const auto logits_after = [&](size_t from, size_t to, nn::GenerationState* state) {
    const int64_t T = static_cast<int64_t>(to - from);
    const std::vector<int64_t> context(ids.begin() + static_cast<std::ptrdiff_t>(from),
                                       ids.begin() + static_cast<std::ptrdiff_t>(to));
    const Tensor input = Tensor::from_indices(context, {1, T}).to(device);
    const Tensor logits = state ? model.forward_recurrent(input, *state) : model.forward(input);
    return slice(logits.reshape({T, V}), 0, T - 1, T).to(DType::Float64);
  };
  // A linear-attention model generates as an RNN: each token updates every
  // layer's state (constant time and memory per token) instead of recomputing
  // the context. Its positions end at block_size; then the state is rebuilt
  // from the last block_size / 2 tokens (where the recomputing path slides its
  // window by one token at a time, so the two differ from there on).
  const bool recurrent = !options.no_kv_cache && model.config().attention == AttentionFunction::Linear;
  nn::GenerationState state;
  size_t in_state = 0;  // ids[0, in_state) are in the state (or were dropped from its window)
  for (int64_t n = 0; n < options.tokens; ++n) {
    Tensor last;  // [1, V]
    if (recurrent) {
      if (state.length + static_cast<int64_t>(ids.size() - in_state) > block) {
        state = {};
        in_state = ids.size() - static_cast<size_t>(std::min<int64_t>(std::max<int64_t>(block / 2, 1), ids.size()));
      }
      last = logits_after(in_state, ids.size(), &state);
      in_state = ids.size();
    } else {
      last = logits_after(ids.size() - static_cast<size_t>(std::min<int64_t>(ids.size(), block)), ids.size(), nullptr);
    }
    std::vector<double> scaled = (last * (1.0 / options.temperature)).to_vector();
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

}  // namespace ag::char_lm
