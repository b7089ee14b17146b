// char_lm's training loop, checkpoints and data handling, on a tiny model.
#include <filesystem>
#include <fstream>

#include "core/safetensors.h"
#include "examples/char_lm/checkpoint.h"
#include "examples/char_lm/data.h"
#include "examples/char_lm/train.h"
#include "tests/char_lm_helpers.h"
#include "tests/helpers.h"

using namespace ag;
using namespace ag::char_lm;
using ag::test::write_file;

namespace {
std::string fresh_dir(const std::string& name) {
  const auto dir = std::filesystem::temp_directory_path() / ("attograd_test_" + name);
  std::filesystem::remove_all(dir);
  std::filesystem::create_directories(dir);
  return dir.string();
}

std::string read_file(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  return std::string(std::istreambuf_iterator<char>(in), {});
}

// Made-up English, written once per process: the tests below need some text,
// not tiny Shakespeare in particular.
const std::string& generated_text_path() {
  static const std::string path = [] {
    const std::string dir = fresh_dir("text_" + std::to_string(getpid()));
    write_file(dir + "/text.txt", ag::test::generated_text(ag::test::english, 4000));
    return dir + "/text.txt";
  }();
  return path;
}

TrainConfig tiny(const std::string& out_dir) { return ag::test::tiny_run(generated_text_path(), out_dir); }
}  // namespace

TEST_CASE("char_lm: stopping and resuming gives the same losses as not stopping") {
  const TrainResult straight = train(tiny(fresh_dir("straight")));
  REQUIRE(straight.batch_losses.size() == 20);

  TrainConfig first_half = tiny(fresh_dir("resumed"));
  first_half.max_iters = 10;
  const TrainResult before = train(first_half);
  TrainConfig second_half = first_half;
  second_half.max_iters = 20;
  second_half.resume = true;
  const TrainResult after = train(second_half);

  REQUIRE(after.batch_losses.size() == 10);
  for (size_t i = 0; i < 10; ++i) {
    CAPTURE(i);
    CHECK(before.batch_losses[i] == straight.batch_losses[i]);
    CHECK(after.batch_losses[i] == straight.batch_losses[10 + i]);  // bit for bit
  }
  REQUIRE(after.evals.size() == 1);
  CHECK(after.evals[0].val_loss == straight.evals.back().val_loss);
}

TEST_CASE("char_lm: a few hundred iterations on tiny Shakespeare bring the loss under 2.6") {
  // From ln(65) ≈ 4.17 at init. A unigram model reaches about 3.3 and a bigram
  // model about 2.5; 2.6 needs the model to use the previous characters.
  TrainConfig c = tiny(fresh_dir("learns"));
  c.data_path = ag::test::shakespeare_path();
  c.dropout = 0;
  c.n_embd = 64;
  c.n_layer = 2;
  c.n_head = 4;
  c.block_size = 32;
  c.batch_size = 8;
  c.max_iters = 300;
  c.lr = 3e-3;
  c.lr_decay_iters = 300;
  c.warmup_iters = 20;
  c.eval_interval = 300;
  c.eval_iters = 10;
  const TrainResult r = train(c);
  REQUIRE(r.evals.size() == 2);
  CHECK(r.evals.front().val_loss > 4.0);
  CHECK(r.evals.back().val_loss < 2.6);
}

TEST_CASE("char_lm: checkpoints round-trip the model and its tokenizer") {
  const std::string dir = fresh_dir("roundtrip");
  TrainConfig c = tiny(dir);
  c.max_iters = 2;
  train(c);
  const LoadedModel loaded = load_model(model_path(dir));
  CHECK(loaded.model->config().n_embd == 32);
  CHECK(loaded.tokenizer.characters() == Tokenizer::from_text(read_text(generated_text_path())).characters());
  CHECK(loaded.tokenizer.decode(loaded.tokenizer.encode("ROMEO.\n")) == "ROMEO.\n");
  const SafetensorsFile file = load_safetensors(model_path(dir));
  CHECK(file.contains("blocks.0.attn.w_q.weight"));
  CHECK(file.at("blocks.0.attn.w_q.weight").shape() == Shape{32, 32});
  CHECK(file.metadata.at("gelu") == "erf");
}

TEST_CASE("char_lm: each kind of corrupt checkpoint is a clear error naming the file") {
  const std::string dir = fresh_dir("corrupt");
  TrainConfig c = tiny(dir);
  c.max_iters = 1;
  train(c);
  const std::string good = read_file(model_path(dir));
  const std::string bad = dir + "/bad.safetensors";

  SUBCASE("truncated") {
    write_file(bad, good.substr(0, good.size() - 100));
    CHECK_THROWS_WITH_AS(load_model(bad), doctest::Contains("truncated"), Error);
  }
  SUBCASE("not a safetensors file") {
    write_file(bad, "ROMEO: a plain text file, long enough to have a header length.");
    CHECK_THROWS_WITH_AS(load_model(bad), doctest::Contains("bad.safetensors"), Error);
  }
  SUBCASE("mis-shaped parameter") {
    SafetensorsFile file = load_safetensors(model_path(dir));
    for (NamedTensor& t : file.tensors)
      if (t.name == "blocks.0.mlp.fc.weight") t.tensor = Tensor::zeros({32, 64});
    save_safetensors(bad, file.tensors, file.metadata);
    CHECK_THROWS_WITH_AS(load_model(bad), doctest::Contains("blocks.0.mlp.fc.weight"), Error);
  }
  SUBCASE("wrong dtype") {
    SafetensorsFile file = load_safetensors(model_path(dir));
    for (NamedTensor& t : file.tensors)
      if (t.name == "ln_f.bias") t.tensor = Tensor::from_indices(std::vector<int64_t>(32, 0), {32});
    save_safetensors(bad, file.tensors, file.metadata);
    CHECK_THROWS_WITH_AS(load_model(bad), doctest::Contains("ln_f.bias"), Error);
  }
  SUBCASE("missing config") {
    SafetensorsFile file = load_safetensors(model_path(dir));
    file.metadata.erase("n_head");
    save_safetensors(bad, file.tensors, file.metadata);
    CHECK_THROWS_WITH_AS(load_model(bad), doctest::Contains("n_head"), Error);
  }
  SUBCASE("missing file") {
    CHECK_THROWS_WITH_AS(load_model(dir + "/absent.safetensors"), doctest::Contains("absent.safetensors"), Error);
  }
  SUBCASE("resume from a directory without a run") {
    TrainConfig resume = tiny(fresh_dir("empty_resume"));
    resume.resume = true;
    CHECK_THROWS_WITH_AS(train(resume), doctest::Contains("model.safetensors"), Error);
  }
}

TEST_CASE("char_lm: missing, empty or too short data is a clear error") {
  const std::string dir = fresh_dir("data");
  TrainConfig c = tiny(dir + "/out");
  c.data_path = dir + "/nope.txt";
  CHECK_THROWS_WITH_AS(train(c), doctest::Contains(("cannot open '" + dir + "/nope.txt'").c_str()), Error);
  write_file(dir + "/empty.txt", "");
  c.data_path = dir + "/empty.txt";
  CHECK_THROWS_WITH_AS(train(c), doctest::Contains("is empty"), Error);
  write_file(dir + "/short.txt", "To be, or not");
  c.data_path = dir + "/short.txt";
  CHECK_THROWS_WITH_AS(train(c), doctest::Contains("fewer than block_size + 1 = 17"), Error);
  c.data_path = dir;
  CHECK_THROWS_WITH_AS(train(c), doctest::Contains(("'" + dir + "' is a directory").c_str()), Error);
}

TEST_CASE("cuda: 20 training steps give the same losses on CPU and CUDA to 4 decimals") {
  if (!ag::test::cuda_or_skip()) return;
  TrainConfig c = tiny(fresh_dir("cpu_run"));
  c.dropout = 0;
  const TrainResult cpu = train(c);
  c.out_dir = fresh_dir("cuda_run");
  c.device = Device::CUDA;
  const TrainResult gpu = train(c);
  REQUIRE(gpu.batch_losses.size() == 20);
  for (size_t i = 0; i < 20; ++i) {
    CAPTURE(i);
    CHECK(std::abs(gpu.batch_losses[i] - cpu.batch_losses[i]) < 5e-5);
  }
}

TEST_CASE("char_lm: resuming with other run options, or from a mismatched checkpoint pair, is an error") {
  const std::string dir = fresh_dir("resume_checks");
  TrainConfig c = tiny(dir);
  c.max_iters = 10;
  train(c);

  TrainConfig other = c;
  other.resume = true;
  other.max_iters = 20;
  other.lr = 2e-3;
  other.block_size = 8;
  CHECK_THROWS_WITH_AS(train(other), doctest::Contains("--block-size: the run has 16, this call gives 8"), Error);

  // A crash between the two checkpoint writes leaves weights and state from different iterations.
  TrainConfig later = c;
  later.out_dir = fresh_dir("resume_checks_later");
  later.max_iters = 11;
  later.eval_interval = 11;
  train(later);
  std::filesystem::copy_file(model_path(later.out_dir), model_path(dir), std::filesystem::copy_options::overwrite_existing);
  TrainConfig resume = c;
  resume.resume = true;
  resume.max_iters = 20;
  CHECK_THROWS_WITH_AS(train(resume), doctest::Contains("weights from iteration 11 but training state from iteration 10"),
                       Error);
}

TEST_CASE("char_lm: a resumed run's log keeps one row per iteration") {
  const std::string dir = fresh_dir("resume_log");
  TrainConfig c = tiny(dir);
  c.log_interval = 1;
  c.max_iters = 10;
  train(c);
  c.resume = true;
  c.max_iters = 12;
  train(c);
  std::ifstream in(dir + "/log.csv");
  std::string line;
  int batch_rows = 0;
  while (std::getline(in, line)) batch_rows += line.find(",batch,") != std::string::npos;
  CHECK(batch_rows == 12);
}
