// char_lm checkpoints, two safetensors files in one directory:
//   model.safetensors        every parameter under its module path, float32,
//                            with the model config and the tokenizer's
//                            characters in __metadata__;
//   train_state.safetensors  the optimizer state, the generators' states and
//                            the iteration, so --resume continues the same run.
// Both are written atomically (save_safetensors writes a temp file, then renames).
#pragma once
#include <memory>
#include <string>

#include "core/safetensors.h"
#include "examples/char_lm/data.h"
#include "nn/gpt.h"
#include "optim/optimizer.h"

namespace ag::char_lm {

struct LoadedModel {
  std::unique_ptr<nn::GPT> model;
  Tokenizer tokenizer;
  int64_t iter = -1;  // the training iteration it was saved at, if recorded
};

std::string model_path(const std::string& dir);
std::string train_state_path(const std::string& dir);

// `iter` (if >= 0) is recorded, so a resume can check that the model and the
// train state are from the same checkpoint.
void save_model(const std::string& path, const nn::GPT& model, const Tokenizer& tokenizer, int64_t iter = -1);
// Builds the model its metadata describes and loads its weights, converted to
// `dtype`. Dropout is a training choice, not part of the saved model, so the
// caller gives it. ag::Error naming the file on a missing key, a bad value or a
// parameter of the wrong shape.
LoadedModel load_model(const std::string& path, DType dtype = DType::Float32, double dropout = 0.0);

// Everything besides the weights that decides how training continues.
struct TrainState {
  int64_t iter = 0;                       // the next iteration to run
  uint64_t batch_seed = 0, batch_offset = 0;      // the training-batch generator
  uint64_t dropout_seed = 0, dropout_offset = 0;  // the default generator (dropout masks)
  Metadata options;  // the options that define the run ("lr" -> "0.001", ...), so a resume can check them
};
void save_train_state(const std::string& path, const TrainState& state, const optim::Optimizer& optimizer);
TrainState load_train_state(const std::string& path, optim::Optimizer& optimizer);

}  // namespace ag::char_lm
