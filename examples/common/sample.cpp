#include "examples/common/sample.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <map>
#include <utility>

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

Context context_of(const nn::GPT& model, const SampleOptions& options) {
  const nn::GPTConfig& c = model.config();
  const std::string position = name_of(c.position);
  if (c.positions_end_at_block_size())
    return {Context::AtEnd::Restart, c.block_size, c.block_size,
            "learned positions end at block_size " + std::to_string(c.block_size) +
                ": the context restarts from the last " + std::to_string(std::max<int64_t>(1, c.block_size / 2)) +
                " tokens (a rope, alibi or none model generates past it)"};
  if (model.kv_cache_rolls())
    return {Context::AtEnd::Roll, int64_t{1} << 62, c.block_size, ""};
  const int64_t span = options.max_context > 0 ? options.max_context : 4 * c.block_size;
  return {Context::AtEnd::Stop, span, c.block_size,
          "stopped at --max-context " + std::to_string(span) + " positions: a " + position +
              " model's cache holds that many (raise --max-context; a model with --attn-window and no random "
              "blocks rolls its cache instead)"};
}

bool ContextWindow::advance(int64_t n) {
  if (context_.at_end != Context::AtEnd::Restart) {
    AG_CHECK(n <= context_.span, "sample: " << n << " tokens pass the context of " << context_.span);
    return false;
  }
  const int64_t span = context_.span;
  const bool restart = n - start_ > span;
  if (restart) start_ = n - (started_ ? std::max<int64_t>(1, span / 2) : span);
  started_ = true;
  return restart;
}

std::vector<double> RecomputeLogits::next(const std::vector<int64_t>& ids) {
  window_.advance(static_cast<int64_t>(ids.size()));
  return last_row(model_.forward(as_batch(ids.begin() + window_.start(), ids.end(), model_)));
}

namespace {
int64_t cache_capacity(const nn::GPT& model, const Context& context) {
  switch (context.at_end) {
    case Context::AtEnd::Restart: return model.config().block_size;
    case Context::AtEnd::Stop: return context.span;
    case Context::AtEnd::Roll: return model.rolling_kv_cache_capacity(context.chunk);
  }
  return 0;
}
}  // namespace

CachedLogits::CachedLogits(nn::GPT& model, const Context& context)
    : model_(model), cache_(model.make_kv_cache(1, cache_capacity(model, context))), window_(context) {}

std::vector<double> CachedLogits::next(const std::vector<int64_t>& ids) {
  const int64_t n = static_cast<int64_t>(ids.size());
  AG_CHECK(n > window_.start() + cache_.length(), "CachedLogits: no new token since the last call");
  if (window_.advance(n)) cache_.clear();
  Tensor logits;
  for (int64_t first = window_.start() + cache_.length(); first < n; first += window_.context().chunk) {
    const int64_t last = std::min(n, first + window_.context().chunk);
    logits = model_.forward_cached(as_batch(ids.begin() + first, ids.begin() + last, model_), cache_);
  }
  return last_row(logits);
}

int64_t document_start(const std::vector<int64_t>& ids, const std::vector<int64_t>& separator) {
  const auto n = static_cast<int64_t>(ids.size()), m = static_cast<int64_t>(separator.size());
  if (m == 0) return 0;
  for (int64_t end = n - 1; end >= m; --end)  // a separator in ids[end − m, end), end ≤ n − 1
    if (std::equal(separator.begin(), separator.end(), ids.begin() + (end - m))) return end;
  return 0;
}

std::string generate(NextTokenLogits& logits, const text::Tokenizer& tokenizer, const std::string& prompt,
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
  std::vector<int64_t> separator;
  if (!options.documents.empty()) {
    try {
      separator = tokenizer.encode(options.documents);
    } catch (const Error& e) {
      throw Error(std::string("sample: --documents: ") + e.what());
    }
  }
  int64_t document = 0;  // where the last token's document starts
  bool told_restart = false;
  for (int64_t n = 0; n < options.tokens; ++n) {
    const Context& context = logits.context();
    const int64_t length = static_cast<int64_t>(ids.size());
    if (const int64_t start = document_start(ids, separator); start != document) {
      logits.start_document(start);
      document = start;
    }
    if (!logits.takes(length)) {
      std::fprintf(stderr, "sample: after %lld tokens, %s\n", static_cast<long long>(n), context.why.c_str());
      break;
    }
    if (!told_restart && context.at_end == Context::AtEnd::Restart && length > context.span) {
      std::fprintf(stderr, "sample: %s\n", context.why.c_str());  // once, at the first restart
      told_restart = true;
    }
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

std::string generate(nn::GPT& model, const text::Tokenizer& tokenizer, const std::string& prompt,
                     const SampleOptions& options) {
  model.eval();
  const Context context = context_of(model, options);
  if (options.no_kv_cache) {
    RecomputeLogits recompute(model, context);
    return generate(recompute, tokenizer, prompt, options);
  }
  CachedLogits cached(model, context);
  return generate(cached, tokenizer, prompt, options);
}

std::vector<std::string> split_candidates(const std::string& list) {
  std::vector<std::string> candidates;
  size_t from = 0;
  for (size_t bar = list.find('|'); ; bar = list.find('|', from)) {
    candidates.push_back(list.substr(from, bar == std::string::npos ? std::string::npos : bar - from));
    AG_CHECK(!candidates.back().empty(), "sample: --tree \"" << list << "\" holds an empty candidate (candidates are separated by '|')");
    if (bar == std::string::npos) break;
    from = bar + 1;
  }
  return candidates;
}

namespace {
// log softmax of one row of logits [V].
std::vector<double> log_probs(std::vector<double> row) {
  const double top = *std::max_element(row.begin(), row.end());
  double sum = 0;
  for (double x : row) sum += std::exp(x - top);
  for (double& x : row) x -= top + std::log(sum);
  return row;
}
}  // namespace

TreeScores score_continuations(nn::GPT& model, const text::Tokenizer& tokenizer, const std::string& prompt,
                               const std::vector<std::string>& candidates) {
  NoGradGuard no_grad;
  model.eval();
  const auto encode = [&](const std::string& text, const char* what) {
    try {
      return tokenizer.encode(text);
    } catch (const Error& e) {
      throw Error(std::string("sample: ") + what + ": " + e.what());
    }
  };
  const std::vector<int64_t> prefix = prompt.empty() ? std::vector<int64_t>{tokenizer.id(U'\n').value_or(0)}
                                                     : encode(prompt, "the prompt");
  // The trie: node n holds tokens[n] after parents[n] (−1: after the prompt); each candidate ends at a node.
  std::vector<int64_t> tokens, parents;
  std::map<std::pair<int64_t, int64_t>, int64_t> child;  // (parent, token) -> node
  std::vector<std::vector<int64_t>> paths;
  for (const std::string& candidate : candidates) {
    int64_t at = -1;
    paths.emplace_back();
    for (int64_t token : encode(candidate, "a --tree candidate")) {
      const auto [it, added] = child.try_emplace({at, token}, static_cast<int64_t>(tokens.size()));
      if (added) {
        tokens.push_back(token);
        parents.push_back(at);
      }
      at = it->second;
      paths.back().push_back(at);
    }
  }
  const int64_t P = static_cast<int64_t>(prefix.size()), N = static_cast<int64_t>(tokens.size());
  const Device device = model.parameters()[0].device();
  nn::KVCache cache = model.make_kv_cache(1, P + N);
  const Tensor prompt_logits = model.forward_cached(Tensor::from_indices(prefix, {1, P}).to(device), cache);
  const Tensor tree_logits = model.forward_tree(Tensor::from_indices(tokens, {1, N}).to(device), parents, cache);
  const int64_t V = tree_logits.size(2);
  const std::vector<double> after_prompt = log_probs(last_row(prompt_logits));
  const std::vector<double> all = tree_logits.to(DType::Float64).to_vector();  // [N, V]
  TreeScores scores{.candidates = {}, .nodes = N};
  for (size_t c = 0; c < candidates.size(); ++c) {
    ScoredContinuation scored{.text = candidates[c], .characters = static_cast<int64_t>(paths[c].size())};
    for (int64_t node : paths[c]) {
      const int64_t parent = parents[static_cast<size_t>(node)];
      const std::vector<double> row =
          parent < 0 ? after_prompt : log_probs({all.begin() + parent * V, all.begin() + (parent + 1) * V});
      scored.log_prob += row[static_cast<size_t>(tokens[static_cast<size_t>(node)])];
    }
    scores.candidates.push_back(scored);
  }
  return scores;
}

}  // namespace ag::char_lm
