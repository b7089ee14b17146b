// char_lm convert: a checkpoint with H_kv kv heads (multi-head: H_kv = H) to
// one with fewer, G, by mean-pooling each group's key and value projections
// (Ainslie et al. 2023, "GQA", §2: pooling keeps more of the trained model than
// choosing one head or initialising afresh). Query heads are untouched: head h
// now reads the pooled kv head h / (H / G), the mean of the heads its group read.
// The result is a run unit that `char_lm train --resume` continues ("uptraining").
#pragma once
#include <string>

#include "core/options.h"
#include "examples/char_lm/convert_options.h"

namespace ag::char_lm {

// char_lm convert's options, from the table in examples/char_lm/convert_options.h.
struct ConvertOptions {
  AG_DECLARE_OPTIONS(AG_CHAR_LM_CONVERT_OPTIONS)
};

struct ConvertResult {
  int64_t iter;                          // the checkpoint's iteration, kept
  double val_loss_before, val_loss_after;  // of the source and the converted model, as train evaluates
};

// Writes the converted checkpoint as a unit of the run directory options.out
// (which must not hold a run): the weights, and the training state with Adam's
// moments of W_K, W_V (and their biases) pooled the same way (an approximation:
// the pooled parameters' own moments were never measured). Evaluates both
// models on the run's text.
ConvertResult convert_kv_heads(const ConvertOptions& options);

}  // namespace ag::char_lm
