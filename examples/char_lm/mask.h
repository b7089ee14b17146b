#pragma once
#include <string>

#include "core/options.h"
#include "examples/char_lm/mask_options.h"
#include "nn/gpt.h"

namespace ag::char_lm {

// char_lm mask's options, from the table in examples/char_lm/mask_options.h.
struct MaskOptions {
  AG_DECLARE_OPTIONS(AG_CHAR_LM_MASK_OPTIONS)
};

// The model options a mask depends on; char_lm mask takes these and no others.
inline constexpr const char* kMaskModelOptions[] = {"block_size",  "n_layer",       "n_head",
                                                    "attn_window", "attn_dilation", "attn_global",
                                                    "attn_random_blocks", "attn_seed"};

// The attention mask of one layer and head of a model with `config`'s
// attn_* options, over its block_size positions, as text: one line per query
// i, one character per key j ('#' visible, '.' hidden), then how many entries
// are visible against full causal attention's T(T+1)/2. Options besides
// kMaskModelOptions are ignored.
std::string mask_picture(nn::GPTConfig config, const MaskOptions& options);

}  // namespace ag::char_lm
