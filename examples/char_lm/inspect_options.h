// The options of char_lm's commands that look inside a trained model
// (attention, explain, heads, faithfulness, report), one line each (core/options.h explains
// the columns). Rows several commands share are one macro each.
#pragma once

//  kind   type         name        default                                      min  max      help
#define AG_CHAR_LM_INSPECT_CKPT(X) \
  X(Local, std::string, ckpt,       "out",                                       0,   0,       "a run directory (its newest complete checkpoint), a ckpt-N/ unit, or RUN/best")
#define AG_CHAR_LM_INSPECT_PROMPT(X) \
  X(Local, std::string, prompt,     "JULIET:\nO Romeo, Romeo! wherefore art thou Romeo?\n", 0, 0,     "the text to look at (at most block_size characters)")
#define AG_CHAR_LM_INSPECT_STEPS(X) \
  X(Local, int64_t,     steps,      64,                                          1,   1 << 16, "integrated gradients: trapezoid intervals from the baseline to the input")
// The validation text, whose windows the heads and faithfulness commands read.
#define AG_CHAR_LM_INSPECT_TEXT(X) \
  X(Local, std::string, data,       "",                                          0,   0,       "the training text (default: $ATTOGRAD_DATA, then data/tinyshakespeare.txt, then ../shared/data/tinyshakespeare.txt)") \
  X(Local, uint64_t,    seed,       1337,                                        0,   kNoLimit, "seed of the validation windows' offsets (and of the random orders drawn)")
// Validation batches, for head importance and the loss before and after pruning.
#define AG_CHAR_LM_INSPECT_VAL(X) \
  AG_CHAR_LM_INSPECT_TEXT(X) \
  X(Local, int64_t,     eval_iters, 20,                                          1,   1 << 20, "validation batches") \
  X(Local, int64_t,     batch_size, 12,                                          1,   1 << 20, "sequences per validation batch (each block_size long)")
// Is attention an explanation: how many predictions are compared with erasure.
#define AG_CHAR_LM_INSPECT_FAITHFULNESS(X) \
  X(Local, int64_t,     prompts,    32,                                          1,   1 << 16, "faithfulness: validation windows (block_size characters each) to explain") \
  X(Local, int64_t,     positions,  4,                                           1,   1 << 20, "faithfulness: predictions explained per window, at distinct positions drawn from [8, block_size)") \
  X(Local, int64_t,     ig_steps,   16,                                          1,   1 << 16, "faithfulness: integrated gradients' trapezoid intervals (fewer than explain's 64: they are most of the time, and the ranking they give barely moves)")

#define AG_CHAR_LM_ATTENTION_OPTIONS(X) \
  AG_CHAR_LM_INSPECT_CKPT(X) \
  AG_CHAR_LM_INSPECT_PROMPT(X) \
  X(Local, std::string, out,        "attention",                                 0,   0,       "directory for layer-N.svg (one per layer), rollout.svg and flow.svg") \
  X(Local, bool,        overwrite,  false,                                       0,   0,       "write --out even if it holds files (they may be replaced)") \
  X(Local, bool,        decompose,  false,                                       0,   0,       "also decompose-N.svg per layer: each head's score q·k/√d_h split into its norm part ‖q‖‖k‖/√d_h and its angle part cos θ, side by side")

#define AG_CHAR_LM_EXPLAIN_OPTIONS(X) \
  AG_CHAR_LM_INSPECT_CKPT(X) \
  AG_CHAR_LM_INSPECT_PROMPT(X) \
  X(Local, int64_t,     position,   -1,                                          -1,  1 << 20, "the prediction to explain: the one made at this prompt position (-1: the last)") \
  AG_CHAR_LM_INSPECT_STEPS(X)

#define AG_CHAR_LM_HEADS_OPTIONS(X) \
  AG_CHAR_LM_INSPECT_CKPT(X) \
  AG_CHAR_LM_INSPECT_VAL(X) \
  X(Local, int64_t,     prune,      0,                                           0,   1 << 20, "switch off the K least important heads and write the model to --out") \
  X(Local, bool,        curve,      false,                                       0,   0,       "switch the heads off one at a time (least important first, most important first, random): val loss against heads remaining, drawn to --curve-svg") \
  X(Local, std::string, curve_svg,  "heads-curve.svg",                           0,   0,       "where --curve draws its chart") \
  X(Local, std::string, out,        "",                                          0,   0,       "where --prune writes the pruned model (a checkpoint directory)") \
  X(Local, bool,        overwrite,  false,                                       0,   0,       "write --out even if it holds a run (which is lost)")

#define AG_CHAR_LM_FAITHFULNESS_OPTIONS(X) \
  AG_CHAR_LM_INSPECT_CKPT(X) \
  AG_CHAR_LM_INSPECT_TEXT(X) \
  AG_CHAR_LM_INSPECT_FAITHFULNESS(X) \
  X(Local, std::string, out,        "faithfulness",                              0,   0,       "directory for spearman.svg and deletion.svg") \
  X(Local, bool,        overwrite,  false,                                       0,   0,       "write --out even if it holds files (they may be replaced)")

#define AG_CHAR_LM_REPORT_OPTIONS(X) \
  AG_CHAR_LM_INSPECT_CKPT(X) \
  AG_CHAR_LM_INSPECT_PROMPT(X) \
  AG_CHAR_LM_INSPECT_STEPS(X) \
  AG_CHAR_LM_INSPECT_VAL(X) \
  AG_CHAR_LM_INSPECT_FAITHFULNESS(X) \
  X(Local, int64_t,     tokens,     300,                                         0,   1 << 20, "characters of the sample") \
  X(Local, std::string, out,        "report.html",                               0,   0,       "the report (one self-contained HTML file)")
