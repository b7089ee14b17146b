#include "examples/char_lm/mask.h"

#include <cstdio>

namespace ag::char_lm {

std::string mask_picture(nn::GPTConfig config, const MaskOptions& options) {
  config.n_embd = config.n_head;  // the mask does not depend on the width, but check() wants a multiple of n_head
  config.check();
  AG_CHECK(options.layer < config.n_layer && options.head < config.n_head,
           "mask: --layer " << options.layer << " --head " << options.head << " outside the model's " << config.n_layer
                            << " layers and " << config.n_head << " heads");
  const AttentionMask mask{.causal = true, .q_offset = 0, .pattern = nn::attention_pattern(config, options.layer)};
  const int64_t T = config.block_size;
  std::string picture;
  int64_t visible = 0;
  for (int64_t i = 0; i < T; ++i) {
    const AttentionMask::Row row = mask.row(options.head, i);
    for (int64_t j = 0; j < T; ++j) {
      visible += row.visible(j);
      picture += row.visible(j) ? '#' : '.';
    }
    picture += '\n';
  }
  const int64_t causal = T * (T + 1) / 2;
  char summary[160];
  std::snprintf(summary, sizeof summary, "%lld of %lld causal entries visible (%.1f %%)\n",
                static_cast<long long>(visible), static_cast<long long>(causal), 100.0 * visible / causal);
  return picture + summary;
}

}  // namespace ag::char_lm
