// char_lm checkpoints. A run directory keeps one unit per save:
//
//   RUN/ckpt-00000250/   model.safetensors, train_state.safetensors, manifest.json
//   RUN/best             a symbolic link to the unit with the lowest validation loss
//   RUN/log.csv
//
// A unit is written under a temporary name (RUN/.ckpt-00000250.tmp-<pid>), each
// file flushed to disk, the manifest (each file's size and checksum, the
// iteration, the validation loss) last, then made visible by one rename: a unit
// is either complete or absent. The newest --keep-checkpoints units are kept
// (and the best). So a kill at any moment, or a full disk, leaves at worst a
// temporary, removed at the next start, beside intact earlier units: a run can
// always be resumed. Readers take the newest unit whose files match its
// manifest; a unit's own directory, or a directory from before units that holds
// model.safetensors itself, works too.
//
// The two files of a unit:
//   model.safetensors        every parameter under its module path, float32,
//                            with the model's options (nn/gpt_options.h: Model
//                            and Derived, snake_case keys), the tokenizer's
//                            characters ("chars") and the iteration ("iter")
//                            in __metadata__;
//   train_state.safetensors  the optimizer state, the generators' states and
//                            the iteration, with the run's options (Model, Run
//                            and Setting, dashed keys) in __metadata__, so
//                            --resume continues the same run.
// A __metadata__ key this build does not know is an error.
#pragma once
#include <memory>
#include <set>
#include <string>

#include "core/safetensors.h"
#include "examples/common/text_data.h"
#include "examples/common/train.h"
#include "nn/gpt.h"
#include "optim/optimizer.h"

namespace ag::char_lm {

struct LoadedModel {
  std::unique_ptr<nn::GPT> model;
  text::Tokenizer tokenizer;
  int64_t iter = -1;  // the training iteration it was saved at, if recorded
};

std::string model_path(const std::string& dir);
std::string train_state_path(const std::string& dir);

// `iter` (if >= 0) is recorded, so a resume can check that the model and the
// train state are from the same checkpoint.
void save_model(const std::string& path, const nn::GPT& model, const text::Tokenizer& tokenizer, int64_t iter = -1);
// Builds the model its metadata describes and loads its weights, converted to
// `dtype`. The model's options come from the file; `settings` supplies the
// others (dropout, the attention implementation: choices of a run, not
// properties of the model). ag::Error naming the file and the key on a missing,
// unknown or bad key, or a parameter of the wrong shape or dtype; sizes are checked against
// the file's tensors before anything is allocated.
LoadedModel load_model(const std::string& path, DType dtype = DType::Float32, const nn::GPTConfig& settings = {});

// load_model for a command that only runs the model (sample, eval, convert and
// the inspect commands): a model whose float32 arithmetic cannot stay finite is
// refused before the command prints or writes its result. A parameter holding
// a value over √FLT_MAX ≈ 1.8e19 in magnitude is refused at once, naming it;
// and every forward of the model is watched (Module::set_activation_hook):
// the first activation, in the order computed, that holds a NaN or an infinity
// is an ag::Error naming the module that computed it (blocks.1.attn: the one
// whose parameters are blocks.1.attn.*).
LoadedModel load_model_to_run(const std::string& path, const nn::GPTConfig& settings = {});

// Everything besides the weights that decides how training continues.
struct TrainState {
  int64_t iter = 0;                               // the next iteration to run
  uint64_t batch_seed = 0, batch_offset = 0;      // the training-batch generator
  uint64_t dropout_seed = 0, dropout_offset = 0;  // the default generator (dropout masks)
};
void save_train_state(const std::string& path, const TrainState& state, const TrainConfig& config,
                      const optim::Optimizer& optimizer);
// --- units -----------------------------------------------------------------------------
std::string unit_name(int64_t iter);  // "ckpt-00000250"
// Writes the unit of `iter` into run_dir (see the top of the file), points
// `best` at it if val_loss is the lowest so far, and keeps the newest `keep` units.
void save_checkpoint(const std::string& run_dir, int64_t iter, double val_loss, const nn::GPT& model,
                     const text::Tokenizer& tokenizer, const TrainState& state, const TrainConfig& config,
                     const optim::Optimizer& optimizer, int64_t keep);
// The newest complete unit of a run directory; or `dir` itself when it is a
// unit, or holds model.safetensors directly. Units whose files do not match
// their manifest are passed over and named in `passed_over`. Throws naming the
// directory when there is none.
std::string find_checkpoint(const std::string& dir, std::vector<std::string>* passed_over = nullptr);
// A run's complete units (files matching their manifests), oldest first, and
// the one `best` points at (empty if none).
struct Checkpointed {
  std::string unit;
  int64_t iter = 0;
  double val_loss = 0;
};
struct RunHistory {
  std::vector<Checkpointed> units;
  std::string best;
};
RunHistory run_history(const std::string& run_dir);
// True if `dir` holds a run (a unit, or model.safetensors).
bool holds_run(const std::string& dir);
// What a command writes into its output directory.
enum class OutputKind {
  Run,    // a run (train, convert) or a model (heads --prune): refused over a run
  Files,  // files of its own (attention's SVGs): refused over anything
};
// The one rule of every command that writes a directory: unless `overwrite`
// (--overwrite), a directory that already holds output of its kind is refused,
// naming `command`, so nothing is replaced silently. `other_choices` adds to
// the advice ("--resume to continue it, ").
void check_output_directory(const std::string& command, const std::string& dir, OutputKind kind, bool overwrite,
                            const std::string& other_choices = "");
// --overwrite of a run: the old run's checkpoints and log go, so none can be
// mistaken for the new run's (a reader takes the newest unit).
void clear_run(const std::string& dir);
// Removes what a killed writer left in run_dir (temporary units and files).
void remove_stale_temporaries(const std::string& run_dir);

// Reads a train_state file and checks what needs no model: its run options
// are there, every tensor is one char_lm writes, the counters are one int64
// each. Every loading error here and below names the file and the key.
SafetensorsFile load_train_state(const std::string& path);
int64_t train_state_iter(const SafetensorsFile& file);  // the next iteration the saved run would run
// Restores the optimizer from a loaded train_state file and returns the rest.
TrainState restore_train_state(const SafetensorsFile& file, optim::Optimizer& optimizer);
// The run's options as a train_state file saved them, every one: for the
// commands that read a run (eval, info, convert). A key no table knows, or a
// value that is none of its option's (its type, its range), is an error naming
// the file and the key.
void read_run_options(TrainConfig& config, const SafetensorsFile& file);

// --resume, in two steps. resume_options: the options a command line did not
// give again take the file's values (a key no table knows is an error; so is a
// value that is none of its option's, unless the command line gives that
// option, which replaces it). check_resumed_options, once the program has set
// the rest (vocab_size, from the text): TrainConfig::check, where an error
// about a value taken from the file is told as the file's: the file, the key,
// the value, the rule, and how to replace it on the command line. A given
// option whose value differs from the run's is an error (unless a Setting),
// except where the checks refuse the run's own value: then the given one
// replaces it (train --resume --lr 3e-4 over a saved lr of 0). A program's own
// call (TrainConfig::given unset) replaces nothing: it must match the run.
struct ResumedOptions {
  std::string path;             // the train_state file
  Metadata saved;               // its __metadata__
  std::set<std::string> given;  // the options given (snake_case): a command line's, or every one
  bool typed = false;           // given on a command line (TrainConfig::given), so they may replace saved values
  ResumedValues values;         // the options that took the file's values, and the conflicts
};
ResumedOptions resume_options(TrainConfig& config, const SafetensorsFile& file);
void check_resumed_options(const TrainConfig& config, const ResumedOptions& resumed);

}  // namespace ag::char_lm
