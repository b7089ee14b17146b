// char_lm checkpoints, two safetensors files in one directory:
//   model.safetensors        every parameter under its module path, float32,
//                            with the model's options (nn/gpt_options.h: Model
//                            and Derived, snake_case keys), the tokenizer's
//                            characters ("chars") and the iteration ("iter")
//                            in __metadata__;
//   train_state.safetensors  the optimizer state, the generators' states and
//                            the iteration, with the run's options (Model, Run
//                            and Setting, dashed keys) in __metadata__, so
//                            --resume continues the same run.
// Both are written atomically (save_safetensors writes a temp file, then
// renames). A __metadata__ key this build does not know is an error.
#pragma once
#include <memory>
#include <string>

#include "core/safetensors.h"
#include "examples/char_lm/data.h"
#include "examples/char_lm/train.h"
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
// `dtype`. The model's options come from the file; `settings` supplies the
// others (dropout, the attention implementation: choices of a run, not
// properties of the model). ag::Error naming the file on a missing, unknown or
// bad key, or a parameter of the wrong shape or dtype; sizes are checked against
// the file's tensors before anything is allocated.
LoadedModel load_model(const std::string& path, DType dtype = DType::Float32, const nn::GPTConfig& settings = {});

// Everything besides the weights that decides how training continues.
struct TrainState {
  int64_t iter = 0;                               // the next iteration to run
  uint64_t batch_seed = 0, batch_offset = 0;      // the training-batch generator
  uint64_t dropout_seed = 0, dropout_offset = 0;  // the default generator (dropout masks)
};
void save_train_state(const std::string& path, const TrainState& state, const TrainConfig& config,
                      const optim::Optimizer& optimizer);
// Restores the optimizer from a loaded train_state file and returns the rest.
TrainState restore_train_state(const SafetensorsFile& file, optim::Optimizer& optimizer);
// The run's options, as a train_state file saved them: the ones a command line
// did not give again take these values; one it gave another value is an error
// (unless a Setting). A key no table knows is an error.
void resume_options(TrainConfig& config, const SafetensorsFile& file);

}  // namespace ag::char_lm
