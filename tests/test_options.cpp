// One table of options (core/options.h) and what is derived from it: the
// command line and its --help, the config structs, checkpoint metadata, range
// checks and the resume rules. The option added last, --grad-accum, is followed
// through all of them; the char_lm program itself is run for what only its
// main() wires.
#include <fstream>

#include "core/safetensors.h"
#include "examples/common/checkpoint.h"
#include "examples/common/train.h"
#include "examples/common/command_line.h"
#include "tests/char_lm_helpers.h"
#include "tests/helpers.h"

// The file's names and using-directives stay its own in a unity build, where the test
// files compile as one translation unit (CMakeLists.txt).
namespace options_test {

using namespace ag;
using namespace ag::char_lm;

namespace {
// Parses `args` (after the program name) for `config` as char_lm train does.
using ag::test::parse_train;

// tiny_run, shorter: 4 iterations.
TrainConfig tiny(const std::string& out) {
  TrainConfig c = ag::test::tiny_run(out);
  c.run.max_iters = 4;
  c.run.eval_interval = 2;
  c.optim.lr_decay_iters = 10;
  return c;
}
}  // namespace

TEST_CASE("options: the table gives each option its flag, help line, default and parser") {
  TrainConfig config;
  std::string help;
  const std::set<std::string> given = parse_train(config, {"--n-layer", "6", "--lr=0.002", "--gelu", "tanh", "--resume"}, &help);
  CHECK(config.model.n_layer == 6);
  CHECK(config.optim.lr == 0.002);
  CHECK(config.model.gelu == GeluApprox::Tanh);
  CHECK(config.run.resume);
  CHECK(given == std::set<std::string>{"n_layer", "lr", "gelu", "resume"});
  CHECK(config.model.n_head == 4);  // not given: the table's default
  for (const char* line : {"--n-layer INT=4", "transformer blocks N", "--gelu erf|tanh=erf", "--lr NUMBER=0.001", "--grad-accum",
                           "micro-batches per optimizer step", "--max-iters", "--data"})
    CHECK_MESSAGE(help.find(line) != std::string::npos, line);
  CHECK(help.find("--vocab-size") == std::string::npos);  // Derived: set from the text, not an option
}

TEST_CASE("options: values are checked against the table's ranges, in the user's terms") {
  TrainConfig config;
  CHECK_THROWS_WITH_AS(parse_train(config, {"--block-size", "0"}), "--block-size must be in [1, 1048576], got 0", Error);
  CHECK_THROWS_WITH_AS(parse_train(config, {"--threads", "4294967297"}), doctest::Contains("--threads"), Error);
  CHECK_THROWS_WITH_AS(parse_train(config, {"--batch-size", "1e18"}), "--batch-size: '1e18' is not an integer", Error);
  CHECK_THROWS_WITH_AS(parse_train(config, {"--lr", "fast"}), "--lr: 'fast' is not a number", Error);
  CHECK_THROWS_WITH_AS(parse_train(config, {"--lr", "nan"}), doctest::Contains("--lr must be a finite number ≥ 0, got nan"), Error);
  // An open range (max kNoLimit) still excludes infinity, for every floating option.
  for (const char* flag : {"--lr", "--min-lr", "--weight-decay", "--grad-clip"})
    for (const char* value : {"inf", "-inf", "nan"}) {
      CAPTURE(flag);
      CAPTURE(value);
      CHECK_THROWS_WITH_AS(parse_train(config, {flag, value}), doctest::Contains((std::string(flag) + " must be a finite number").c_str()), Error);
    }
  CHECK_THROWS_WITH_AS(parse_train(config, {"--dropout", "inf"}), doctest::Contains("--dropout must be a finite number in [0, 0.99]"), Error);
  CHECK_THROWS_WITH_AS(parse_train(config, {"--gelu", "relu"}), "--gelu: 'relu' is not one of erf|tanh", Error);
  CHECK_THROWS_WITH_AS(parse_train(config, {"--n-layer", "-3"}), doctest::Contains("--n-layer must be in [1, 1024]"), Error);
  // Issue 10's late or silent ones: each is now refused as it is parsed.
  CHECK_THROWS_WITH_AS(parse_train(config, {"--n-layer", "0"}), doctest::Contains("--n-layer must be in [1, 1024]"), Error);
  CHECK_THROWS_WITH_AS(parse_train(config, {"--min-lr", "-1"}), doctest::Contains("--min-lr must be ≥ 0, got -1"), Error);
  CHECK_THROWS_WITH_AS(parse_train(config, {"--n-embd", "1000000000000000000"}),
                       doctest::Contains("--n-embd must be in [1, 65536]"), Error);
  CHECK_THROWS_WITH_AS(parse_train(config, {"--n-embd", "-1000000000000000000"}),
                       doctest::Contains("--n-embd must be in [1, 65536]"), Error);
  CHECK_THROWS_WITH_AS(parse_train(config, {"--n-embd", "-1e18"}), "--n-embd: '-1e18' is not an integer", Error);
  CHECK_THROWS_WITH_AS(parse_train(config, {"--batch-size", "99999999999999999999"}), doctest::Contains("--batch-size"), Error);
  CHECK_THROWS_WITH_AS(parse_train(config, {"--threads", "-1"}), doctest::Contains("--threads"), Error);
  // Relations between options are checked with the config.
  TrainConfig related;
  related.optim.warmup_iters = 2000;
  CHECK_THROWS_WITH_AS(related.optim.check(), doctest::Contains("--warmup-iters (2000) must be below --lr-decay-iters"), Error);
  related = {};
  related.model.vocab_size = 65;
  related.model.n_embd = 130;
  CHECK_THROWS_WITH_AS(related.model.check(), doctest::Contains("is not a multiple of"), Error);
}

TEST_CASE("options: --grad-accum, added as one table line, reaches --help, the config, the metadata and the resume check") {
  ag::test::TempDir tmp("options_grad_accum");
  // --help of the real program.
  const auto [help_status, help] = ag::test::run_char_lm("train --help");
  CHECK(help_status == 0);
  CHECK(help.find("--grad-accum") != std::string::npos);
  // The config, from the command line.
  TrainConfig c = tiny(tmp.file("run"));
  const std::set<std::string> given = parse_train(c, {"--grad-accum", "2"});
  CHECK(c.optim.grad_accum == 2);
  // The metadata of the training state.
  c.given = given;
  train(c);
  const SafetensorsFile state = load_safetensors(train_state_path(find_checkpoint(c.run.out)));
  CHECK(state.metadata.at("grad-accum") == "2");
  CHECK(state.metadata.at("n-layer") == "1");
  // The resume check: kept when not given again, an error when given another value.
  TrainConfig resume = tiny(c.run.out);
  resume.run.resume = true;
  resume.run.max_iters = 6;
  resume.given = std::set<std::string>{"resume", "max_iters", "out"};
  CHECK_NOTHROW(train(resume));
  CHECK(load_safetensors(train_state_path(find_checkpoint(c.run.out))).metadata.at("grad-accum") == "2");
  resume.given->insert("grad_accum");
  resume.optim.grad_accum = 1;
  CHECK_THROWS_WITH_AS(train(resume), doctest::Contains("--grad-accum: the run has 2, this call gives 1"), Error);
}

TEST_CASE("options: a resumed run takes the options it was not given again, data included") {
  ag::test::TempDir tmp("options_resume");
  TrainConfig c = tiny(tmp.file("run"));
  c.optim.lr = 3e-3;
  train(c);
  TrainConfig resume;  // all defaults: only what a user would type
  resume.run.out = c.run.out;
  resume.run.resume = true;
  resume.run.max_iters = 6;
  resume.run.sample_tokens = 0;
  resume.quiet = true;
  resume.given = std::set<std::string>{"resume", "out", "max_iters", "sample_tokens"};
  const TrainResult r = train(resume);  // finds the text through the saved --data
  CHECK(r.batch_losses.size() == 2);
  const SafetensorsFile state = load_safetensors(train_state_path(find_checkpoint(c.run.out)));
  CHECK(state.metadata.at("lr") == "0.003");
  CHECK(state.metadata.at("data") == ag::test::generated_text_file());
  CHECK(state.metadata.at("max-iters") == "6");
}

TEST_CASE("options: a metadata key this build does not know is an error naming it") {
  ag::test::TempDir tmp("options_unknown_key");
  TrainConfig c = tiny(tmp.file("run"));
  train(c);
  SafetensorsFile model = load_safetensors(model_path(find_checkpoint(c.run.out)));
  model.metadata["n_experts"] = "8";  // a newer model's option: loading it here would compute another function
  save_safetensors(tmp.file("newer.safetensors"), model.tensors, model.metadata);
  CHECK_THROWS_WITH_AS(load_model(tmp.file("newer.safetensors")), doctest::Contains("'n_experts'"), Error);

  // A run directory from before checkpoint units (its files at the top, no manifest to check them).
  const std::string legacy = tmp.file("legacy");
  std::filesystem::create_directories(legacy);
  const std::string unit = find_checkpoint(c.run.out);
  std::filesystem::copy_file(model_path(unit), model_path(legacy));
  SafetensorsFile state = load_safetensors(train_state_path(unit));
  state.metadata["accumulate-fancily"] = "yes";
  save_safetensors(train_state_path(legacy), state.tensors, state.metadata);
  TrainConfig resume = tiny(legacy);
  resume.run.resume = true;
  resume.run.max_iters = 6;
  CHECK_THROWS_WITH_AS(train(resume), doctest::Contains("'accumulate-fancily'"), Error);
}

TEST_CASE("options: the program's messages: a misspelt option, a bad value, an existing run, a config file") {
  ag::test::TempDir tmp("options_program");
  auto [status, output] = ag::test::run_char_lm("train --n-layers 3");
  CHECK(status == 2);
  CHECK(output.find("unknown option --n-layers (did you mean --n-layer?)") != std::string::npos);
  std::tie(status, output) = ag::test::run_char_lm("train --block-size 0 --out " + tmp.file("never"));
  CHECK(status == 1);
  CHECK(output.find("--block-size must be in [1, 1048576], got 0") != std::string::npos);
  CHECK_FALSE(std::filesystem::exists(tmp.file("never")));  // checked before --out is touched

  const std::string common = " --data " + ag::test::generated_text_file() + " --out " + tmp.file("run") +
                             " --n-layer 1 --n-embd 16 --block-size 8 --batch-size 2 --max-iters 2 --eval-iters 1"
                             " --sample-tokens 0 --threads 1";
  std::ofstream(tmp.file("run.toml")) << "n-head = 2\nwarmup-iters = 1\nlr-decay-iters = 2\n";
  std::tie(status, output) = ag::test::run_char_lm("train --config " + tmp.file("run.toml") + common);
  CHECK(status == 0);
  CHECK(output.find("writing checkpoints and log.csv to " + tmp.file("run")) != std::string::npos);
  CHECK(load_safetensors(model_path(find_checkpoint(tmp.file("run")))).metadata.at("n_head") == "2");
  std::tie(status, output) = ag::test::run_char_lm("train" + common);
  CHECK(status == 1);
  CHECK(output.find("holds a run already; pass --resume to continue it, --overwrite to replace it") != std::string::npos);
  // Issue 10: a bad option, or a bad relation of two, with --overwrite once reset the run's log and model
  // before the check. Now the run is left exactly as it was.
  const std::string log_before = ag::test::read_file(tmp.file("run/log.csv"));
  const std::string unit_before = find_checkpoint(tmp.file("run"));
  const std::string model_before = ag::test::read_file(model_path(unit_before));
  for (const std::string bad : {" --warmup-iters 3 --lr-decay-iters 2", " --eval-interval 0", " --grad-clip -1", " --n-head 3"}) {
    CAPTURE(bad);
    std::tie(status, output) = ag::test::run_char_lm("train --overwrite" + common + bad);
    CHECK(status == 1);
    CHECK(ag::test::read_file(tmp.file("run/log.csv")) == log_before);
    CHECK(find_checkpoint(tmp.file("run")) == unit_before);
    CHECK(ag::test::read_file(model_path(unit_before)) == model_before);
  }
  std::tie(status, output) = ag::test::run_char_lm("train --resume --out " + tmp.file("run") + " --max-iters 3 --threads 1");
  CHECK(status == 0);
  CHECK(output.find("resuming from iteration 2") != std::string::npos);
}

TEST_CASE("options: issue 22's messages: a mistyped command, an option given twice, options a command does not use") {
  auto [status, output] = ag::test::run_char_lm("trian --max-iters 3");
  CHECK(status == 2);
  CHECK(output.find("unknown command 'trian' (did you mean train?)") != std::string::npos);
  std::tie(status, output) = ag::test::run_char_lm("frobnicate");
  CHECK(status == 2);
  CHECK(output.find("unknown command 'frobnicate'; the commands are train, sample, grads, eval, convert, mask, info, "
                    "attention, explain, heads, faithfulness, report, compare (see --help)") != std::string::npos);

  // An option given twice takes the last value, as argparse does (docs/training.md, "Options: one table each").
  TrainConfig config;
  parse_train(config, {"--lr", "0.1", "--n-layer", "2", "--lr", "0.2"});
  CHECK(config.optim.lr == 0.2);
  CHECK(config.model.n_layer == 2);

  // mask takes the model options its mask depends on, and no others.
  std::tie(status, output) = ag::test::run_char_lm("mask --help");
  CHECK(status == 0);
  CHECK(output.find("--attn-window") != std::string::npos);
  for (const char* unused : {"--n-embd", "--dropout", "--attn-impl", "--gelu", "--feature-map"}) {
    CAPTURE(unused);
    CHECK(output.find(unused) == std::string::npos);
  }
  std::tie(status, output) = ag::test::run_char_lm("mask --block-size 4 --n-head 3 --attn-window 2");
  CHECK(status == 0);  // n_head 3 needs no --n-embd that divides by it
  std::tie(status, output) = ag::test::run_char_lm("mask --block-size 4 --dropout 0.5");
  CHECK(status == 2);
  CHECK(output.find("unknown option --dropout") != std::string::npos);

  // An option that does not apply to the model is an error, before anything is written.
  ag::test::TempDir tmp("options_issue22");
  std::tie(status, output) = ag::test::run_char_lm("train --attention linear --attn-impl flash --data " +
                                                    ag::test::generated_text_file() + " --out " + tmp.file("run"));
  CHECK(status == 1);
  CHECK(output.find("--attn-impl flash is an option of softmax attention") != std::string::npos);
  CHECK_FALSE(std::filesystem::exists(tmp.file("run")));

  // A config file's values pass the same range check: no infinity there either.
  std::ofstream(tmp.file("inf.toml")) << "lr = inf\n";
  std::tie(status, output) = ag::test::run_char_lm("train --config " + tmp.file("inf.toml") + " --out " + tmp.file("run"));
  CHECK(status != 0);
  CHECK(output.find("lr must be a finite number ≥ 0, got inf") != std::string::npos);
  std::tie(status, output) = ag::test::run_char_lm("train --config " + tmp.file("absent.toml"));
  CHECK(status != 0);
  CHECK(output.find("--config '" + tmp.file("absent.toml") + "' does not exist") != std::string::npos);
}

}  // namespace options_test
