// Token trees in decode (issue 50, GPT::forward_tree): a tree of candidate continuations
// scored in one cached forward, each node seeing the cached prefix, its ancestors and
// itself (MaskMods::parents over the cache's rows), at position prefix + its depth. Each
// node's logits equal those of its path run alone — without a cache, and decoded one
// token at a time through the cache — float64 ≤ 1e-12, dense and flash, learned and no
// positions, on the CPU and on CUDA; the cache truncated to the prefix then decodes as if the
// tree had not been.
#include <memory>
#include <string>
#include <vector>

#include "examples/common/sample.h"
#include "nn/gpt.h"
#include "nn/kv_cache.h"
#include "tests/helpers.h"

// The file's names and using-directives stay its own in a unity build, where the test
// files compile as one translation unit (CMakeLists.txt).
namespace token_tree_test {

using namespace ag;
using namespace ag::nn;

namespace {

constexpr int64_t kV = 11;

// A tree of 9 nodes: two roots, a chain of depth 3 under the first, siblings at each level.
//   0 ─┬─ 1 ── 3 ── 7
//      └─ 2 ── 4
//   5 ─┬─ 6
//      └─ 8
const std::vector<int64_t> kParents{-1, 0, 0, 1, 2, -1, 5, 3, 5};
const std::vector<int64_t> kNodeTokens{3, 7, 1, 9, 4, 2, 10, 5, 6};
const std::vector<int64_t> kPrefix{1, 4, 1, 5, 9, 2};

// The path's tokens after the prefix: root … node.
std::vector<int64_t> path_of(int64_t node) {
  std::vector<int64_t> path;
  for (int64_t n = node; n >= 0; n = kParents[static_cast<size_t>(n)])
    path.insert(path.begin(), kNodeTokens[static_cast<size_t>(n)]);
  return path;
}

std::unique_ptr<GPT> tree_model(PositionEncoding position, AttentionImpl impl) {
  GPTConfig config{.vocab_size = kV, .block_size = 16, .n_layer = 2, .n_head = 4, .n_kv_head = 2, .n_embd = 16};
  config.position = position;
  config.attn_impl = impl;
  Generator gen(47);
  auto model = std::make_unique<GPT>(config, gen);
  model->to(DType::Float64);
  return model;
}

Tensor row(const Tensor& logits, int64_t t) { return slice(logits, 1, t, t + 1).detach().to(Device::CPU); }

}  // namespace

TEST_CASE_EVERY_DEVICE("token tree: each node's logits equal its path run alone and decoded alone (float64 ≤ 1e-12)") {
  NoGradGuard no_grad;
  const int64_t N = static_cast<int64_t>(kParents.size()), P = static_cast<int64_t>(kPrefix.size());
  double worst = 0;
  for (PositionEncoding position : {PositionEncoding::Learned, PositionEncoding::None})
    for (AttentionImpl impl : ag::test::attention_impls()) {
      CAPTURE(name_of(position));
      CAPTURE(name_of(impl));
      const std::unique_ptr<GPT> model_owner = tree_model(position, impl);
      GPT& model = *model_owner;
      model.to(device);
      const auto ids = [&](const std::vector<int64_t>& tokens) {
        return Tensor::from_indices(tokens, {1, static_cast<int64_t>(tokens.size())}).to(device);
      };
      KVCache cache = model.make_kv_cache(1);
      model.forward_cached(ids(kPrefix), cache);
      const Tensor tree = model.forward_tree(ids(kNodeTokens), kParents, cache).detach();
      CHECK(cache.length() == P + N);  // the nodes joined the cache
      for (int64_t n = 0; n < N; ++n) {
        CAPTURE(n);
        std::vector<int64_t> whole = kPrefix;
        const std::vector<int64_t> path = path_of(n);
        whole.insert(whole.end(), path.begin(), path.end());
        const int64_t L = static_cast<int64_t>(whole.size());
        const Tensor alone = row(model.forward(ids(whole)), L - 1);
        CHECK_CLOSE(row(tree, n), alone, 1e-12);
        worst = std::max(worst, ag::test::relative_error(row(tree, n), alone));
        cache.truncate(P);  // the prefix alone again: the path decoded one token at a time
        Tensor decoded;
        for (int64_t token : path) decoded = model.forward_cached(ids({token}), cache);
        CHECK_CLOSE(row(tree, n), row(decoded, 0), 1e-12);
      }
    }
  MESSAGE("worst relative error, a tree's node against its path alone: " << worst);
}

TEST_CASE("token tree: a batch of prefixes, and the cache truncated after the tree decodes as if it had not been") {
  NoGradGuard no_grad;
  const std::unique_ptr<GPT> model_owner = tree_model(PositionEncoding::Learned, AttentionImpl::Flash);
  GPT& model = *model_owner;
  const int64_t N = static_cast<int64_t>(kParents.size()), P = static_cast<int64_t>(kPrefix.size());
  std::vector<int64_t> prefixes = kPrefix, nodes = kNodeTokens;
  for (int64_t t : kPrefix) prefixes.push_back((t * 3 + 1) % kV);  // a second, different row
  for (int64_t t : kNodeTokens) nodes.push_back((t + 4) % kV);
  KVCache cache = model.make_kv_cache(2);
  model.forward_cached(Tensor::from_indices(prefixes, {2, P}), cache);
  const Tensor tree = model.forward_tree(Tensor::from_indices(nodes, {2, N}), kParents, cache).detach();
  for (int64_t b = 0; b < 2; ++b) {
    CAPTURE(b);
    const int64_t n = 7;  // the deepest node
    std::vector<int64_t> whole(prefixes.begin() + b * P, prefixes.begin() + (b + 1) * P);
    for (int64_t m : {0, 1, 3, 7}) whole.push_back(nodes[static_cast<size_t>(b * N + m)]);
    const int64_t L = static_cast<int64_t>(whole.size());
    const Tensor alone = row(model.forward(Tensor::from_indices(whole, {1, L})), L - 1);
    CHECK_CLOSE(slice(row(tree, n), 0, b, b + 1), alone, 1e-12);
  }
  // After truncate(P) the next token is decoded over the prefix only, as without the tree.
  cache.truncate(P);
  const Tensor next = model.forward_cached(Tensor::from_indices({5, 6}, {2, 1}), cache).detach();
  KVCache fresh = model.make_kv_cache(2);
  model.forward_cached(Tensor::from_indices(prefixes, {2, P}), fresh);
  const Tensor expected = model.forward_cached(Tensor::from_indices({5, 6}, {2, 1}), fresh).detach();
  CHECK_CLOSE(next, expected, 0);
}

TEST_CASE("token tree: bad trees and models it cannot serve are refused, naming what is wrong") {
  NoGradGuard no_grad;
  const std::unique_ptr<GPT> model_owner = tree_model(PositionEncoding::Learned, AttentionImpl::Dense);
  GPT& model = *model_owner;
  KVCache cache = model.make_kv_cache(1);
  model.forward_cached(Tensor::from_indices(kPrefix, {1, 6}), cache);
  const Tensor three = Tensor::from_indices({1, 2, 3}, {1, 3});
  CHECK_THROWS_WITH_AS(model.forward_tree(three, std::vector<int64_t>{-1, 2, 0}, cache),
                       doctest::Contains("node 1 has parent 2: a parent must be an earlier node"), Error);
  CHECK_THROWS_WITH_AS(model.forward_tree(three, std::vector<int64_t>{-1, 0, 1, 2}, cache),
                       doctest::Contains("is not int64 [1, 4]"), Error);
  // A chain of 10 after 6 cached positions reaches position 15; 11 reach 16 = block_size.
  std::vector<int64_t> chain(11), tokens(11, 1);
  for (int64_t n = 0; n < 11; ++n) chain[static_cast<size_t>(n)] = n - 1;
  CHECK_THROWS_WITH_AS(model.forward_tree(Tensor::from_indices(tokens, {1, 11}), chain, cache),
                       doctest::Contains("deepest node sits at position 16, past block_size = 16"), Error);
  CHECK(cache.length() == 6);  // nothing joined the cache
  CHECK_THROWS_WITH_AS(cache.truncate(7), doctest::Contains("cannot truncate 6 positions to 7"), Error);
  const std::unique_ptr<GPT> rope_owner = tree_model(PositionEncoding::Rope, AttentionImpl::Dense);
  GPT& rope = *rope_owner;
  KVCache rope_cache = rope.make_kv_cache(1);
  CHECK_THROWS_WITH_AS(rope.forward_tree(three, std::vector<int64_t>{-1, 0, 0}, rope_cache),
                       doctest::Contains("a token tree needs learned or no positions"), Error);
}

TEST_CASE("token tree: sample --tree's candidates scored in one forward equal their log-probabilities run alone") {
  const std::unique_ptr<GPT> model_owner = tree_model(PositionEncoding::Learned, AttentionImpl::Flash);
  GPT& model = *model_owner;
  const text::Tokenizer tokenizer(U"abcdefghijk");  // kV = 11 characters
  const std::vector<std::string> candidates = char_lm::split_candidates("de|df|dfa|k|dfa");
  REQUIRE(candidates.size() == 5);
  const char_lm::TreeScores scores = char_lm::score_continuations(model, tokenizer, "abca", candidates);
  CHECK(scores.nodes == 5);  // d, e, f, a, k: "dfa" twice and the shared "d" each one node
  REQUIRE(scores.candidates.size() == candidates.size());
  NoGradGuard no_grad;
  for (size_t c = 0; c < candidates.size(); ++c) {
    CAPTURE(candidates[c]);
    const std::vector<int64_t> prompt = tokenizer.encode("abca"), tail = tokenizer.encode(candidates[c]);
    std::vector<int64_t> whole = prompt;
    whole.insert(whole.end(), tail.begin(), tail.end());
    const int64_t L = static_cast<int64_t>(whole.size());
    const std::vector<double> logp = log_softmax(model.forward(Tensor::from_indices(whole, {1, L}))).to_vector();
    double expected = 0;  // Σ log p(tail_i | prompt, tail_<i): row P − 1 + i predicts tail_i
    for (size_t i = 0; i < tail.size(); ++i)
      expected += logp[(prompt.size() - 1 + i) * static_cast<size_t>(kV) + static_cast<size_t>(tail[i])];
    CHECK(scores.candidates[c].text == candidates[c]);
    CHECK(scores.candidates[c].characters == static_cast<int64_t>(tail.size()));
    CHECK(std::abs(scores.candidates[c].log_prob - expected) <= 1e-12 * std::max(1.0, std::abs(expected)));
  }
  CHECK_THROWS_WITH_AS(char_lm::split_candidates("a||b"), doctest::Contains("holds an empty candidate"), Error);
  CHECK_THROWS_WITH_AS(char_lm::score_continuations(model, tokenizer, "abc", {"xyz"}),
                       doctest::Contains("a --tree candidate"), Error);
}

}  // namespace token_tree_test
