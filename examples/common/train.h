// char_lm's training loop (nanoGPT's shakespeare_char recipe): the one training
// step (optim/train_step.h) with AdamW, warmup + cosine decay and gradient
// clipping, periodic evaluation, checkpoints and a CSV log.
// It lives in examples/common, the machinery of the character-level GPT
// (namespace ag::char_lm) beside its checkpoints (checkpoint.h), sampling
// (sample.h) and evaluation (eval.h): char_lm's commands are built on them, and
// the tests drive them in-process.
#pragma once
#include <optional>
#include <set>
#include <string>
#include <vector>

#include "core/options.h"
#include "dist/communicator.h"
#include "examples/common/text_data.h"
#include "examples/common/run_options.h"
#include "nn/gpt.h"
#include "optim/data_parallel.h"
#include "optim/train_step.h"

namespace ag::char_lm {

// char_lm train's own options, from the table in examples/common/run_options.h.
struct RunOptions {
  AG_DECLARE_OPTIONS(AG_CHAR_LM_RUN_OPTIONS)
};

// Every option of a run: the three tables. Defaults are nanoGPT's documented
// CPU run of shakespeare_char.
struct TrainConfig {
  nn::GPTConfig model;         // vocab_size comes from the text
  optim::TrainOptions optim;
  RunOptions run;
  // The options given on the command line (snake_case names). On --resume the
  // others take the run's saved values; unset (a program's own call), every
  // option counts as given, so each must equal the run's.
  std::optional<std::set<std::string>> given;
  bool quiet = false;  // no progress lines (tests)

  // Every option's range and the rules that relate them (the model's, the
  // training step's): an OptionError naming the options.
  void check() const;

  // Calls visit(config, kinds) for each of the three tables, so code that reads
  // or writes options handles all of them alike.
  template <class Self, class Visit> static void for_each_table(Self& self, Visit&& visit) {
    visit(self.model);
    visit(self.optim);
    visit(self.run);
  }
};

struct EvalRecord {
  int64_t iter;
  double train_loss, val_loss;
};

struct TrainResult {
  std::vector<double> batch_losses;  // the training loss of each iteration run, in order
  std::vector<EvalRecord> evals;
  double ms_per_iter = 0;  // median over the iterations run (after the first 10 when more than 20 ran)
  double collective_ms_per_iter = 0;  // of which in collectives (dist::Communicator::collective_ms), median
  std::string sample;
};

TrainResult train(TrainConfig config);

// Mean loss of `model` over c.run.eval_iters batches of each split, as train()
// evaluates (char_lm convert reports a converted model's loss this way).
EvalRecord evaluate(nn::GPT& model, const text::Dataset& data, const TrainConfig& c, int64_t iter,
                    const optim::ProcessGrid& grid);

}  // namespace ag::char_lm
