// char_lm with grouped-query attention: n_kv_head in checkpoints (absent = n_head,
// so older checkpoints load unchanged), sampling through the KV cache (greedy
// gives the recomputed text; past block_size every step equals a full forward
// of the cache's window), and convert followed by train --resume.
#include <cstdio>
#include <filesystem>

#include "core/autograd.h"
#include "core/safetensors.h"
#include "examples/common/checkpoint.h"
#include "examples/common/sample.h"
#include "tests/char_lm_helpers.h"
#include "tests/helpers.h"

// The file's names and using-directives stay its own in a unity build, where the test
// files compile as one translation unit (CMakeLists.txt).
namespace char_lm_gqa_test {

using namespace ag;
using namespace ag::char_lm;

namespace {
// The tests' directories, removed when the tests exit.
const ag::test::TempDir& gqa_scratch() {
  static const ag::test::TempDir root("char_lm_gqa_tests");
  return root;
}

// A tiny run in gqa_scratch()/name with `n_kv_head` kv heads of 4 query heads,
// trained for 20 iterations (about a second).
std::string trained_run(const std::string& name, int64_t n_kv_head) {
  const std::string dir = gqa_scratch().file(name);
  std::filesystem::remove_all(dir);
  TrainConfig c = ag::test::tiny_run(dir);
  c.model.n_head = 4;
  c.model.n_kv_head = n_kv_head;
  c.model.block_size = 24;
  train(c);
  return dir;
}
}  // namespace

TEST_CASE("char_lm gqa: n_kv_head is saved, and a checkpoint without it is multi-head") {
  const std::string dir = trained_run("saved", 2);
  const std::string path = model_path(find_checkpoint(dir));
  SafetensorsFile file = load_safetensors(path);
  CHECK(file.metadata.at("n_kv_head") == "2");
  CHECK(file.at("blocks.0.attn.w_k.weight").shape() == Shape{32, 16});  // H_kv·d_h = 2·8
  CHECK(load_model(path).model->config().kv_heads() == 2);

  const std::string bad = dir + "/bad.safetensors";
  file.metadata.erase("n_kv_head");  // as an older checkpoint: then it must hold [C, C] projections
  save_safetensors(bad, file.tensors, file.metadata);
  CHECK_THROWS_WITH_AS(load_model(bad), doctest::Contains("'blocks.0.attn.w_k.weight' is [32,16] but __metadata__ (n_embd, n_head, n_kv_head) says [32,32]"),
                       Error);

  const std::string mha_dir = trained_run("mha", 0);
  SafetensorsFile mha = load_safetensors(model_path(find_checkpoint(mha_dir)));
  mha.metadata.erase("n_kv_head");
  const std::string old = mha_dir + "/old.safetensors";
  save_safetensors(old, mha.tensors, mha.metadata);
  CHECK(load_model(old).model->config().kv_heads() == 4);
}

TEST_CASE("char_lm gqa: greedy sampling gives the same text with and without the KV cache") {
  for (int64_t n_kv_head : {4, 1}) {
    CAPTURE(n_kv_head);
    const LoadedModel loaded = load_model(model_path(find_checkpoint(trained_run("greedy", n_kv_head))));
    SampleOptions o;
    o.top_k = 1;
    o.tokens = 16;  // with the 8-character prompt, all of block_size = 24
    const std::string cached = generate(*loaded.model, loaded.tokenizer, "the king", o);
    o.no_kv_cache = true;
    const std::string recomputed = generate(*loaded.model, loaded.tokenizer, "the king", o);
    CHECK(cached.size() > std::string("the king").size());
    CHECK(cached == recomputed);
  }
}

TEST_CASE("char_lm gqa: past block_size, greedy text is the same with and without the KV cache") {
  // Both follow one ContextWindow: the cache refills with the last block_size / 2
  // tokens, and recomputing runs the same windows.
  for (int64_t n_kv_head : {4, 1}) {
    CAPTURE(n_kv_head);
    const LoadedModel loaded = load_model(model_path(find_checkpoint(trained_run("greedy", n_kv_head))));
    const int64_t block = loaded.model->config().block_size;
    SampleOptions o;
    o.top_k = 1;
    o.tokens = 3 * block;  // three refills and more
    const std::string cached = generate(*loaded.model, loaded.tokenizer, "the king", o);
    o.no_kv_cache = true;
    const std::string recomputed = generate(*loaded.model, loaded.tokenizer, "the king", o);
    CHECK(static_cast<int64_t>(cached.size()) >= 3 * block);
    CHECK(cached == recomputed);
    // A prompt longer than block_size starts from its last block_size tokens either way.
    std::string long_prompt;
    while (static_cast<int64_t>(long_prompt.size()) <= block + 5) long_prompt += "the queen ";
    o.tokens = block;
    const std::string recomputed_long = generate(*loaded.model, loaded.tokenizer, long_prompt, o);
    o.no_kv_cache = false;
    CHECK(generate(*loaded.model, loaded.tokenizer, long_prompt, o) == recomputed_long);

    // Greedy text from a barely trained model may not depend on distant context,
    // so also every step's logits: the same window gives the same logits.
    nn::GPT& model = *loaded.model;
    model.eval();
    NoGradGuard no_grad;
    const int64_t V = model.config().vocab_size;
    const Context context = context_of(model, SampleOptions{});
    CachedLogits cached_logits(model, context);
    RecomputeLogits recomputed_logits(model, context);
    Generator gen(5);
    std::vector<int64_t> ids = {1, 2, 3};
    for (int64_t step = 0; step < 3 * block; ++step) {
      CAPTURE(step);
      const Tensor from_cache = Tensor::from_vector(cached_logits.next(ids), {V}, DType::Float64);
      CHECK_CLOSE(from_cache, Tensor::from_vector(recomputed_logits.next(ids), {V}, DType::Float64), 1e-5);
      ids.push_back(static_cast<int64_t>(gen.integer(V)));
    }
  }
}

TEST_CASE("char_lm gqa: past block_size the cache refills with the last half, each step a full forward of its window") {
  const LoadedModel loaded = load_model(model_path(find_checkpoint(trained_run("refill", 2))));
  nn::GPT& model = *loaded.model;
  model.eval();
  NoGradGuard no_grad;
  const int64_t block = model.config().block_size, V = model.config().vocab_size;
  CachedLogits cached(model, context_of(model, SampleOptions{}));
  Generator gen(3);
  std::vector<int64_t> ids = {1, 2, 3};
  std::vector<int64_t> windows;
  for (int64_t step = 0; step < 3 * block; ++step) {
    CAPTURE(step);
    const Tensor logits = Tensor::from_vector(cached.next(ids), {1, V}, DType::Float64);
    const int64_t start = cached.window_start(), n = static_cast<int64_t>(ids.size());
    REQUIRE(cached.cache().length() == n - start);
    CHECK(n - start >= std::min(n, block / 2));  // the whole sequence until the first refill
    CHECK(n - start <= block);
    const std::vector<int64_t> window(ids.begin() + start, ids.end());
    const Tensor full = model.forward(Tensor::from_indices(window, {1, n - start}));
    CHECK_CLOSE(logits, slice(full.reshape({n - start, V}), 0, n - start - 1, n - start).to(DType::Float64), 1e-5);
    if (windows.empty() || windows.back() != start) windows.push_back(start);
    ids.push_back(static_cast<int64_t>(gen.integer(V)));
  }
  CHECK(windows.size() >= 4);  // it refilled, more than once
}

TEST_CASE("char_lm gqa: convert mean-pools each group's W_K, W_V and train --resume continues the run") {
  const std::string source = trained_run("convert_source", 0);
  const std::string out = gqa_scratch().file("converted");
  std::filesystem::remove_all(out);
  // char_lm convert (convert_kv_heads, examples/char_lm/convert.h), run as a user runs it.
  const std::string convert = "convert --ckpt " + source + " --n-kv-head 2 --out " + out;
  const auto [status, output] = ag::test::run_char_lm(convert);
  REQUIRE(status == 0);
  long long iter = 0;
  double val_loss_before = 0, val_loss_after = 0;
  const size_t at = output.find("iteration ");
  REQUIRE(at != std::string::npos);
  REQUIRE(std::sscanf(output.c_str() + at, "iteration %lld: val loss %lf with the source's kv heads, %lf", &iter,
                      &val_loss_before, &val_loss_after) == 3);
  CHECK(iter == 20);
  CHECK(std::isfinite(val_loss_before));
  CHECK(std::isfinite(val_loss_after));

  const SafetensorsFile before = load_safetensors(model_path(find_checkpoint(source)));
  const LoadedModel converted = load_model(model_path(find_checkpoint(out)));
  CHECK(converted.model->config().kv_heads() == 2);
  // kv head g = mean of source heads 2g and 2g + 1 (d_h = 8 columns each).
  const Tensor w_k = before.at("blocks.0.attn.w_k.weight");  // [32, 32]
  const Tensor expected = (slice(w_k, 1, 0, 8) + slice(w_k, 1, 8, 16)) * 0.5;
  const Tensor got = slice(converted.model->block(0).attn().named_parameters()[2].tensor, 1, 0, 8);
  CHECK_CLOSE(got, expected, 1e-7);

  TrainConfig resume = ag::test::tiny_run(out);
  resume.given = std::set<std::string>{"max_iters"};
  resume.run.max_iters = 30;
  resume.run.resume = true;
  const TrainResult uptrained = train(resume);
  CHECK(uptrained.batch_losses.size() == 10);
  REQUIRE(!uptrained.evals.empty());
  CHECK(uptrained.evals.back().iter == 30);
  CHECK(std::isfinite(uptrained.evals.back().val_loss));

  // --out holds a run now: refused, unless --overwrite, which leaves no unit of the old run to be taken as newest.
  const auto [refused, refusal] = ag::test::run_char_lm(convert);
  CHECK(refused != 0);
  CHECK(ag::test::contains(refusal, "convert: '" + out + "' holds a run already; pass --overwrite"));
  REQUIRE(ag::test::run_char_lm(convert + " --overwrite").first == 0);
  CHECK(find_checkpoint(out) == out + "/ckpt-00000020");
}

}  // namespace char_lm_gqa_test
