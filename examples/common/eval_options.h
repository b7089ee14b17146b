// char_lm eval's options, one line each (core/options.h explains the columns).
#pragma once
#include "examples/common/device_option.h"

//  kind   type         name        default  min  max      help
#define AG_CHAR_LM_EVAL_OPTIONS(X) \
  X(Local, std::string, ckpt,       "out",   0,   0,       "the run (or unit) to evaluate: its newest complete checkpoint") \
  X(Local, int64_t,     block_size, 0,       0,   1 << 20, "sequence length T to evaluate at (0: the model's block_size); longer than training measures length extrapolation (not for learned positions)") \
  X(Local, int64_t,     eval_iters, 0,       0,   1 << 20, "batches per split (0: the run's --eval-iters)") \
  X(Local, std::string, data,       "",      0,   0,       "the text (default: the run's --data)") \
  AG_DEVICE_OPTION(X)
