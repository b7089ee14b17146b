// The options of char_lm's commands that look inside a trained model
// (attention, explain, heads, report), one line each (core/options.h explains
// the columns). Rows several commands share are one macro each.
#pragma once

//  kind   type         name        default                                      min  max      help
#define AG_CHAR_LM_INSPECT_CKPT(X) \
  X(Local, std::string, ckpt,       "out",                                       0,   0,       "a run directory (its newest complete checkpoint), a ckpt-N/ unit, or RUN/best")
#define AG_CHAR_LM_INSPECT_PROMPT(X) \
  X(Local, std::string, prompt,     "JULIET:\nO Romeo, Romeo! wherefore art thou Romeo?\n", 0, 0,     "the text to look at (at most block_size characters)")
#define AG_CHAR_LM_INSPECT_STEPS(X) \
  X(Local, int64_t,     steps,      64,                                          1,   1 << 16, "integrated gradients: trapezoid intervals from the baseline to the input")
// Validation batches, for head importance and the loss before and after pruning.
#define AG_CHAR_LM_INSPECT_VAL(X) \
  X(Local, std::string, data,       "",                                          0,   0,       "the training text (default: $ATTOGRAD_DATA, then data/tinyshakespeare.txt, then ../shared/data/tinyshakespeare.txt)") \
  X(Local, int64_t,     eval_iters, 20,                                          1,   1 << 20, "validation batches") \
  X(Local, int64_t,     batch_size, 12,                                          1,   1 << 20, "sequences per validation batch (each block_size long)") \
  X(Local, uint64_t,    seed,       1337,                                        0,   kNoLimit, "seed of the validation batches' offsets")

#define AG_CHAR_LM_ATTENTION_OPTIONS(X) \
  AG_CHAR_LM_INSPECT_CKPT(X) \
  AG_CHAR_LM_INSPECT_PROMPT(X) \
  X(Local, std::string, out,        "attention",                                 0,   0,       "directory for layer-N.svg (one per layer) and rollout.svg") \
  X(Local, bool,        overwrite,  false,                                       0,   0,       "write --out even if it holds files (they may be replaced)")

#define AG_CHAR_LM_EXPLAIN_OPTIONS(X) \
  AG_CHAR_LM_INSPECT_CKPT(X) \
  AG_CHAR_LM_INSPECT_PROMPT(X) \
  X(Local, int64_t,     position,   -1,                                          -1,  1 << 20, "the prediction to explain: the one made at this prompt position (-1: the last)") \
  AG_CHAR_LM_INSPECT_STEPS(X)

#define AG_CHAR_LM_HEADS_OPTIONS(X) \
  AG_CHAR_LM_INSPECT_CKPT(X) \
  AG_CHAR_LM_INSPECT_VAL(X) \
  X(Local, int64_t,     prune,      0,                                           0,   1 << 20, "switch off the K least important heads and write the model to --out") \
  X(Local, std::string, out,        "",                                          0,   0,       "where --prune writes the pruned model (a checkpoint directory)") \
  X(Local, bool,        overwrite,  false,                                       0,   0,       "write --out even if it holds a run (which is lost)")

#define AG_CHAR_LM_REPORT_OPTIONS(X) \
  AG_CHAR_LM_INSPECT_CKPT(X) \
  AG_CHAR_LM_INSPECT_PROMPT(X) \
  AG_CHAR_LM_INSPECT_STEPS(X) \
  AG_CHAR_LM_INSPECT_VAL(X) \
  X(Local, int64_t,     tokens,     300,                                         0,   1 << 20, "characters of the sample") \
  X(Local, std::string, out,        "report.html",                               0,   0,       "the report (one self-contained HTML file)")
