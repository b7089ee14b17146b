// char_lm's training loop, checkpoints and data handling, on a tiny model.
#include <algorithm>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <functional>

#include <nlohmann/json.hpp>

#include "core/autograd.h"
#include "core/safetensors.h"
#include "examples/common/checkpoint.h"
#include "examples/common/text_data.h"
#include "examples/common/train.h"
#include "tests/char_lm_helpers.h"
#include "tests/helpers.h"

// The file's names and using-directives stay its own in a unity build, where the test
// files compile as one translation unit (CMakeLists.txt).
namespace char_lm_test {

using namespace ag;
using namespace ag::char_lm;
using namespace ag::text;  // the text data (examples/common/text_data.h)
using ag::test::write_file;

namespace {
// An empty directory of this process's own (parallel test runs never share
// one), under a root removed when the tests exit.
std::string fresh_dir(const std::string& name) {
  static const ag::test::TempDir root("char_lm_tests");
  const std::string dir = root.file(name);
  std::filesystem::remove_all(dir);
  std::filesystem::create_directories(dir);
  return dir;
}

using ag::test::read_file;
using ag::test::tiny_run;
}  // namespace

TEST_CASE("char_lm: stopping and resuming gives the same losses as not stopping") {
  const TrainResult straight = train(tiny_run(fresh_dir("straight")));
  REQUIRE(straight.batch_losses.size() == 20);

  TrainConfig first_half = tiny_run(fresh_dir("resumed"));
  first_half.run.max_iters = 10;
  const TrainResult before = train(first_half);
  TrainConfig second_half = first_half;
  second_half.run.max_iters = 20;
  second_half.run.resume = true;
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
  TrainConfig c = tiny_run(fresh_dir("learns"), ag::test::shakespeare_path());
  c.model.dropout = 0;
  c.model.n_embd = 64;
  c.model.n_layer = 2;
  c.model.n_head = 4;
  c.model.block_size = 32;
  c.optim.batch_size = 8;
  c.run.max_iters = 300;
  c.optim.lr = 3e-3;
  c.optim.lr_decay_iters = 300;
  c.optim.warmup_iters = 20;
  c.run.eval_interval = 300;
  c.run.eval_iters = 10;
  const TrainResult r = train(c);
  REQUIRE(r.evals.size() == 2);
  CHECK(r.evals.front().val_loss > 4.0);
  CHECK(r.evals.back().val_loss < 2.6);
}

TEST_CASE("char_lm: checkpoints round-trip the model and its tokenizer") {
  const std::string dir = fresh_dir("roundtrip");
  TrainConfig c = tiny_run(dir);
  c.run.max_iters = 2;
  train(c);
  const LoadedModel loaded = load_model(model_path(find_checkpoint(dir)));
  CHECK(loaded.model->config().n_embd == 32);
  CHECK(loaded.tokenizer.characters() ==
        Tokenizer::from_text(read_text(ag::test::generated_text_file())).characters());
  CHECK(loaded.tokenizer.decode(loaded.tokenizer.encode("ROMEO.\n")) == "ROMEO.\n");
  const SafetensorsFile file = load_safetensors(model_path(find_checkpoint(dir)));
  CHECK(file.contains("blocks.0.attn.w_q.weight"));
  CHECK(file.at("blocks.0.attn.w_q.weight").shape() == Shape{32, 32});
  CHECK(file.metadata.at("gelu") == "erf");
}

TEST_CASE("char_lm: a sparse pattern is saved with the model and reloaded with the same random blocks") {
  const std::string dir = fresh_dir("sparse_roundtrip");
  TrainConfig c = tiny_run(dir);
  c.model.n_layer = 2;
  c.model.block_size = 48;  // three blocks of 16 queries: the random draws matter from the third on
  c.model.attn_window = 4;
  c.model.attn_dilation = 2;
  c.model.attn_global = 1;
  c.model.attn_random_blocks = 1;
  c.model.attn_seed = 9;
  c.model.dropout = 0;
  c.run.max_iters = 2;
  train(c);
  const SafetensorsFile file = load_safetensors(model_path(find_checkpoint(dir)));
  CHECK(file.metadata.at("attn_window") == "4");
  CHECK(file.metadata.at("attn_dilation") == "2");
  CHECK(file.metadata.at("attn_global") == "1");
  CHECK(file.metadata.at("attn_random_blocks") == "1");
  CHECK(file.metadata.at("attn_seed") == "9");
  const LoadedModel loaded = load_model(model_path(find_checkpoint(dir)));
  for (int64_t layer = 0; layer < 2; ++layer) {
    const SparsePattern& p = loaded.model->block(layer).attn_as<nn::MultiHeadSelfAttention>().pattern();
    CHECK(p.window == 4);
    CHECK(p.random_blocks == 1);
    CHECK(p.seed == 9);
    CHECK(p.layer == layer);
  }
  // The reloaded model computes the pattern's function: the same loss as the
  // weights under a model built from the file's options, another without them.
  Generator gen(1);
  std::vector<int64_t> ids(2 * 47);
  for (size_t i = 0; i < ids.size(); ++i) ids[i] = static_cast<int64_t>(i * 7) % loaded.model->config().vocab_size;
  const Tensor idx = Tensor::from_indices(ids, {2, 47});
  const double loss = loaded.model->loss(idx, idx).item();
  nn::GPTConfig full = loaded.model->config();
  full.attn_window = full.attn_global = full.attn_random_blocks = 0;
  full.attn_dilation = 1;
  nn::GPT dense(full, gen);
  dense.load_state(loaded.model->named_parameters());
  CHECK(dense.loss(idx, idx).item() != loss);
  nn::GPT again(loaded.model->config(), gen);
  again.load_state(loaded.model->named_parameters());
  CHECK(again.loss(idx, idx).item() == loss);
  // The random blocks are part of the function: another seed draws others (T = 47 has query blocks past R).
  nn::GPTConfig reseeded = loaded.model->config();
  reseeded.attn_seed += 1;
  nn::GPT other_blocks(reseeded, gen);
  other_blocks.load_state(loaded.model->named_parameters());
  CHECK(other_blocks.loss(idx, idx).item() != loss);
}

TEST_CASE("char_lm: each kind of corrupt checkpoint is a clear error naming the file") {
  const std::string dir = fresh_dir("corrupt");
  TrainConfig c = tiny_run(dir);
  c.run.max_iters = 1;
  train(c);
  const std::string good = read_file(model_path(find_checkpoint(dir)));
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
    SafetensorsFile file = load_safetensors(model_path(find_checkpoint(dir)));
    for (NamedTensor& t : file.tensors)
      if (t.name == "blocks.0.mlp.fc.weight") t.tensor = Tensor::zeros({32, 64});
    save_safetensors(bad, file.tensors, file.metadata);
    CHECK_THROWS_WITH_AS(load_model(bad), doctest::Contains("blocks.0.mlp.fc.weight"), Error);
  }
  SUBCASE("wrong dtype") {
    SafetensorsFile file = load_safetensors(model_path(find_checkpoint(dir)));
    for (NamedTensor& t : file.tensors)
      if (t.name == "ln_f.bias") t.tensor = Tensor::from_indices(std::vector<int64_t>(32, 0), {32});
    save_safetensors(bad, file.tensors, file.metadata);
    CHECK_THROWS_WITH_AS(load_model(bad), doctest::Contains("ln_f.bias"), Error);
  }
  SUBCASE("non-finite weights") {
    SafetensorsFile file = load_safetensors(model_path(find_checkpoint(dir)));
    for (NamedTensor& t : file.tensors)
      if (t.name == "blocks.0.attn.w_v.weight") t.tensor = Tensor::full({32, 32}, NAN);
    save_safetensors(bad, file.tensors, file.metadata);
    CHECK_THROWS_WITH_AS(load_model(bad), doctest::Contains("'blocks.0.attn.w_v.weight' holds NaN or infinite values"),
                         Error);
  }
  SUBCASE("a corrupt option in the training state names the file") {
    const std::string legacy = fresh_dir("corrupt_state");
    const std::string unit = find_checkpoint(dir);
    std::filesystem::copy_file(model_path(unit), model_path(legacy));
    SafetensorsFile state = load_safetensors(train_state_path(unit));
    state.metadata["lr"] = "fast";
    save_safetensors(train_state_path(legacy), state.tensors, state.metadata);
    TrainConfig resume = c;
    resume.run.out = legacy;
    resume.run.resume = true;
    const std::string message = train_state_path(legacy) + "': __metadata__ 'lr': 'fast' is not a number";
    CHECK_THROWS_WITH_AS(train(resume), doctest::Contains(message.c_str()),
                         Error);
  }
  SUBCASE("metadata that would make a huge model, refused before it is built") {
    // Issue 10: n_embd "16384" in a 63 KB file once spent 29 s and 6.3 GB, then bad_alloc.
    SafetensorsFile file = load_safetensors(model_path(find_checkpoint(dir)));
    file.metadata["n_embd"] = "16384";
    save_safetensors(bad, file.tensors, file.metadata);
    CHECK_THROWS_WITH_AS(load_model(bad), doctest::Contains("bad.safetensors': 'tok_emb.weight' is ["), Error);
    file.metadata["n_embd"] = "32";
    file.metadata["n_layer"] = "100000";
    save_safetensors(bad, file.tensors, file.metadata);
    CHECK_THROWS_WITH_AS(load_model(bad), doctest::Contains("bad.safetensors"), Error);
    file.metadata["n_layer"] = "9223372036854775807";
    save_safetensors(bad, file.tensors, file.metadata);
    CHECK_THROWS_WITH_AS(load_model(bad), doctest::Contains("bad.safetensors"), Error);
  }
  SUBCASE("missing config") {
    SafetensorsFile file = load_safetensors(model_path(find_checkpoint(dir)));
    file.metadata.erase("n_head");
    save_safetensors(bad, file.tensors, file.metadata);
    CHECK_THROWS_WITH_AS(load_model(bad), doctest::Contains("n_head"), Error);
  }
  SUBCASE("missing file") {
    CHECK_THROWS_WITH_AS(load_model(dir + "/absent.safetensors"), doctest::Contains("absent.safetensors"), Error);
  }
  SUBCASE("resume from a directory without a run") {
    TrainConfig resume = tiny_run(fresh_dir("empty_resume"));
    resume.run.resume = true;
    CHECK_THROWS_WITH_AS(train(resume), doctest::Contains("model.safetensors"), Error);
  }
}

TEST_CASE("char_lm: missing, empty or too short data is a clear error") {
  const std::string dir = fresh_dir("data");
  TrainConfig c = tiny_run(dir + "/out");
  c.run.data = dir + "/nope.txt";
  CHECK_THROWS_WITH_AS(train(c), doctest::Contains(("'" + dir + "/nope.txt' does not exist").c_str()), Error);
  write_file(dir + "/empty.txt", "");
  c.run.data = dir + "/empty.txt";
  CHECK_THROWS_WITH_AS(train(c), doctest::Contains("is empty"), Error);
  write_file(dir + "/short.txt", "To be, or not");
  c.run.data = dir + "/short.txt";
  // No training window fits: refused before --out is touched.
  CHECK_THROWS_WITH_AS(train(c), doctest::Contains("13 characters, and its training split (the first 90%) 11, fewer than block_size + 1 = 17"), Error);
  CHECK_FALSE(std::filesystem::exists(c.run.out));
  CHECK_THROWS_WITH_AS(make_dataset("abcdefghij", 4), doctest::Contains("validation split (the last 10%) 1, fewer than the 2 of one window"), Error);
  c.run.data = dir;
  CHECK_THROWS_WITH_AS(train(c), doctest::Contains(("'" + dir + "' is a directory").c_str()), Error);
}

TEST_CASE("char_lm: a validation split shorter than a block is evaluated on windows of the whole split") {
  const std::string dir = fresh_dir("short_val");
  std::string text;
  for (int i = 0; i < 100; ++i) text += static_cast<char>('a' + (i * 7) % 26);
  write_file(dir + "/short.txt", text);
  CHECK(make_dataset(text, 16).eval_window == 9);  // its validation split is 10 characters
  CHECK(make_dataset(text, 8).eval_window == 8);
  TrainConfig c = tiny_run(dir + "/out");
  c.run.data = dir + "/short.txt";
  const TrainResult result = train(c);
  REQUIRE_FALSE(result.evals.empty());
  for (const EvalRecord& e : result.evals) {
    CHECK(std::isfinite(e.train_loss));
    CHECK(std::isfinite(e.val_loss));
  }
}

TEST_CASE("cuda: 20 training steps give the same losses on CPU and CUDA to 4 decimals") {
  if (!ag::test::cuda_or_skip()) return;
  TrainConfig c = tiny_run(fresh_dir("cpu_run"));
  c.model.dropout = 0;
  const TrainResult cpu = train(c);
  c.run.out = fresh_dir("cuda_run");
  c.run.device = Device::CUDA;
  const TrainResult gpu = train(c);
  REQUIRE(gpu.batch_losses.size() == 20);
  for (size_t i = 0; i < 20; ++i) {
    CAPTURE(i);
    CHECK(std::abs(gpu.batch_losses[i] - cpu.batch_losses[i]) < 5e-5);
  }
}

TEST_CASE("char_lm: resuming with other run options, or from a mismatched checkpoint pair, is an error") {
  const std::string dir = fresh_dir("resume_checks");
  TrainConfig c = tiny_run(dir);
  c.run.max_iters = 10;
  train(c);

  TrainConfig other = c;
  other.run.resume = true;
  other.run.max_iters = 20;
  other.optim.lr = 2e-3;
  other.model.block_size = 8;
  CHECK_THROWS_WITH_AS(train(other), doctest::Contains("--block-size: the run has 16, this call gives 8"), Error);

  // A run directory from before checkpoint units, whose two files come from different iterations
  // (a crash between the two writes could leave that): refused, naming both.
  TrainConfig later = c;
  later.run.out = fresh_dir("resume_checks_later");
  later.run.max_iters = 11;
  later.run.eval_interval = 11;
  train(later);
  const std::string legacy = fresh_dir("resume_checks_legacy");
  std::filesystem::copy_file(model_path(find_checkpoint(later.run.out)), model_path(legacy));
  std::filesystem::copy_file(train_state_path(find_checkpoint(dir)), train_state_path(legacy));
  TrainConfig resume = c;
  resume.run.out = legacy;
  resume.run.resume = true;
  resume.run.max_iters = 20;
  CHECK_THROWS_WITH_AS(train(resume), doctest::Contains("weights from iteration 11 but training state from iteration 10"),
                       Error);
}

TEST_CASE("char_lm: checkpoints are units: the newest K kept, best by validation loss, a damaged one passed over") {
  const std::string dir = fresh_dir("units");
  TrainConfig c = tiny_run(dir);
  c.model.dropout = 0;
  c.run.eval_interval = 5;
  c.run.keep_checkpoints = 2;
  train(c);  // saves at 0, 5, 10, 15, 20
  std::vector<std::string> units;
  for (const auto& e : std::filesystem::directory_iterator(dir))
    if (e.path().filename().string().rfind("ckpt-", 0) == 0) units.push_back(e.path().filename().string());
  std::sort(units.begin(), units.end());
  // The two newest, and the best unless it is one of them (validation loss falls here: it is the newest).
  CHECK(units == std::vector<std::string>{"ckpt-00000015", "ckpt-00000020"});
  CHECK(std::filesystem::read_symlink(dir + "/best").string() == "ckpt-00000020");
  CHECK(find_checkpoint(dir) == dir + "/ckpt-00000020");
  CHECK(find_checkpoint(dir + "/ckpt-00000015") == dir + "/ckpt-00000015");  // a unit's own directory works too

  // Damage the newest unit: readers pass over it, and a resumed run continues from the one before.
  const std::string newest = dir + "/ckpt-00000020";
  std::string bytes = read_file(model_path(newest));
  bytes[bytes.size() - 3] ^= 0x55;
  write_file(model_path(newest), bytes);
  std::vector<std::string> passed_over;
  CHECK(find_checkpoint(dir, &passed_over) == dir + "/ckpt-00000015");
  REQUIRE(passed_over.size() == 1);
  CHECK(passed_over[0].find("model.safetensors does not match the manifest") != std::string::npos);
  TrainConfig resume = c;
  resume.run.resume = true;
  const TrainResult r = train(resume);
  CHECK(r.batch_losses.size() == 5);  // iterations 15..19 again
}

TEST_CASE("char_lm: a resumed run's log keeps one row per iteration") {
  const std::string dir = fresh_dir("resume_log");
  TrainConfig c = tiny_run(dir);
  c.run.log_interval = 1;
  c.run.max_iters = 10;
  train(c);
  c.run.resume = true;
  c.run.max_iters = 12;
  train(c);
  std::ifstream in(dir + "/log.csv");
  std::string line;
  int batch_rows = 0;
  std::vector<std::string> evaluations;  // "iter,kind" of the train and val rows
  while (std::getline(in, line)) {
    batch_rows += line.find(",batch,") != std::string::npos;
    if (line.find(",train,") != std::string::npos || line.find(",val,") != std::string::npos)
      evaluations.push_back(line.substr(0, line.find(',', line.find(',') + 1)));
  }
  CHECK(batch_rows == 12);
  // Issue 10: the evaluation of the iteration the resume starts from (10) was lost.
  CHECK(evaluations == std::vector<std::string>{"0,train", "0,val", "10,train", "10,val", "12,train", "12,val"});
}

TEST_CASE("char_lm: a diverging run stops with a clear error and never overwrites a good checkpoint with NaN") {
  TrainConfig c = tiny_run(fresh_dir("diverges"));
  c.model.dropout = 0;
  c.optim.lr = 1e3;
  c.optim.warmup_iters = 0;
  c.run.eval_interval = 5;
  std::string diverged;
  try {
    train(c);
  } catch (const Error& e) {
    diverged = e.what();
  }
  CHECK(diverged.find("training diverged at iteration") != std::string::npos);
  // The checkpoint is the last good one, finite, and loads.
  const std::string last_good = find_checkpoint(c.run.out);
  const LoadedModel loaded = load_model(model_path(last_good));
  for (const Tensor& p : loaded.model->parameters()) CHECK(all_finite(p));
  // The run is still resumable: from that unit it trains again, and diverges where it did.
  TrainConfig resume = c;
  resume.run.resume = true;
  CHECK_THROWS_WITH_AS(train(resume), diverged.c_str(), Error);
  CHECK(find_checkpoint(c.run.out) == last_good);
}

TEST_CASE("char_lm: killed at every step of every checkpoint write, the run resumes and ends as if never killed") {
  // ATTOGRAD_CRASH_AT_WRITE=k kills the writer (no cleanup, as kill -9) at the
  // k-th boundary of its saves (examples/common/checkpoint_units.cpp): 7 per save,
  // 3 saves in this run.
  const std::string options = " --data " + ag::test::generated_text_file() +
                              " --n-layer 1 --n-head 2 --n-embd 16 --block-size 8 --batch-size 2 --dropout 0.1"
                              " --max-iters 4 --eval-interval 2 --eval-iters 1 --warmup-iters 1 --lr-decay-iters 4"
                              " --sample-tokens 0 --threads 1";
  const std::string straight = fresh_dir("kill_straight");
  REQUIRE(ag::test::run_char_lm("train --out " + straight + options).first == 0);
  const auto final_val_loss = [](const std::string& dir) {
    std::ifstream in(find_checkpoint(dir) + "/manifest.json");
    return nlohmann::json::parse(in).at("val_loss").get<double>();
  };
  const double expected = final_val_loss(straight);
  for (int k = 1; k <= 21; ++k) {
    CAPTURE(k);
    const std::string dir = fresh_dir("kill_" + std::to_string(k));
    const auto [killed, output] =
        ag::test::run_char_lm("train --out " + dir + options, "ATTOGRAD_CRASH_AT_WRITE=" + std::to_string(k) + " ");
    REQUIRE(killed == 86);
    // Before the first unit is complete there is no run yet: start it again; else resume it.
    const bool has_run = holds_run(dir);
    // Killed after its last unit was complete, the run is done: the resume says so, and only tidies up.
    const bool complete = has_run && find_checkpoint(dir) == dir + "/ckpt-00000004";
    const auto resumed = ag::test::run_char_lm(std::string("train ") + (has_run ? "--resume" : "") + " --out " + dir + options);
    INFO(resumed.second);
    if (complete) {
      REQUIRE(resumed.first == 1);
      CHECK(resumed.second.find("is at iteration 4 already") != std::string::npos);
    } else {
      REQUIRE(resumed.first == 0);
    }
    CHECK(final_val_loss(dir) == expected);
    for (const auto& e : std::filesystem::directory_iterator(dir))  // the killed writer's temporaries are gone
      CHECK(e.path().filename().string().find(".tmp-") == std::string::npos);
  }
}

TEST_CASE("char_lm: a full disk during a checkpoint write fails clearly, keeps the earlier units, and the run resumes") {
  // A file-size limit (ulimit -f, with SIGXFSZ ignored) makes every write past
  // it fail as on a full disk: here the model file of the unit at iteration 4
  // (about 20 KB), past a 12 KB limit that loss.svg (about 4 KB) stays under.
  const std::string options = " --data " + ag::test::generated_text_file() +
                              " --n-layer 1 --n-head 2 --n-embd 16 --block-size 8 --batch-size 2 --dropout 0.1"
                              " --eval-interval 2 --eval-iters 1 --warmup-iters 1 --lr-decay-iters 4"
                              " --sample-tokens 0 --threads 1";
  const auto final_val_loss = [](const std::string& dir) {
    std::ifstream in(find_checkpoint(dir) + "/manifest.json");
    return nlohmann::json::parse(in).at("val_loss").get<double>();
  };
  const std::string straight = fresh_dir("full_disk_straight");
  REQUIRE(ag::test::run_char_lm("train --max-iters 4 --out " + straight + options).first == 0);

  const std::string dir = fresh_dir("full_disk");
  REQUIRE(ag::test::run_char_lm("train --max-iters 2 --out " + dir + options).first == 0);
  const std::string before = find_checkpoint(dir);
  const std::pair<int, std::string> full = ag::test::run_command(
      "trap '' XFSZ; ulimit -f 12; " + std::string(ATTOGRAD_CHAR_LM) + " train --resume --max-iters 4 --out " + dir + options);
  INFO(full.second);
  CHECK(full.first == 1);
  CHECK(full.second.find("model.safetensors") != std::string::npos);  // the message names the file it could not write
  CHECK(find_checkpoint(dir) == before);                                // the earlier unit, intact

  const std::pair<int, std::string> resumed = ag::test::run_char_lm("train --resume --max-iters 4 --out " + dir + options);
  INFO(resumed.second);
  REQUIRE(resumed.first == 0);
  CHECK(final_val_loss(dir) == final_val_loss(straight));
  for (const auto& e : std::filesystem::directory_iterator(dir))  // the failed write's temporaries are gone
    CHECK(e.path().filename().string().find(".tmp-") == std::string::npos);
}

TEST_CASE("char_lm: a bad training state is refused with the reason, naming the file and the key") {
  // Issue 22's mutation campaign: each of these once resumed silently, or failed naming neither.
  const std::string dir = fresh_dir("bad_state");
  TrainConfig c = tiny_run(dir);
  c.run.max_iters = 2;
  c.run.eval_interval = 2;
  train(c);
  const std::string unit = find_checkpoint(dir);
  // The message of resuming from a copy of the run whose training state `mutate` changed.
  const auto resume_with = [&](const std::string& name, const std::function<void(SafetensorsFile&)>& mutate,
                               bool names_the_state_file = true) {
    const std::string legacy = fresh_dir("bad_state_" + name);
    std::filesystem::copy_file(model_path(unit), model_path(legacy));
    SafetensorsFile state = load_safetensors(train_state_path(unit));
    mutate(state);
    save_safetensors(train_state_path(legacy), state.tensors, state.metadata);
    TrainConfig resume = c;
    resume.given = std::set<std::string>{"max_iters"};
    resume.run.out = legacy;
    resume.run.resume = true;
    resume.run.max_iters = 4;
    std::string message;
    try {
      train(resume);
    } catch (const Error& e) {
      message = e.what();
    }
    CAPTURE(message);
    CHECK(!message.empty());
    if (names_the_state_file) CHECK(message.find("checkpoint '" + train_state_path(legacy) + "'") != std::string::npos);
    return message;
  };
  for (const char* key : {"lr", "weight-decay", "grad-clip", "min-lr"}) {
    CAPTURE(key);
    const std::string message = resume_with("inf", [&](SafetensorsFile& s) { s.metadata[key] = "inf"; });
    CHECK(message.find("__metadata__ '" + std::string(key) + "' must be a finite number") != std::string::npos);
  }
  std::string message = resume_with("no_metadata", [](SafetensorsFile& s) { s.metadata.clear(); });
  CHECK(message.find("__metadata__ has no 'block-size': the run's options are missing") != std::string::npos);
  message = resume_with("extra_tensor", [](SafetensorsFile& s) { s.tensors.push_back({"rng.extra", Tensor::zeros({1})}); });
  CHECK(message.find("holds a tensor 'rng.extra' that no version of char_lm writes") != std::string::npos);
  message = resume_with("iter_float", [](SafetensorsFile& s) {
    for (NamedTensor& t : s.tensors)
      if (t.name == "iter") t.tensor = Tensor::zeros({1}, DType::Float64);
  });
  CHECK(message.find("'iter' should be one int64") != std::string::npos);
  message = resume_with("negative_iter", [](SafetensorsFile& s) {
    for (NamedTensor& t : s.tensors)
      if (t.name == "iter") t.tensor = Tensor::from_indices({-1}, {1});
  });
  CHECK(message.find("'iter' is negative") != std::string::npos);
  message = resume_with("no_seed", [](SafetensorsFile& s) { std::erase_if(s.tensors, [](const NamedTensor& t) { return t.name == "rng.batch.seed"; }); });
  CHECK(message.find("has no tensor 'rng.batch.seed'") != std::string::npos);
  // The weights and the state must describe one model.
  message = resume_with("other_model", [](SafetensorsFile& s) { s.metadata["n-embd"] = "64"; }, false);
  CHECK(message.find("model.safetensors has n-embd = 32 but train_state.safetensors 64") != std::string::npos);
}

TEST_CASE("char_lm: a resume whose --max-iters is not past the checkpoint says so and exits non-zero") {
  const std::string dir = fresh_dir("resume_not_past");
  const std::string options = " --data " + ag::test::generated_text_file() +
                              " --n-layer 1 --n-head 2 --n-embd 16 --block-size 8 --batch-size 2 --eval-interval 2"
                              " --eval-iters 1 --warmup-iters 1 --lr-decay-iters 4 --sample-tokens 0 --threads 1";
  REQUIRE(ag::test::run_char_lm("train --max-iters 4 --out " + dir + options).first == 0);
  for (const char* max_iters : {"2", "4"}) {
    CAPTURE(max_iters);
    const auto [status, output] = ag::test::run_char_lm("train --resume --out " + dir + " --max-iters " + max_iters);
    CHECK(status == 1);
    CHECK(output.find("is at iteration 4 already, and --max-iters " + std::string(max_iters) + " is not past it") !=
          std::string::npos);
    CHECK(output.find("done:") == std::string::npos);
  }
  CHECK(find_checkpoint(dir) == dir + "/ckpt-00000004");
}

TEST_CASE("char_lm: a checkpoint path that does not exist says so") {
  const std::string missing = fresh_dir("missing_ckpt") + "/nope";
  CHECK_THROWS_WITH_AS(find_checkpoint(missing), ("checkpoint: '" + missing + "' does not exist").c_str(), Error);
  const auto [status, output] = ag::test::run_char_lm("sample --ckpt " + missing);
  CHECK(status == 1);
  CHECK(output.find("'" + missing + "' does not exist") != std::string::npos);
}

TEST_CASE("char_lm: --attn-impl on a linear-attention model is an error, not ignored") {
  nn::GPTConfig config{.vocab_size = 5, .block_size = 4, .n_layer = 1, .n_head = 2, .n_embd = 4};
  config.attention = AttentionFunction::Linear;
  config.check();  // the default implementation is no choice the model ignores
  config.attn_impl = nn::AttentionImpl::Flash;
  CHECK_THROWS_WITH_AS(config.check(), doctest::Contains("--attn-impl flash is an option of softmax attention"),
                       Error);
  // Given to a command that loads a linear model (sample --attn-impl flash): blamed on the setting, not the file.
  TrainConfig c = tiny_run(fresh_dir("linear_impl"));
  c.model.attention = AttentionFunction::Linear;
  c.run.max_iters = 1;
  train(c);
  const std::string path = model_path(find_checkpoint(c.run.out));
  nn::GPTConfig settings;
  settings.attn_impl = nn::AttentionImpl::Flash;
  const std::string message = "checkpoint '" + path + "': --attn-impl flash is an option of softmax attention";
  CHECK_THROWS_WITH_AS(load_model(path, DType::Float32, settings), doctest::Contains(message.c_str()), Error);
}

}  // namespace char_lm_test
