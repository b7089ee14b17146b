// char_lm info [--ckpt DIR]: what a checkpoint holds, without loading it into a
// run: the model (nn::describe and its options), the run's options as a
// command line, its history (the checkpoints kept, their iterations and
// validation losses, the best), and what this machine would run it on.
#pragma once
#include <string>

#include "core/options.h"
#include "examples/char_lm/info_options.h"

namespace ag::char_lm {

struct InfoOptions {
  AG_DECLARE_OPTIONS(AG_CHAR_LM_INFO_OPTIONS)
};

// The text `char_lm info` prints.
std::string checkpoint_info(const InfoOptions& options);

}  // namespace ag::char_lm
