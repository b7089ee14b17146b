#pragma once
#include <string>

#include "examples/char_lm/data.h"
#include "nn/gpt.h"

namespace ag::char_lm {

struct SampleOptions {
  int64_t tokens = 500;
  double temperature = 0.8;
  int64_t top_k = 200;  // 0: all
  uint64_t seed = 1337;
};

// Continues `prompt` by `tokens` characters, one at a time, each drawn from
// softmax(logits / temperature) over the top_k most likely next characters,
// conditioning on at most the last block_size characters. Returns the prompt
// and its continuation.
std::string generate(nn::GPT& model, const Tokenizer& tokenizer, const std::string& prompt,
                     const SampleOptions& options);

}  // namespace ag::char_lm
