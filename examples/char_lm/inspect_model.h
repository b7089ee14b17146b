// What char_lm's commands that look inside a model share (inspect.cpp: attention
// and explain; heads.cpp: heads and faithfulness; report.cpp): the model read
// from a checkpoint and the prompt's characters, validation batches, head
// importance and its curves, the faithfulness run. The pictures come from
// examples/interp/pictures.h.
#pragma once
#include <algorithm>
#include <chrono>
#include <numeric>
#include <string>
#include <vector>

#include "core/error.h"
#include "examples/common/checkpoint.h"
#include "examples/char_lm/data.h"
#include "examples/interp/analysis.h"
#include "examples/interp/faithfulness.h"

namespace ag::char_lm {

struct Inspected {
  std::string unit;  // the checkpoint directory read
  LoadedModel loaded;
};

// The newest unit under `ckpt`, its model loaded to run (load_model_to_run); says on stderr what it read.
Inspected load(const std::string& ckpt);
// The prompt's ids; ag::Error if empty, not in the vocabulary, or longer than block_size.
std::vector<int64_t> encode_prompt(const Inspected& in, const std::string& prompt);
// Each id as its character (UTF-8), the labels of the pictures.
std::vector<std::string> characters(const Inspected& in, const std::vector<int64_t>& ids);

template <class Options> std::vector<interp::TokenBatch> validation_batches(const Options& o, const Inspected& in) {
  const Dataset data = make_dataset(read_text(resolve_data_path(o.data)), in.loaded.model->config().block_size);
  AG_CHECK(data.tokenizer.chars() == in.loaded.tokenizer.chars(),
           "--data: the text's characters are not the model's (is it the text the model was trained on?)");
  Generator gen(o.seed);
  std::vector<interp::TokenBatch> batches(o.eval_iters);
  for (interp::TokenBatch& b : batches)
    get_batch(data.val, o.batch_size, data.eval_window, gen, b.x, b.y);
  return batches;
}

// Integrated gradients of the prediction at `position` (-1: the last).
interp::Attribution explain(const Inspected& in, const std::vector<int64_t>& ids, int64_t position, int64_t steps);

struct HeadsTable {
  std::vector<std::vector<double>> importance, gates;
};

HeadsTable measure_heads(Inspected& in, const std::vector<interp::TokenBatch>& batches);

// Val loss as the heads go, in three orders: least important first, most important first, random.
struct HeadCurves {
  std::vector<std::string> orders;
  std::vector<std::vector<double>> losses;  // [order][heads switched off]
  int64_t heads_on = 0;
};

HeadCurves head_curves(nn::GPT& model, const HeadsTable& table, const std::vector<interp::TokenBatch>& batches,
                       uint64_t seed);
std::string head_curve_svg(const HeadCurves& curves);
std::string head_curve_line(const HeadCurves& curves);  // the curves at half the heads, one line

// N validation windows of block_size characters, and K distinct positions in [8, block_size) in each.
struct Predictions {
  std::vector<std::vector<int64_t>> prompts, positions;
};

template <class Options> Predictions draw_predictions(const Options& o, const Inspected& in) {
  const int64_t T = in.loaded.model->config().block_size;
  AG_CHECK(o.positions <= T - interp::kDeletionSteps,
           "--positions " << o.positions << ": a window of block_size " << T << " has " << std::max<int64_t>(0, T - interp::kDeletionSteps)
                          << " positions with " << interp::kDeletionSteps << " or more characters before them to erase");
  const Dataset data = make_dataset(read_text(resolve_data_path(o.data)), T);
  AG_CHECK(data.tokenizer.chars() == in.loaded.tokenizer.chars(),
           "--data: the text's characters are not the model's (is it the text the model was trained on?)");
  Generator gen(o.seed);
  Tensor x, y;
  get_batch(data.val, o.prompts, T, gen, x, y);
  const std::vector<double> ids = x.to_vector();  // [N, T]
  Predictions p;
  for (int64_t n = 0; n < o.prompts; ++n) {
    p.prompts.emplace_back(ids.begin() + n * T, ids.begin() + (n + 1) * T);
    std::vector<int64_t> candidates(T - interp::kDeletionSteps);
    std::iota(candidates.begin(), candidates.end(), interp::kDeletionSteps);
    for (int64_t k = 0; k < o.positions; ++k)  // a partial Fisher-Yates: the first K of a shuffle
      std::swap(candidates[k], candidates[k + gen.integer(candidates.size() - k)]);
    p.positions.emplace_back(candidates.begin(), candidates.begin() + o.positions);
  }
  return p;
}

struct FaithfulnessRun {
  interp::Faithfulness result;
  double seconds = 0;
};

template <class Options> FaithfulnessRun run_faithfulness_on(const Options& o, const Inspected& in) {
  const Predictions p = draw_predictions(o, in);
  const auto start = std::chrono::steady_clock::now();
  FaithfulnessRun run{interp::measure_faithfulness(*in.loaded.model, p.prompts, p.positions, o.ig_steps, o.seed), 0};
  run.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  return run;
}

std::string faithfulness_caption(const FaithfulnessRun& run, int64_t steps);

}  // namespace ag::char_lm
