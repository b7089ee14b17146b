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
// They run on the CPU. And `char_lm train` keeps RUN/loss.svg (loss_chart_svg)
// up to date at every evaluation.
#pragma once
#include <string>
#include <vector>

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

// A run's log.csv, by kind of row: each a curve of (iteration, value).
struct LossLog {
  struct Curve {
    std::vector<double> iter, value;
  };
  Curve batch, train, val;  // the loss of each training batch, and the evaluations' mean losses
  Curve lr;                 // the learning rate of each batch
};
LossLog read_loss_log(const std::string& log_csv_path);
inline constexpr const char* kLossAxis = "cross-entropy (nats per character)";

// `text` written to `path`, replacing it in one rename: a browser reloading it never reads half a file.
void replace_file(const std::string& path, const std::string& text);

// The training and validation loss of a run's log.csv against the iteration,
// the batch loss faintly behind them, the learning rate on a second axis.
std::string loss_chart_svg(const std::string& log_csv_path);
// The same, written to svg_path (replace_file).
void write_loss_chart(const std::string& log_csv_path, const std::string& svg_path);

}  // namespace ag::char_lm
