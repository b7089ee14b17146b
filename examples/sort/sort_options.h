// sort's own options, one line each (core/options.h explains the columns; the
// model's are in nn/gpt_options.h, the training step's in optim/train_options.h).
#pragma once

//  kind   type     name            default  min  max               help
#define AG_SORT_OPTIONS(X) \
  X(Local, int64_t, max_iters,      500,     1,   int64_t{1} << 40, "training iterations") \
  X(Local, int64_t, log_interval,   100,     1,   int64_t{1} << 40, "a progress line every N iterations") \
  X(Local, int64_t, eval_sequences, 5000,    0,   1 << 24,          "held-out inputs scored at the end (0: none)")
