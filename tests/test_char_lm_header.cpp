// What char_lm says it runs: the header of train, sample and the inspect
// commands, nn::describe and GPTConfig::applies behind it, and `char_lm info`.
#include <doctest/doctest.h>

#include <filesystem>

#include "examples/common/train.h"
#include "nn/gpt.h"
#include "tests/char_lm_helpers.h"
#include "tests/helpers.h"

// The file's names and using-directives stay its own in a unity build, where the test
// files compile as one translation unit (CMakeLists.txt).
namespace char_lm_header_test {

using namespace ag;
using namespace ag::char_lm;

namespace {
using ag::test::contains;
}  // namespace

TEST_CASE("describe: each attention function names what it computes, and only the options that apply") {
  nn::GPTConfig dense;
  dense.vocab_size = 65;
  const std::string d = nn::describe(dense);
  CHECK(contains(d, "softmax attention (dense)"));
  CHECK(contains(d, "all earlier keys"));
  CHECK(contains(d, "4 kv heads"));
  CHECK(contains(d, "positions"));
  CHECK_FALSE(contains(d, "elu1"));
  CHECK_FALSE(dense.applies("feature_map"));
  CHECK_FALSE(dense.applies("n_features"));
  CHECK_FALSE(dense.applies("attn_global"));  // no window
  CHECK(dense.applies("attn_impl"));

  nn::GPTConfig sparse = dense;
  sparse.attn_window = 8;
  sparse.attn_global = 2;
  sparse.attn_random_blocks = 1;
  sparse.n_kv_head = 2;
  const std::string s = nn::describe(sparse);
  CHECK(contains(s, "a window of 8 keys"));
  CHECK(contains(s, "2 global"));
  CHECK(contains(s, "1 random blocks"));
  CHECK(contains(s, "2 kv heads"));
  CHECK(sparse.applies("attn_seed"));

  nn::GPTConfig linear = dense;
  linear.attention = AttentionFunction::Linear;
  CHECK(contains(nn::describe(linear), "linear attention (elu1)"));
  CHECK_FALSE(linear.applies("attn_impl"));
  CHECK_FALSE(linear.applies("n_features"));  // elu1 draws nothing
  linear.feature_map = FeatureMap::Favor;
  CHECK(contains(nn::describe(linear), "favor, 64 features"));
  CHECK(linear.applies("n_features"));
}

TEST_CASE("char_lm: train, sample and the inspect commands print the model and what runs it") {
  const ag::test::TempDir dir("char_lm_header");
  TrainConfig c = ag::test::tiny_run(dir.file("run"));
  c.quiet = false;
  c.model.attn_window = 4;
  const auto [train_status, train_output] = ag::test::run_char_lm(ag::test::train_arguments(c) + " --threads 1");
  REQUIRE(train_status == 0);
  CHECK(contains(train_output, "model: 1 layers, 2 heads of 16"));
  CHECK(contains(train_output, "softmax attention (dense), causal over a window of 4 keys"));
  CHECK(contains(train_output, "runs on: cpu, 1 thread, OpenBLAS"));
  CHECK(contains(train_output, "kernels"));

  const auto [sample_status, sample_output] =
      ag::test::run_char_lm("sample --ckpt " + dir.file("run") + " --tokens 5 --threads 1");
  REQUIRE(sample_status == 0);
  CHECK(contains(sample_output, "model: 1 layers"));
  CHECK(contains(sample_output, "runs on: cpu"));

  const auto [heads_status, heads_output] = ag::test::run_char_lm(
      "heads --ckpt " + dir.file("run") + " --data " + c.run.data + " --eval-iters 1 --threads 1");
  REQUIRE(heads_status == 0);
  CHECK(contains(heads_output, "model: 1 layers"));
  CHECK(contains(heads_output, "OpenBLAS"));
}

TEST_CASE("char_lm info: a checkpoint's model, run options and history") {
  const ag::test::TempDir dir("char_lm_info");
  TrainConfig c = ag::test::tiny_run(dir.file("run"));
  c.optim.lr = 2e-3;
  train(c);
  // What the program prints (checkpoint_info, examples/char_lm/info.h).
  const auto [info_status, info] = ag::test::run_char_lm("info --ckpt " + dir.file("run"));
  REQUIRE(info_status == 0);
  CHECK(contains(info, "(iteration 20)"));
  CHECK(contains(info, "model: 1 layers, 2 heads"));
  CHECK(contains(info, "model options: --block-size 16 --n-layer 1 --n-head 2"));
  CHECK_FALSE(contains(info, "--feature-map"));  // a softmax model has none
  CHECK(contains(info, "run options: "));
  CHECK(contains(info, "--lr 0.002"));
  CHECK(contains(info, "--max-iters 20"));
  CHECK(contains(info, "iteration 10 val "));
  CHECK(contains(info, "iteration 20 val "));
  CHECK(contains(info, "best: val loss "));

  // Without --ckpt: what this machine runs.
  CHECK(contains(ag::test::run_char_lm("info").second, "runs on: cpu"));
  // A unit (the best) reads the same.
  const auto [status, output] = ag::test::run_char_lm("info --ckpt " + dir.file("run") + "/best");
  CHECK(status == 0);
  CHECK(contains(output, "best: val loss "));
}

}  // namespace char_lm_header_test
