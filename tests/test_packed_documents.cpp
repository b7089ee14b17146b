// Packed documents in a model (issue 50, GPT::set_documents): a row holding several documents,
// each seen only by its own queries (the document mask) and, under learned positions, at
// positions restarting with each document, gives every document the logits it gets alone —
// float64 ≤ 1e-12, learned, RoPE and ALiBi, every implementation.
#include <cmath>
#include <filesystem>
#include <fstream>
#include <vector>

#include "examples/common/sample.h"
#include "examples/common/train.h"
#include "nn/gpt.h"
#include "tests/char_lm_helpers.h"
#include "tests/helpers.h"

// The file's names and using-directives stay its own in a unity build, where the test
// files compile as one translation unit (CMakeLists.txt).
namespace packed_documents_test {

using namespace ag;
using namespace ag::nn;
using ag::test::attention_impls;

namespace {

// Documents of these lengths, back to back in each row (each row's lengths sum to T).
std::vector<int64_t> packed_document_ids(const std::vector<std::vector<int64_t>>& rows) {
  std::vector<int64_t> ids;
  for (const std::vector<int64_t>& lengths : rows)
    for (size_t doc = 0; doc < lengths.size(); ++doc)
      for (int64_t t = 0; t < lengths[doc]; ++t) ids.push_back(static_cast<int64_t>(doc) * 5 + 1);
  return ids;
}

}  // namespace

TEST_CASE("packed documents: a packed row equals its documents run alone (float64 ≤ 1e-12) — learned, rope, alibi") {
  constexpr int64_t B = 2, T = 16, V = 13;
  const std::vector<std::vector<int64_t>> lengths{{5, 6, 5}, {3, 13}};
  const std::vector<int64_t> ids = packed_document_ids(lengths);
  std::vector<int64_t> tokens(B * T);
  for (int64_t e = 0; e < B * T; ++e) tokens[e] = (e * 7 + 3) % V;
  const Tensor idx = Tensor::from_indices(tokens, {B, T});
  double worst = 0;
  for (PositionEncoding position : {PositionEncoding::Learned, PositionEncoding::Rope, PositionEncoding::Alibi})
    for (AttentionImpl impl : attention_impls()) {
      CAPTURE(name_of(position));
      CAPTURE(name_of(impl));
      GPTConfig config{.vocab_size = V, .block_size = T, .n_layer = 2, .n_head = 4, .n_kv_head = 2, .n_embd = 16};
      config.position = position;
      config.attn_impl = impl;
      Generator gen(31);
      GPT model(config, gen);
      model.to(DType::Float64);
      model.set_documents(Tensor::from_indices(ids, {B, T}));
      const Tensor packed = model.forward(idx).detach();  // [B, T, V]
      model.set_documents(Tensor());
      for (int64_t b = 0; b < B; ++b) {
        int64_t start = 0;
        for (const int64_t L : lengths[b]) {
          CAPTURE(b);
          CAPTURE(start);
          const Tensor alone = model.forward(slice(slice(idx, 0, b, b + 1), 1, start, start + L)).detach();
          const Tensor rows = slice(slice(packed, 0, b, b + 1), 1, start, start + L);
          CHECK_CLOSE(rows, alone, 1e-12);
          worst = std::max(worst, ag::test::relative_error(rows, alone));
          start += L;
        }
      }
    }
  MESSAGE("worst relative error, packed against alone: " << worst);
}

TEST_CASE("packed documents: bad ids and other attention functions are refused, naming what is wrong") {
  GPTConfig config{.vocab_size = 13, .block_size = 8, .n_layer = 1, .n_head = 2, .n_embd = 8};
  Generator gen(3);
  GPT model(config, gen);
  CHECK(ag::test::contains(ag::test::error_of([&] { model.set_documents(Tensor::from_indices({0, 0, 1}, {3})); }),
                           "document ids [3] int64 are not int64 [B, T]"));
  model.set_documents(Tensor::from_indices({0, 0, 1, 1}, {1, 4}));
  CHECK(ag::test::contains(ag::test::error_of([&] { model.forward(Tensor::from_indices({1, 2, 3}, {1, 3})); }),
                           "document ids [1,4] int64 are not [B, T] of the input's"));
  config.attention = AttentionFunction::Linear;
  GPT linear(config, gen);
  CHECK(ag::test::contains(ag::test::error_of([&] { linear.set_documents(Tensor::from_indices({0, 0, 1, 1}, {1, 4})); }),
                           "GPT: packed documents need softmax attention"));
  linear.set_documents(Tensor());  // none: nothing to do
}

TEST_CASE("packed documents: char_lm train --documents trains on packed windows, and refuses a separator the text lacks or a document longer than the block") {
  const std::string dir = std::filesystem::temp_directory_path() / "attograd_packed_documents";
  std::filesystem::remove_all(dir);
  std::string text;
  for (int doc = 0; doc < 60; ++doc) text += "doc " + std::to_string(doc) + " says hello world.\n\n";
  const std::string data = dir + ".txt";
  {
    std::ofstream out(data);
    out << text;
  }
  char_lm::TrainConfig c = ag::test::tiny_run(dir, data);
  c.run.max_iters = 3;
  c.run.eval_interval = 3;
  c.run.documents = "\n\n";
  // "doc 10 says hello world.\n\n" is 26 characters: a window of 16 cannot hold it whole.
  CHECK(ag::test::contains(ag::test::error_of([&] { char_lm::train(c); }),
                           "--documents: the training text's document at token 250 holds 26 tokens, more than --block-size 16"));
  CHECK(!std::filesystem::exists(dir + "/model.safetensors"));
  c.model.block_size = 32;
  const char_lm::TrainResult result = char_lm::train(c);
  REQUIRE(!result.batch_losses.empty());
  for (const double loss : result.batch_losses) CHECK(std::isfinite(loss));
  std::filesystem::remove_all(dir);
  c.run.documents = "###";  // '#' is not even in the text's characters
  CHECK(!ag::test::error_of([&] { char_lm::train(c); }).empty());
  c.run.documents = "..";  // characters of the text, never together
  CHECK(ag::test::contains(ag::test::error_of([&] { char_lm::train(c); }), "--documents: the training text holds no separator"));
  std::filesystem::remove_all(dir);
  std::filesystem::remove(data);
}

TEST_CASE("packed documents: sample --documents starts each document afresh, through the cache and without it") {
  using namespace ag::char_lm;
  const std::vector<int64_t> sep{2, 2};  // "\n\n" in a vocabulary whose id 2 is '\n'
  CHECK(document_start({0, 1, 2, 2}, sep) == 0);  // the separator ends at the last token: still its document
  CHECK(document_start({0, 1, 2, 2, 3}, sep) == 4);
  CHECK(document_start({0, 2, 2, 1, 2, 2, 3, 4}, sep) == 6);
  CHECK(document_start({0, 1, 3}, {}) == 0);
  GPTConfig config{.vocab_size = 7, .block_size = 16, .n_layer = 2, .n_head = 2, .n_embd = 8};
  Generator gen(5);
  GPT model(config, gen);
  model.to(DType::Float64);
  model.eval();
  NoGradGuard no_grad;
  const Context context = context_of(model, SampleOptions{});
  CachedLogits cached(model, context);
  RecomputeLogits recomputed(model, context);
  std::vector<int64_t> ids{0, 1, 3, 2, 2, 4, 5};  // a document, "\n\n", then the next one's first two tokens
  cached.next({0, 1, 3, 2, 2, 4});  // the cache holds the first document and more before the switch
  cached.start_document(5);
  recomputed.start_document(5);
  const std::vector<double> alone = model.forward(Tensor::from_indices({4, 5}, {1, 2})).to_vector();  // [1, 2, V]
  const Tensor expected = Tensor::from_vector({alone.begin() + 7, alone.end()}, {7}, DType::Float64);
  CHECK_CLOSE(Tensor::from_vector(cached.next(ids), {7}, DType::Float64), expected, 1e-12);
  CHECK_CLOSE(Tensor::from_vector(recomputed.next(ids), {7}, DType::Float64), expected, 1e-12);
  CHECK(cached.cache().length() == 2);
}

}  // namespace packed_documents_test
