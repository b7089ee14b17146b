// --precision fp32 | tf32 | bf16 (issue 48): one line of the training options
// table (optim/train_options.h), so the command line, the training state's
// metadata and the resume rule come from it; the CPU refuses tf32 and bf16
// before anything is written; and the CUDA GEMM switch it sets
// (cuda::set_gemm_precision).
#include <cmath>
#include <cstring>
#include <filesystem>

#include "core/safetensors.h"
#include "cuda/context.h"
#include "examples/common/checkpoint.h"
#include "examples/common/command_line.h"
#include "examples/common/program_header.h"
#include "examples/common/train.h"
#include "optim/adam.h"
#include "tests/char_lm_helpers.h"
#include "tests/helpers.h"

using namespace ag;
using namespace ag::char_lm;

namespace {
using ag::test::contains;

// Parses `args` (after "char_lm train") for `config` as char_lm train does; returns the given options.
std::set<std::string> precision_parse(TrainConfig& config, std::vector<std::string> args) {
  cli::Program program("test", "char_lm");
  cli::Command& command = program.add_subcommand("train", "train");
  cli::ProcessOptions process;
  command.bind(config.model).bind(config.optim).bind(config.run).bind(process);
  args.insert(args.begin(), {"char_lm", "train"});
  std::vector<char*> argv;
  for (std::string& a : args) argv.push_back(a.data());
  REQUIRE(program.parse(static_cast<int>(argv.size()), argv.data()) == -1);
  command.apply();
  return command.given_names();
}

// tiny_run, two iterations.
TrainConfig precision_run(const std::string& out) {
  TrainConfig c = ag::test::tiny_run(out);
  c.run.max_iters = 2;
  c.run.eval_interval = 2;
  return c;
}
}  // namespace

TEST_CASE("precision: --precision is one table line — parsed, in --help, fp32 by default, unknown names refused") {
  for (const auto& [value, text] : EnumNames<Precision>::values) {
    CAPTURE(text);
    TrainConfig c;
    const std::set<std::string> given = precision_parse(c, {"--precision", std::string(text)});
    CHECK(c.optim.precision == value);
    CHECK(given.count("precision") == 1);
  }
  CHECK(optim::TrainOptions{}.precision == Precision::FP32);
  CHECK(option_from_string<Precision>("bf16", "--precision") == Precision::BF16);
  CHECK_THROWS_WITH_AS(option_from_string<Precision>("fp16", "--precision"),
                       "--precision: 'fp16' is not one of fp32|tf32|bf16", Error);
  const auto [status, help] = ag::test::run_char_lm("train --help");
  CHECK(status == 0);
  CHECK(contains(help, "--precision"));
}

TEST_CASE("precision: the CPU refuses tf32 and bf16, saying where they run, and writes nothing") {
  const ag::test::TempDir tmp("precision_refused");
  for (const Precision p : {Precision::TF32, Precision::BF16}) {
    const std::string name = name_of(p);
    CAPTURE(name);
    TrainConfig c = precision_run(tmp.file(name));
    c.optim.precision = p;
    const std::string message = ag::test::error_of([&] { train(c); });
    CHECK(message == "--precision " + name + " runs on CUDA (--device cuda); on the CPU use fp32");
    CHECK_FALSE(std::filesystem::exists(c.run.out));  // refused before --out is made
    // The step itself refuses too (the lab, sort and profile_step build one without char_lm's checks).
    Generator init(1);
    Tensor w = Tensor::randn({2, 2}, DType::Float32, &init).requires_grad_();
    optim::AdamW adam(optim::decay_groups({{"w", w}}, 0.0), {});
    optim::TrainOptions options;
    options.precision = p;
    CHECK_THROWS_WITH_AS(optim::TrainStep(adam, options, [](const Tensor&, const Tensor&, std::span<const int64_t>) {
                           return Tensor();
                         }, Device::CPU),
                         ("--precision " + name + " runs on CUDA (--device cuda); on the CPU use fp32").c_str(),
                         OptionError);
  }
  // The program: its message, and no --out.
  const auto [status, output] =
      ag::test::run_char_lm("train --precision bf16 --max-iters 1 --out " + tmp.file("program") + " --data " +
                            ag::test::generated_text_file());
  CHECK(status != 0);
  CHECK(contains(output, "--precision bf16 runs on CUDA (--device cuda); on the CPU use fp32"));
  CHECK_FALSE(std::filesystem::exists(tmp.file("program")));
}

TEST_CASE("precision: saved with the training state, kept by a resumed run, another value given again refused") {
  const ag::test::TempDir tmp("precision_resume");
  TrainConfig c = precision_run(tmp.file("run"));
  train(c);
  CHECK(load_safetensors(train_state_path(find_checkpoint(c.run.out))).metadata.at("precision") == "fp32");
  // Not given again: the run's value. Given with another: the conflict every Run option is.
  TrainConfig resume = precision_run(c.run.out);
  resume.run.resume = true;
  resume.run.max_iters = 4;
  resume.given = std::set<std::string>{"resume", "max_iters", "out"};
  CHECK_NOTHROW(train(resume));
  CHECK(load_safetensors(train_state_path(find_checkpoint(c.run.out))).metadata.at("precision") == "fp32");
  resume.run.max_iters = 6;
  resume.given->insert("precision");
  resume.optim.precision = Precision::TF32;
  CHECK_THROWS_WITH_AS(train(resume), doctest::Contains("--precision: the run has fp32, this call gives tf32"), Error);
}

TEST_CASE("precision: a bf16 run resumed on the CPU names the checkpoint, and --precision fp32 given again continues it") {
  const ag::test::TempDir tmp("precision_saved_bf16");
  TrainConfig c = precision_run(tmp.file("run"));
  train(c);
  // The run as one saved on CUDA with bf16 would be (the weights and the optimizer state are float32 either
  // way): a copy in a fresh directory, as a run from before checkpoint units (its two files at the top).
  const std::string unit = find_checkpoint(c.run.out), dir = tmp.file("bf16");
  std::filesystem::create_directories(dir);
  const SafetensorsFile weights = load_safetensors(model_path(unit));
  save_safetensors(model_path(dir), weights.tensors, weights.metadata);
  SafetensorsFile state = load_safetensors(train_state_path(unit));
  state.metadata["precision"] = "bf16";
  const std::string state_path = train_state_path(dir);
  save_safetensors(state_path, state.tensors, state.metadata);

  TrainConfig resume = precision_run(dir);
  resume.run.resume = true;
  resume.run.max_iters = 4;
  resume.given = std::set<std::string>{"resume", "max_iters", "out"};
  const std::string message = ag::test::error_of([&] { train(resume); });
  CAPTURE(message);
  CHECK(message.starts_with("checkpoint '" + state_path + "': "));
  CHECK(contains(message, "--precision bf16 runs on CUDA (--device cuda); on the CPU use fp32"));
  CHECK(contains(message, "--precision VALUE"));
  // Replaced on the command line, as the message advises: the run goes on, and saves fp32.
  resume.given->insert("precision");
  resume.optim.precision = Precision::FP32;
  CHECK(ag::test::error_of([&] { train(resume); }) == "");
  CHECK(load_safetensors(train_state_path(dir + "/" + unit_name(4))).metadata.at("precision") == "fp32");
}

TEST_CASE("precision: a PrecisionScope sets the CUDA GEMMs' switch for its lifetime, allow_tf32 is the same switch") {
  REQUIRE(cuda::gemm_precision() == Precision::FP32);
  {
    const optim::PrecisionScope bf16(Precision::BF16);
    CHECK(cuda::gemm_precision() == Precision::BF16);
    CHECK_FALSE(cuda::allow_tf32());
    {
      const optim::PrecisionScope tf32(Precision::TF32);
      CHECK(cuda::allow_tf32());
    }
    CHECK(cuda::gemm_precision() == Precision::BF16);
  }
  CHECK(cuda::gemm_precision() == Precision::FP32);
  cuda::set_allow_tf32(true);
  CHECK(cuda::gemm_precision() == Precision::TF32);
  cuda::set_allow_tf32(false);
  CHECK(cuda::gemm_precision() == Precision::FP32);
}

TEST_CASE("precision: the program header names the CUDA GEMMs' precision") {
  nn::GPTConfig model;
  model.vocab_size = 65;
  CHECK_FALSE(contains(cli::header(model, Device::CPU), "precision"));
  CHECK(contains(cli::header(model, Device::CUDA, Precision::BF16), "precision bf16; host "));
}
