// Training and scoring one cell of the lab: for each learning rate of its
// sweep, a fresh GPT trained by the one training step (optim/train_step.h,
// AdamW with warmup and cosine decay, as char_lm and sort train) on batches
// drawn fresh from the task's generator (the text's windows for text), then
// scored on held-out examples from a generator of their own. The cell keeps
// the rate with the best held-out score (accuracy; loss for text), as Zoology
// sweeps its learning rates.
#pragma once
#include <functional>
#include <optional>
#include <string>
#include <vector>

#include "examples/common/text_data.h"
#include "examples/lab/grid.h"

namespace ag::lab {

// Where a cell's runs train and how often they are scored on the way: the
// invocation's, not the cell's (its budget is the cell's own, cell.budget), so
// the same cell trained on either device, or drawn with a finer curve, is the
// same experiment and a resumed lab keeps it.
struct RunSettings {
  int64_t eval_interval = 100;  // held-out scores on the way, for the progress line and the curve
  Device device = Device::CPU;  // where the model, its optimizer state and the batches live
  // Where each finished run of a cell is kept (<id>.run<k>.csv, its curve in <id>.run<k>.curve.csv),
  // so that a cell cut short (a device's lease ending mid-sweep) resumes at its next learning rate;
  // "" keeps none.
  std::string runs_dir = "";
};

struct Score {
  double accuracy = 0;  // of the scored positions, the fraction whose argmax is the target
  double loss = 0;      // mean cross-entropy over them
};

struct CurvePoint {
  double seconds;  // training time so far (scoring excluded)
  int64_t step;
  double loss;      // the step's training loss
  double accuracy;  // held-out, at evaluations only (else NaN)
};

struct RunResult {
  double lr = 0;
  int64_t steps = 0;
  Score score;
  double ms_per_iter = 0;  // median
  double tokens_per_s = 0;
  double peak_mb = 0;      // CPU: resident memory above the level before the model was made;
                           // CUDA: the device memory the run's allocator held at most
  double seconds = 0;      // training time
  double wall_seconds = 0; // the whole run's: setup, training and scoring (the device time it took)
  std::vector<CurvePoint> curve;
};

// Where a run is, for the progress line: step (of cell.budget.max_iters), its loss, the last held-out accuracy.
using StepReport = std::function<void(int64_t step, double loss, double accuracy)>;

// The text of the text task (its tokens per cell, as the cell's block size asks).
struct TextData {
  std::string path, text;
};

// The model a cell trains, its vocabulary set from the task (text: from `text`).
nn::GPTConfig cell_model(const Cell& cell, const TextData* text);

// The fixed training set of a cell with --train-examples (examples/lab/tasks.h), seeded from its --seed.
FixedSet fixed_set(const Cell& cell);
// The steps of each of the cell's runs: --max-iters, or --epochs passes over the fixed set.
int64_t run_steps(const Cell& cell);

// Throws ag::Error (with the reason) when the model or the task refuses the cell's options.
void check_cell(const Cell& cell, const TextData* text);

// One run at `lr`. Throws ag::Error when it diverges (the training step's check_finite).
RunResult train_run(const Cell& cell, double lr, const RunSettings& settings, const TextData* text, const StepReport& report);

// A curve as its .curve.csv's text (seconds,step,loss,accuracy): every evaluation, and the
// training steps thinned to about 500 (every k-th), so a run of tens of thousands of steps
// leaves a file of kilobytes.
std::string curve_csv(const std::vector<CurvePoint>& curve);

// Floats a decoder of this model holds after T positions, in every layer
// (nn::KVCache): keys and values for softmax (T of them, or a window's whatever the positions),
// the recurrent state for linear attention and ssd, whatever T.
int64_t state_floats(const nn::GPTConfig& model);

// The cell's row of results.csv and the winning run's curve: status "ok",
// "refused" (the reason: what check_cell said) or "diverged" (every rate did;
// the last reason).
struct CellResult {
  Row row;
  std::vector<CurvePoint> curve;
};
CellResult run_cell(const Cell& cell, const RunSettings& settings, const TextData* text,
                    const std::function<void(double lr, int64_t step, double loss, double accuracy)>& report);

}  // namespace ag::lab
