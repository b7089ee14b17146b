// What test_lstm.cpp and test_s4.cpp check alike of a model whose mixer is an op
// of its own (not attention): the programs a user runs on its checkpoint.
#pragma once
#include <doctest/doctest.h>

#include <cmath>
#include <initializer_list>
#include <string>
#include <tuple>
#include <vector>

#include "core/ops.h"
#include "core/safetensors.h"
#include "examples/common/checkpoint.h"
#include "examples/common/sample.h"
#include "nn/gpt.h"
#include "tests/char_lm_helpers.h"
#include "tests/helpers.h"

namespace ag::test {

// A float64 `model` of an own-op mixer (vocabulary >= 11) decoding 20 tokens, a prompt of 5 then one at a
// time: every step's logits are the full forward's (1e-12), its state is `state_bytes` from the prompt on
// and does not grow (no bytes per token), and a cleared cache starts again.
inline void check_decode_from_state(nn::GPT& model, int64_t state_bytes) {
  NoGradGuard no_grad;
  std::vector<int64_t> ids;
  for (int64_t t = 0; t < 20; ++t) ids.push_back((t * 7 + 3) % 11);
  const Tensor whole = model.forward(Tensor::from_indices(ids, {1, 20}));  // [1, 20, V]
  nn::KVCache cache = model.make_kv_cache(1);
  const Tensor prompt = model.forward_cached(Tensor::from_indices({ids.begin(), ids.begin() + 5}, {1, 5}), cache);
  CHECK(cache.bytes() == state_bytes);
  CHECK(cache.bytes_per_token() == 0);
  std::vector<Tensor> steps = {prompt};
  for (int64_t t = 5; t < 20; ++t) {
    steps.push_back(model.forward_cached(Tensor::from_indices({ids[t]}, {1, 1}), cache));
    CHECK_CLOSE(steps.back(), slice(whole, 1, t, t + 1), 1e-12);  // every step
  }
  CHECK(cache.length() == 20);
  CHECK(cache.bytes() == state_bytes);
  CHECK_CLOSE(concat(steps, 1), whole, 1e-12);
  cache.clear();
  CHECK_CLOSE(model.forward_cached(Tensor::from_indices({ids.begin(), ids.begin() + 5}, {1, 5}), cache), prompt, 1e-12);
}

// The model saved in `dir` (by char_lm::train, from text `data`) samples greedily the
// same text from its decode state as recomputed without one; char_lm's sample, grads
// (of an 8-token batch, written to dir/grads.safetensors) and eval run on it, and a
// fresh `train` with `train_options` runs; each tensor named in `gradients` has a
// finite, non-zero gradient.
inline void check_own_mixer_programs(const TempDir& dir, const std::string& data, const std::string& train_options,
                                     std::initializer_list<const char*> gradients) {
  const std::string path = char_lm::model_path(char_lm::find_checkpoint(dir.path()));
  char_lm::LoadedModel loaded = char_lm::load_model(path);
  char_lm::SampleOptions greedy;
  greedy.top_k = 1;
  greedy.tokens = 15;
  const std::string recurrent = char_lm::generate(*loaded.model, loaded.tokenizer, "", greedy);
  greedy.no_kv_cache = true;
  const std::string recomputed = char_lm::generate(*loaded.model, loaded.tokenizer, "", greedy);
  CHECK(recurrent.size() >= 15);
  CHECK(recurrent == recomputed);
  std::vector<int64_t> ids;
  for (int64_t t = 0; t < 9; ++t) ids.push_back(t % loaded.model->config().vocab_size);
  save_safetensors(dir.file("batch.safetensors"),
                   {{"idx", Tensor::from_indices({ids.begin(), ids.end() - 1}, {1, 8})},
                    {"targets", Tensor::from_indices({ids.begin() + 1, ids.end()}, {1, 8})}},
                   {});
  for (const std::string& command : {"sample --ckpt '" + dir.path() + "' --tokens 10 --prompt 'the'",
                                    "grads --weights '" + path + "' --batch '" + dir.file("batch.safetensors") +
                                        "' --out '" + dir.file("grads.safetensors") + "'",
                                    "eval --ckpt '" + dir.path() + "' --eval-iters 1",
                                    "train " + train_options + " --n-layer 1 --n-embd 16 --block-size 8 --batch-size 2 "
                                    "--max-iters 2 --eval-interval 1 --eval-iters 1 --sample-tokens 0 --data '" +
                                        data + "' --out '" + dir.file("cli") + "'"}) {
    int status = 0;  // not a structured binding: INFO captures it (clang 14)
    std::string output;
    std::tie(status, output) = run_char_lm(command);
    INFO(command);
    INFO(output);
    CHECK(status == 0);
  }
  const SafetensorsFile grads = load_safetensors(dir.file("grads.safetensors"));
  for (const char* name : gradients) {
    CAPTURE(name);
    REQUIRE(grads.contains(name));
    CHECK(std::isfinite(sum(grads.at(name) * grads.at(name)).item()));
    CHECK(sum(grads.at(name) * grads.at(name)).item() > 0);
  }
}

}  // namespace ag::test
