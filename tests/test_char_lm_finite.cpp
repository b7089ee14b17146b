// Issue 45: a model whose weights are finite but too large for float32
// arithmetic is refused by the commands that run it (sample, eval, attention),
// naming the tensor, before they print or write anything; a sound model
// samples exactly as before.
#include <cmath>
#include <filesystem>

#include "core/safetensors.h"
#include "core/threads.h"
#include "examples/common/checkpoint.h"
#include "examples/common/eval.h"
#include "examples/common/sample.h"
#include "examples/common/train.h"
#include "tests/char_lm_helpers.h"
#include "tests/helpers.h"

// The file's names and using-directives stay its own in a unity build, where the test
// files compile as one translation unit (CMakeLists.txt).
namespace char_lm_finite_test {

using namespace ag;
using namespace ag::char_lm;

namespace {
using ag::test::contains;

const std::string& saved_unit() {
  static const ag::test::TempDir dir("finite_run");
  static const std::string unit = [] {
    TrainConfig c = ag::test::tiny_run(dir.file("run"));
    c.run.max_iters = 2;
    c.run.eval_interval = 2;
    train(c);
    return find_checkpoint(dir.file("run"));
  }();
  return unit;
}

// A copy of the saved run in a fresh directory, its weights changed by `change` (name, values) -> values.
template <class Change> std::string changed_copy(const ag::test::TempDir& tmp, const std::string& name, Change&& change) {
  const std::string dir = tmp.file(name);
  std::filesystem::create_directories(dir);
  SafetensorsFile weights = load_safetensors(model_path(saved_unit()));
  for (NamedTensor& t : weights.tensors)
    t.tensor = Tensor::from_vector(change(t.name, t.tensor.to_vector()), t.tensor.shape(), t.tensor.dtype());
  save_safetensors(model_path(dir), weights.tensors, weights.metadata);
  std::filesystem::copy_file(train_state_path(saved_unit()), train_state_path(dir));
  return dir;
}

// The command's exit status, its standard output alone, and its standard error.
struct Outputs {
  int status;
  std::string out, err;
};
Outputs run_apart(const ag::test::TempDir& tmp, const std::string& args) {
  const std::string err = tmp.file("stderr.txt");
  const auto [status, out] = ag::test::run_command("(" + std::string(ATTOGRAD_CHAR_LM) + " " + args + " 2>" + err + ")");
  return {status, out, ag::test::read_file(err)};
}

std::string eval_error(const std::string& dir) {
  return ag::test::error_of([&] { evaluate_checkpoint({.ckpt = dir}); });
}
}  // namespace

TEST_CASE("char_lm: a weight of 3e38 in any tensor makes sample and eval refuse, naming it, and print nothing") {
  const ag::test::TempDir tmp("finite_each_tensor");
  const SafetensorsFile saved = load_safetensors(model_path(saved_unit()));
  REQUIRE(saved.tensors.size() >= 18);  // every parameter of a one-block model
  for (const NamedTensor& target : saved.tensors) {
    CAPTURE(target.name);
    // The last element: for the embeddings, a row the prompt never reads (the last character, the last position).
    const std::string dir = changed_copy(tmp, target.name, [&](const std::string& name, std::vector<double> values) {
      if (name == target.name) values.back() = 3e38;
      return values;
    });
    const Outputs sample = run_apart(tmp, "sample --tokens 20 --prompt the --ckpt " + dir);
    CAPTURE(sample.err);
    CHECK(sample.status == 1);
    CHECK(sample.out.empty());  // no text, not even part of it
    CHECK(contains(sample.err, "checkpoint '" + model_path(dir) + "': parameter '" + target.name + "' holds 3e+38"));
    CHECK(contains(sample.err, "over √FLT_MAX"));
    CHECK(contains(eval_error(dir), "parameter '" + target.name + "' holds 3e+38"));
  }
  // attention creates no output directory for it.
  const std::string dir = changed_copy(tmp, "attention", [](const std::string& name, std::vector<double> values) {
    if (name == "ln_f.bias") values.back() = 3e38;
    return values;
  });
  const Outputs attention = run_apart(tmp, "attention --prompt the --ckpt " + dir + " --out " + tmp.file("maps"));
  CHECK(attention.status == 1);
  CHECK(contains(attention.err, "parameter 'ln_f.bias' holds 3e+38"));
  CHECK_FALSE(std::filesystem::exists(tmp.file("maps")));
}

TEST_CASE("char_lm: weights that overflow only together are refused where the forward first went non-finite") {
  // Each under √FLT_MAX, so the parameters pass; but the MLP's output sums 4C products of 1e19 · 1e19.
  const ag::test::TempDir tmp("finite_forward");
  const std::string dir = changed_copy(tmp, "mlp", [](const std::string& name, std::vector<double> values) {
    if (name == "blocks.0.mlp.fc.bias" || name == "blocks.0.mlp.proj.weight") values.assign(values.size(), 1e19);
    return values;
  });
  const std::string where = "checkpoint '" + model_path(dir) + "': running the model gave a NaN or an infinity, first in "
                            "the output of blocks.0.mlp (parameters blocks.0.mlp.*)";
  for (const char* cache : {"", " --no-kv-cache"}) {
    CAPTURE(cache);
    const Outputs sample = run_apart(tmp, "sample --tokens 20 --prompt the --ckpt " + dir + cache);
    CHECK(sample.status == 1);
    CHECK(sample.out.empty());
    CHECK(contains(sample.err, where));
  }
  CHECK(contains(eval_error(dir), where));
  const Outputs attention = run_apart(tmp, "attention --prompt the --ckpt " + dir + " --out " + tmp.file("maps"));
  CHECK(attention.status == 1);
  CHECK(contains(attention.err, where));
  CHECK_FALSE(std::filesystem::exists(tmp.file("maps")));
}

TEST_CASE("char_lm: a sound model samples the same text as the unwatched model, and evaluates the same") {
  const ag::test::TempDir tmp("finite_sound");
  set_num_threads(1);  // as the program below, so that both sum in the same order
  SampleOptions o;
  o.tokens = 60;
  o.prompt = "the";
  o.seed = 7;
  // The reference: load_model alone, no check on the forward (the code path before issue 45).
  LoadedModel plain = load_model(model_path(saved_unit()));
  const std::string expected = generate(*plain.model, plain.tokenizer, o.prompt, o);
  LoadedModel watched = load_model_to_run(model_path(saved_unit()));
  CHECK(generate(*watched.model, watched.tokenizer, o.prompt, o) == expected);
  const Outputs sample = run_apart(tmp, "sample --tokens 60 --prompt the --seed 7 --threads 1 --ckpt " + saved_unit());
  CHECK(sample.status == 0);
  CHECK(sample.out == expected + "\n");

  const EvalResult r = evaluate_checkpoint({.ckpt = saved_unit()});
  CHECK(std::isfinite(r.losses.val_loss));
}

}  // namespace char_lm_finite_test
