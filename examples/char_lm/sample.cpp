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
  for (int64_t n = 0; n < options.tokens; ++n) {
    const int64_t T = std::min<int64_t>(static_cast<int64_t>(ids.size()), block);
    const std::vector<int64_t> context(ids.end() - T, ids.end());
    const Tensor logits = model.forward(Tensor::from_indices(context, {1, T}).to(model.parameters()[0].device()));
    const Tensor last = slice(logits.reshape({T, V}), 0, T - 1, T).to(DType::Float64);  // [1, V]
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
