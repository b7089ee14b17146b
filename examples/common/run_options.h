// char_lm train's own options, one line each (core/options.h explains the
// columns; the model's are in nn/gpt_options.h, the training step's in
// optim/train_options.h). Run and Setting options are saved with the training
// state under their dashed names.
#pragma once
#include "examples/common/device_option.h"

//  kind     type         name           default      min  max               help
#define AG_CHAR_LM_RUN_OPTIONS(X) \
  X(Setting, std::string, data,          "",          0,   0,                "training text (default: $ATTOGRAD_DATA, then data/tinyshakespeare.txt, then ../shared/data/tinyshakespeare.txt)") \
  X(Local,   std::string, out,           "out",       0,   0,                "checkpoint and log directory") \
  X(Local,   bool,        resume,        false,       0,   0,                "continue the run saved in --out (options not given again keep the run's values)") \
  X(Local,   bool,        overwrite,     false,       0,   0,                "start a new run in --out even if it holds one (which is lost)") \
  X(Setting, int64_t,     max_iters,     2000,        0,   int64_t{1} << 40, "train until this iteration") \
  X(Run,     int64_t,     eval_interval, 250,         1,   int64_t{1} << 40, "evaluate and checkpoint every N iterations") \
  X(Setting, int64_t,     keep_checkpoints, 2,        1,   1 << 20,          "checkpoints kept in --out (the newest, besides the best by validation loss)") \
  X(Run,     int64_t,     eval_iters,    20,          1,   1 << 20,          "batches per evaluation") \
  X(Setting, int64_t,     log_interval,  10,          1,   int64_t{1} << 40, "a progress line every N iterations") \
  X(Setting, int64_t,     sample_tokens, 500,         0,   1 << 24,          "characters to generate at the end (0: none)") \
  X(Local,   int64_t,     context_parallel, 1,        1,   1 << 20,          "split each sequence over groups of P processes (ring attention; linear and ssd gather chunk states): the processes form a dp x P grid, P dividing their count, block_size a multiple of 2P") \
  X(Local,   bool,        detect_anomaly, false,      0,   0,                "check every step, and rerun a diverged one checking every op, to name the op that went non-finite (slow)") \
  X(Local,   std::string, documents,     "",          0,   0,                "pack documents: the text's documents end at each occurrence of this separator; in training each window's queries see only their own document's keys and learned positions restart with each document (softmax attention; evaluation and sampling read the text as one stream)") \
  AG_DEVICE_OPTION(X)
