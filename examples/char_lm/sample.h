#pragma once
#include <string>

#include "core/options.h"
#include "examples/char_lm/sample_options.h"
#include "examples/char_lm/data.h"
#include "nn/gpt.h"

namespace ag::char_lm {

// char_lm sample's options, from the table in examples/char_lm/sample_options.h.
struct SampleOptions {
  AG_DECLARE_OPTIONS(AG_CHAR_LM_SAMPLE_OPTIONS)
};

// Continues `prompt` (not options.prompt, so callers can loop) by `tokens` characters, one at a time, each drawn from
// softmax(logits / temperature) over the top_k most likely next characters,
// conditioning on at most the last block_size characters. Returns the prompt
// and its continuation.
std::string generate(nn::GPT& model, const Tokenizer& tokenizer, const std::string& prompt,
                     const SampleOptions& options);

}  // namespace ag::char_lm
