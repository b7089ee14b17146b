// char_lm eval --ckpt DIR [--block-size T]: a checkpoint's train and val loss
// on windows of T tokens, scored as training evaluates (char_lm::evaluate: the
// run's batch size, its evaluation batches). With T longer than the model was
// trained on, how well its positions extrapolate (docs/training.md, "Length
// extrapolation"); a model with learned positions has none past block_size.
#pragma once
#include <string>

#include "core/options.h"
#include "examples/common/eval_options.h"
#include "examples/common/train.h"

namespace ag::char_lm {

struct EvalOptions {
  AG_DECLARE_OPTIONS(AG_CHAR_LM_EVAL_OPTIONS)
};

struct EvalResult {
  EvalRecord losses;        // at the checkpoint's iteration
  int64_t block_size;       // T evaluated at
  int64_t trained_block_size;
  std::string description;  // nn::describe of the model
};

EvalResult evaluate_checkpoint(const EvalOptions& options);

}  // namespace ag::char_lm
