// char_lm's commands that look inside a trained model (examples/interp/ does
// the measuring and the drawing; this file picks the data and the words):
//
//   char_lm attention --ckpt DIR --prompt TEXT --out DIR2   layer-N.svg per layer, rollout.svg, flow.svg
//                     [--decompose]                         and decompose-N.svg: q·k as norm part × angle part
//   char_lm explain   --ckpt DIR --prompt TEXT [--position t] [--steps 64]
//   char_lm heads     --ckpt DIR [--prune K --out DIR2] [--curve --curve-svg FILE]
//   char_lm faithfulness --ckpt DIR [--prompts N --positions K --out DIR2]
//   char_lm report    --ckpt DIR --prompt TEXT [--out report.html]
//
// They run on the CPU.
#pragma once
#include "core/options.h"
#include "examples/char_lm/inspect_options.h"

namespace ag::char_lm {

struct AttentionOptions {
  AG_DECLARE_OPTIONS(AG_CHAR_LM_ATTENTION_OPTIONS)
};
struct ExplainOptions {
  AG_DECLARE_OPTIONS(AG_CHAR_LM_EXPLAIN_OPTIONS)
};
struct HeadsOptions {
  AG_DECLARE_OPTIONS(AG_CHAR_LM_HEADS_OPTIONS)
};
struct FaithfulnessOptions {
  AG_DECLARE_OPTIONS(AG_CHAR_LM_FAITHFULNESS_OPTIONS)
};
struct ReportOptions {
  AG_DECLARE_OPTIONS(AG_CHAR_LM_REPORT_OPTIONS)
};

// Each command prints what it did to stdout and returns the process's exit code.
int run_attention(const AttentionOptions& options);
int run_explain(const ExplainOptions& options);
int run_heads(const HeadsOptions& options);
int run_faithfulness(const FaithfulnessOptions& options);
int run_report(const ReportOptions& options);

}  // namespace ag::char_lm
