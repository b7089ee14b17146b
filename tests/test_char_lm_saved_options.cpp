// Issue 45: a bad value a checkpoint holds is the file's, not the user's. Its
// error names the file, the key, the value and the rule it breaks, and says how
// to replace it on the command line; a resume that replaces it that way runs.
// The same for the model options of a model file, which sample and eval read.
#include <filesystem>
#include <functional>

#include "core/safetensors.h"
#include "examples/common/checkpoint.h"
#include "examples/common/eval.h"
#include "examples/common/train.h"
#include "tests/char_lm_helpers.h"
#include "tests/helpers.h"

// The file's names and using-directives stay its own in a unity build, where the test
// files compile as one translation unit (CMakeLists.txt).
namespace char_lm_saved_options_test {

using namespace ag;
using namespace ag::char_lm;

namespace {
using ag::test::contains;

// tiny_run, two iterations: the run every test here copies and damages.
TrainConfig two_iterations(const std::string& out) {
  TrainConfig c = ag::test::tiny_run(out);
  c.run.max_iters = 2;
  c.run.eval_interval = 2;
  return c;
}

const std::string& saved_unit() {
  static const ag::test::TempDir dir("saved_options_run");
  static const std::string unit = [] {
    train(two_iterations(dir.file("run")));
    return find_checkpoint(dir.file("run"));
  }();
  return unit;
}

// A copy of the saved run in a fresh directory (a run from before units: its two files at the top), with
// `state` and `model` changed in the training state's and the model's __metadata__.
std::string damaged_copy(const ag::test::TempDir& tmp, const std::string& name, const Metadata& state,
                         const Metadata& model = {}) {
  const std::string dir = tmp.file(name);
  std::filesystem::create_directories(dir);
  SafetensorsFile weights = load_safetensors(model_path(saved_unit()));
  for (const auto& [key, value] : model) weights.metadata[key] = value;
  save_safetensors(model_path(dir), weights.tensors, weights.metadata);
  SafetensorsFile train_state = load_safetensors(train_state_path(saved_unit()));
  for (const auto& [key, value] : state) train_state.metadata[key] = value;
  save_safetensors(train_state_path(dir), train_state.tensors, train_state.metadata);
  return dir;
}

// train --resume of `dir` to iteration 4, as from a command line that gave --max-iters and what `give` sets
// (named in `given`). Returns the error's message, "" if the run went on.
std::string resume(const std::string& dir, const std::set<std::string>& given = {},
                   const std::function<void(TrainConfig&)>& give = [](TrainConfig&) {}) {
  TrainConfig c = two_iterations(dir);
  c.run.resume = true;
  c.run.max_iters = 4;
  c.given = std::set<std::string>{"max_iters", "resume", "out"};
  c.given->insert(given.begin(), given.end());
  give(c);
  return ag::test::error_of([&] { train(c); });
}
}  // namespace

TEST_CASE("char_lm: a bad value in a training state names the file, the key, the value, and how to replace it") {
  const ag::test::TempDir tmp("saved_options_state");
  struct Case {
    const char* key;
    const char* value;
    std::vector<std::string> expected;  // besides the file and the advice
  };
  const std::vector<Case> cases = {
      {"head-mask", "abc", {"__metadata__ 'head-mask' = 'abc'", "head_mask 'abc' is not 1 groups of 2 0s and 1s", "--head-mask VALUE"}},
      {"lr", "0", {"'lr' = '0'", "--min-lr (0.0001) must not exceed --lr (0)", "--lr VALUE"}},
      {"min-lr", "1e20", {"__metadata__ 'min-lr' = '1e20' and 'lr' = '0.001'", "--min-lr (1e+20) must not exceed", "--min-lr VALUE"}},
      {"rope-base", "0", {"__metadata__ 'rope-base' = '0'", "rope_base (--rope-base) must be > 0, got 0", "--rope-base VALUE",
                          "a model option must keep the value the weights were trained with"}},
      {"n-head", "3", {"__metadata__ 'n-embd' = '32' and 'n-head' = '3'", "--n-embd 32 is not a multiple of --n-head 3", "--n-head VALUE"}},
      {"attn-dilation", "2", {"'attn-dilation' = '2'", "without one (window 0) every earlier key is visible already"}},
      {"lr", "inf", {"__metadata__ 'lr' must be a finite number ≥ 0, got inf", "--lr VALUE"}},  // refused as it is read
  };
  for (const Case& c : cases) {
    CAPTURE(c.key);
    CAPTURE(c.value);
    const std::string dir = damaged_copy(tmp, std::string(c.key) + "_" + c.value, {{c.key, c.value}});
    const std::string message = resume(dir);
    CAPTURE(message);
    CHECK(message.starts_with("checkpoint '" + train_state_path(dir) + "': "));  // the file's, not the user's
    CHECK(contains(message, "To replace a saved value, give it again: char_lm train --resume --out " + dir));
    for (const std::string& part : c.expected) CHECK(contains(message, part));
  }
}

TEST_CASE("char_lm: a bad saved value replaced on the command line, as its error advises, resumes the run") {
  const ag::test::TempDir tmp("saved_options_replaced");
  // lr = 0: --lr 3e-4 replaces it, and the run saves its new value.
  std::string dir = damaged_copy(tmp, "lr", {{"lr", "0"}});
  CHECK(resume(dir, {"lr"}, [](TrainConfig& c) { c.optim.lr = 3e-4; }) == "");
  CHECK(load_safetensors(train_state_path(dir + "/" + unit_name(4))).metadata.at("lr") == "3e-04");
  dir = damaged_copy(tmp, "min_lr", {{"min-lr", "1e20"}});
  CHECK(resume(dir, {"min_lr"}, [](TrainConfig& c) { c.optim.min_lr = 1e-5; }) == "");
  dir = damaged_copy(tmp, "lr_inf", {{"lr", "inf"}});
  CHECK(resume(dir, {"lr"}, [](TrainConfig& c) { c.optim.lr = 1e-3; }) == "");
  // A model option takes the weights' value (model.safetensors has no head_mask: every head on).
  dir = damaged_copy(tmp, "head_mask", {{"head-mask", "abc"}});
  CHECK(resume(dir, {"head_mask"}, [](TrainConfig& c) { c.model.head_mask = ""; }) == "");

  // A valid saved value is kept: giving another is the resume conflict it always was.
  dir = damaged_copy(tmp, "intact", {});
  const std::string conflict = resume(dir, {"lr"}, [](TrainConfig& c) { c.optim.lr = 3e-4; });
  CAPTURE(conflict);
  CHECK(contains(conflict, "--lr: the run has 0.001, this call gives 3e-04"));
  // And so is a program's own call (every option given, none typed): it must match the run, bad values included.
  dir = damaged_copy(tmp, "program", {{"lr", "0"}});
  TrainConfig program = two_iterations(dir);
  program.run.resume = true;
  program.run.max_iters = 4;
  CHECK_THROWS_WITH_AS(train(program), doctest::Contains("--lr: the run has 0, this call gives 0.001"), Error);
}

TEST_CASE("char_lm: a bad model option in a model file names the file, the key and the value, in sample and eval") {
  const ag::test::TempDir tmp("saved_options_model");
  const std::vector<std::pair<std::string, std::string>> cases = {
      {"rope_base", "0"}, {"head_mask", "abc"}, {"n_head", "3"}, {"attn_dilation", "2"}};
  for (const auto& entry : cases) {  // not a structured binding: clang 14's lambdas (CAPTURE) cannot capture one
    const std::string &key = entry.first, &value = entry.second;
    CAPTURE(key);
    const std::string dir = damaged_copy(tmp, key, {}, {{key, value}});
    const std::string expected_start = "checkpoint '" + model_path(dir) + "': the model's __metadata__ ";
    const std::string key_value = "'" + key + "' = '" + value + "'";
    const std::string message = ag::test::error_of([&] { evaluate_checkpoint({.ckpt = dir}); });
    CAPTURE(message);
    CHECK(message.starts_with(expected_start));
    CHECK(contains(message, key_value));
    CHECK(contains(message, "describes no valid model"));
    CHECK(contains(message, "no command line replaces them"));
    const auto [status, output] = ag::test::run_char_lm("sample --tokens 5 --ckpt " + dir);
    CHECK(status == 1);
    CHECK(contains(output, "char_lm: " + expected_start));
    CHECK(contains(output, key_value));
  }
}

// Issue 46: another function's options are refused on the command line now, but builds before took
// them from a softmax model's command line and ignored them, and saved them. Such a file loads as the
// model it always was (the options at their defaults), and its run resumes.
TEST_CASE("char_lm: a softmax model saved with linear and ssd options (older builds ignored them) loads and resumes unchanged") {
  const ag::test::TempDir tmp("saved_options_other_function");
  const std::string dir =
      damaged_copy(tmp, "other_function", {{"feature-map", "favor"}, {"n-features", "8"}, {"ssd-conv", "2"}, {"ssd-gate", "false"}},
                   {{"feature_map", "favor"}, {"n_features", "8"}, {"ssd_conv", "2"}, {"ssd_gate", "false"}});
  const LoadedModel loaded = load_model(model_path(dir)), original = load_model(model_path(saved_unit()));
  const nn::GPTConfig& c = loaded.model->config();
  CHECK(c.attention == AttentionFunction::Softmax);
  CHECK(c.feature_map == nn::GPTConfig{}.feature_map);
  CHECK(c.n_features == nn::GPTConfig{}.n_features);
  CHECK(c.ssd_conv == nn::GPTConfig{}.ssd_conv);
  CHECK(c.ssd_gate == nn::GPTConfig{}.ssd_gate);
  {
    NoGradGuard no_grad;
    loaded.model->eval();
    original.model->eval();
    const Tensor idx = Tensor::from_indices({1, 2, 3, 4, 5, 6}, {1, 6});
    CHECK(ag::test::max_abs_error(loaded.model->forward(idx), original.model->forward(idx)) == 0.0);
  }
  CHECK(resume(dir) == "");
  // The same options given on a command line are refused, naming the option and whose it is.
  nn::GPTConfig typed = c;
  typed.feature_map = FeatureMap::Favor;
  CHECK(contains(ag::test::error_of([&] { typed.check(); }),
                 "--feature-map favor is an option of linear attention; a model with --attention softmax takes none of its options"));
}

}  // namespace char_lm_saved_options_test
