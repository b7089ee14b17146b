// char_lm with positions other than learned (issue 24): `position` and
// `rope_base` in checkpoints (absent = learned, so older checkpoints load
// unchanged), `alibi_slopes` (absent = geometric, the slopes of older ALiBi
// models; issue 47), no pos_emb.weight for rope, alibi and none, generation past
// block_size (the cache grows to --max-context, or rolls for a window model at
// constant memory) equal to full recomputation, `char_lm eval --block-size`,
// and the bad inputs, each an error naming its key with nothing written.
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <functional>

#include "core/autograd.h"
#include "core/caching_allocator.h"
#include "core/safetensors.h"
#include "examples/common/checkpoint.h"
#include "examples/common/text_data.h"
#include "examples/common/eval.h"
#include "examples/common/sample.h"
#include "tests/char_lm_helpers.h"
#include "tests/helpers.h"

// The file's names and using-directives stay its own in a unity build, where the test
// files compile as one translation unit (CMakeLists.txt).
namespace char_lm_positions_test {

using namespace ag;
using namespace ag::char_lm;
using namespace ag::text;  // the text data (examples/common/text_data.h)

namespace {
const ag::test::TempDir& positions_scratch() {
  static const ag::test::TempDir root("char_lm_positions_tests");
  return root;
}

// A tiny run in positions_scratch()/name with `position`, block_size 16, 2 heads of 16, trained 20 iterations;
// `edit` changes its config first.
std::string trained_run(const std::string& name, PositionEncoding position,
                        const std::function<void(TrainConfig&)>& edit = {}) {
  const std::string dir = positions_scratch().file(name);
  std::filesystem::remove_all(dir);
  TrainConfig c = ag::test::tiny_run(dir);
  c.model.position = position;
  if (edit) edit(c);
  train(c);
  return dir;
}

// Greedy text of `tokens` characters, through the KV cache and by recomputation.
std::pair<std::string, std::string> greedy_both_ways(nn::GPT& model, const Tokenizer& tokenizer, int64_t tokens,
                                                     int64_t max_context = 0) {
  SampleOptions o;
  o.tokens = tokens;
  o.top_k = 1;
  o.max_context = max_context;
  const std::string cached = generate(model, tokenizer, "the king", o);
  o.no_kv_cache = true;
  return {cached, generate(model, tokenizer, "the king", o)};
}

// Resident memory of this process, in bytes (/proc/self/statm).
int64_t resident_bytes() {
  std::ifstream statm("/proc/self/statm");
  int64_t pages = 0, resident = 0;
  statm >> pages >> resident;
  return resident * sysconf(_SC_PAGESIZE);
}

// The tensor memory the host's caching allocator holds (in use and cached for reuse).
int64_t tensor_bytes() {
  const MemoryStats stats = host_memory_stats();
  return static_cast<int64_t>(stats.in_use_bytes + stats.cached_bytes);
}

// AddressSanitizer keeps freed memory in quarantine instead of reusing it: there every
// allocation grows the resident set, and RSS measures the sanitizer, not the cache.
constexpr bool kResidentMemoryMeasurable = !AG_ADDRESS_SANITIZER;
}  // namespace

TEST_CASE("char_lm positions: position is saved, rope, alibi and none have no pos_emb, absent means learned") {
  for (const PositionEncoding position : {PositionEncoding::Rope, PositionEncoding::Alibi, PositionEncoding::None}) {
    INFO(std::string(name_of(position)));
    const std::string dir = trained_run(std::string("saved_") + name_of(position), position);
    const SafetensorsFile file = load_safetensors(model_path(find_checkpoint(dir)));
    CHECK(file.metadata.at("position") == name_of(position));
    CHECK(!file.contains("pos_emb.weight"));
    CHECK(load_model(model_path(find_checkpoint(dir))).model->config().position == position);
  }
  SafetensorsFile learned = load_safetensors(model_path(find_checkpoint(trained_run("saved_learned", PositionEncoding::Learned))));
  CHECK(learned.contains("pos_emb.weight"));
  learned.metadata.erase("position");
  learned.metadata.erase("rope_base");  // as a checkpoint from before positions were an option
  const std::string old = positions_scratch().file("old.safetensors");
  save_safetensors(old, learned.tensors, learned.metadata);
  CHECK(load_model(old).model->config().position == PositionEncoding::Learned);
}

// ALiBi's slopes for 6 heads (issue 47): the reference rule (get_slopes) is not the geometric one that attograd's
// models were trained with before the model option alibi_slopes existed, so a file without the key keeps them.
TEST_CASE("char_lm positions: an alibi model of 6 heads saved without alibi_slopes keeps the geometric slopes") {
  const std::string dir = trained_run("alibi_6_heads", PositionEncoding::Alibi, [](TrainConfig& c) {
    c.model.n_head = 6;
    c.model.n_embd = 24;
  });
  const std::string unit = find_checkpoint(dir);
  SafetensorsFile file = load_safetensors(model_path(unit));
  CHECK(file.metadata.at("alibi_slopes") == "reference");  // a new model records its rule
  const LoadedModel now = load_model(model_path(unit));
  CHECK(now.model->config().alibi_slopes == AlibiSlopes::Reference);
  CHECK(nn::describe(now.model->config()).find("ALiBi positions (distance-biased scores, reference slopes)") != std::string::npos);

  // The file as the code before the option wrote it (no alibi_slopes), and the same weights with the old rule said.
  file.metadata.erase("alibi_slopes");
  const std::string old_path = positions_scratch().file("alibi_6_heads_old.safetensors");
  save_safetensors(old_path, file.tensors, file.metadata);
  file.metadata["alibi_slopes"] = "geometric";
  const std::string said_path = positions_scratch().file("alibi_6_heads_geometric.safetensors");
  save_safetensors(said_path, file.tensors, file.metadata);
  const LoadedModel old = load_model(old_path), said = load_model(said_path);
  CHECK(old.model->config().alibi_slopes == AlibiSlopes::Geometric);
  CHECK(nn::describe(old.model->config()).find("geometric slopes") != std::string::npos);

  // Logits over one window: the old file computes the geometric model's function exactly, not the reference one's
  // (which the test would see if the old file took the new default).
  NoGradGuard no_grad;
  for (const LoadedModel* m : {&now, &old, &said}) m->model->eval();
  std::vector<int64_t> ids;
  for (int64_t t = 0; t < 16; ++t) ids.push_back((5 * t + 1) % now.model->config().vocab_size);
  const Tensor idx = Tensor::from_indices(ids, {1, 16});
  const Tensor old_logits = old.model->forward(idx), said_logits = said.model->forward(idx);
  CHECK(ag::test::max_abs_error(old_logits, said_logits) == 0.0);
  CHECK(ag::test::max_abs_error(old_logits, now.model->forward(idx)) > 1e-4);

  // Sampled text: the old file's, through the cache and by recomputation, is the geometric model's.
  const auto [old_cached, old_full] = greedy_both_ways(*old.model, old.tokenizer, 40);
  const auto [said_cached, said_full] = greedy_both_ways(*said.model, said.tokenizer, 40);
  CHECK(old_cached == said_cached);
  CHECK(old_full == said_full);
  CHECK(old_cached == old_full);

  // The run's training state from before the option (no alibi-slopes) resumes with the geometric slopes too.
  SafetensorsFile state = load_safetensors(train_state_path(unit));
  CHECK(state.metadata.at("alibi-slopes") == "reference");
  state.metadata.erase("alibi-slopes");
  const std::string old_state = positions_scratch().file("alibi_6_heads_old_state.safetensors");
  save_safetensors(old_state, state.tensors, state.metadata);
  TrainConfig resumed = ag::test::tiny_run(dir);
  read_run_options(resumed, load_train_state(old_state));
  CHECK(resumed.model.alibi_slopes == AlibiSlopes::Geometric);
  TrainConfig current = ag::test::tiny_run(dir);
  read_run_options(current, load_train_state(train_state_path(unit)));
  CHECK(current.model.alibi_slopes == AlibiSlopes::Reference);
}

TEST_CASE("char_lm positions: pos_emb.weight present or missing against position is an error naming the key") {
  const std::string rope_path = model_path(find_checkpoint(trained_run("mismatch_rope", PositionEncoding::Rope)));
  const std::string learned_path = model_path(find_checkpoint(trained_run("mismatch_learned", PositionEncoding::Learned)));
  SafetensorsFile rope = load_safetensors(rope_path), learned = load_safetensors(learned_path);

  std::vector<NamedTensor> with_table = rope.tensors;  // a rope model's file that has a learned table
  with_table.push_back({"pos_emb.weight", learned.at("pos_emb.weight")});
  const std::string extra = positions_scratch().file("rope_with_pos_emb.safetensors");
  save_safetensors(extra, with_table, rope.metadata);
  CHECK_THROWS_WITH_AS(load_model(extra), doctest::Contains("holds 'pos_emb.weight', but __metadata__ 'position' = rope"), Error);

  std::vector<NamedTensor> without_table;  // a learned model's file that lacks its table
  for (const NamedTensor& t : learned.tensors)
    if (t.name != "pos_emb.weight") without_table.push_back(t);
  const std::string missing = positions_scratch().file("learned_without_pos_emb.safetensors");
  save_safetensors(missing, without_table, learned.metadata);
  CHECK_THROWS_WITH_AS(load_model(missing), doctest::Contains("has no tensor 'pos_emb.weight', which __metadata__ 'position' = learned needs"),
                       Error);
}

TEST_CASE("char_lm positions: bad options are errors naming the key, and train writes nothing") {
  const struct {
    const char* args;
    const char* message;
  } cases[] = {
      {"--position rope --n-embd 12 --n-head 4", "position rope (--position) rotates pairs of dims: head size n_embd / n_head = 3 is odd"},
      {"--position alibi --attention linear", "position alibi (--position) biases softmax attention's scores"},
      {"--position rope --rope-base 0", "rope_base (--rope-base) must be > 0"},
      {"--position rope --rope-base -5", "--rope-base must be"},
      {"--position sinusoidal", "--position"},
  };
  for (const auto& bad : cases) {
    INFO(bad.args);
    const std::string out = positions_scratch().file("bad_run");
    std::filesystem::remove_all(out);
    const auto [status, output] = ag::test::run_char_lm(std::string("train --max-iters 1 --data '") +
                                                        ag::test::generated_text_file() + "' --out '" + out + "' " + bad.args);
    CHECK(status != 0);
    CHECK(output.find(bad.message) != std::string::npos);
    CHECK(!std::filesystem::exists(out));
  }
  // The same from a checkpoint's metadata: the file is blamed, by key.
  SafetensorsFile rope = load_safetensors(model_path(find_checkpoint(trained_run("bad_base", PositionEncoding::Rope))));
  rope.metadata["rope_base"] = "0";
  const std::string path = positions_scratch().file("rope_base_0.safetensors");
  save_safetensors(path, rope.tensors, rope.metadata);
  CHECK_THROWS_WITH_AS(load_model(path), doctest::Contains("rope_base"), Error);
}

TEST_CASE("char_lm positions: cached greedy decode equals full recomputation past block_size, up to max-context") {
  for (const PositionEncoding position : {PositionEncoding::Rope, PositionEncoding::Alibi, PositionEncoding::None}) {
    INFO(std::string(name_of(position)));
    LoadedModel loaded = load_model(model_path(find_checkpoint(trained_run(std::string("decode_") + name_of(position), position))));
    const int64_t block = loaded.model->config().block_size;  // 16
    // 3·block tokens after the 8 of the prompt: past block_size, inside the default max-context 4·block
    const auto [cached, recomputed] = greedy_both_ways(*loaded.model, loaded.tokenizer, 3 * block);
    CHECK(cached == recomputed);
    CHECK(cached.size() == 8 + 3 * block);

    // Each step's logits too: a barely trained model's greedy text may not depend on far context.
    nn::GPT& model = *loaded.model;
    model.eval();
    NoGradGuard no_grad;
    SampleOptions o;
    const Context context = context_of(model, o);
    CHECK(context.at_end == Context::AtEnd::Stop);
    CHECK(context.span == 4 * block);
    CachedLogits from_cache(model, context);
    RecomputeLogits recomputing(model, context);
    const int64_t V = model.config().vocab_size;
    Generator gen(7);
    std::vector<int64_t> ids = {1, 2, 3};
    while (static_cast<int64_t>(ids.size()) <= context.span) {
      CAPTURE(ids.size());
      CHECK_CLOSE(Tensor::from_vector(from_cache.next(ids), {V}, DType::Float64),
                  Tensor::from_vector(recomputing.next(ids), {V}, DType::Float64), 1e-5);
      ids.push_back(static_cast<int64_t>(gen.integer(V)));
    }
    CHECK(from_cache.cache().length() == context.span);
    CHECK(!from_cache.takes(context.span + 1));  // full: generation stops there
  }
}

TEST_CASE("char_lm positions: sample stops at --max-context with a message — learned says why it restarts") {
  const std::string rope = trained_run("stop_rope", PositionEncoding::Rope);
  const auto [status, output] = ag::test::run_char_lm("sample --ckpt '" + rope + "' --tokens 100 --max-context 40 --top-k 1");
  CHECK(status == 0);
  CHECK(output.find("sample: after 40 tokens, stopped at --max-context 40 positions") != std::string::npos);
  const std::string learned = trained_run("stop_learned", PositionEncoding::Learned);
  const auto [learned_status, learned_output] = ag::test::run_char_lm("sample --ckpt '" + learned + "' --tokens 40");
  CHECK(learned_status == 0);
  CHECK(learned_output.find("learned positions end at block_size 16") != std::string::npos);
}

TEST_CASE("char_lm positions: a window model's cache rolls, at constant memory, and decodes as full recomputation") {
  for (const PositionEncoding position : {PositionEncoding::Rope, PositionEncoding::None, PositionEncoding::Alibi}) {
    INFO(std::string(name_of(position)));
    const std::string dir = trained_run(std::string("roll_") + name_of(position), position, [position](TrainConfig& c) {
      c.model.attn_window = 4;
      c.model.attn_dilation = 2;
      c.model.attn_global = position == PositionEncoding::Alibi ? 0 : 2;  // ALiBi rolls without global keys
      c.model.n_embd = 128;  // 2 KB of keys and values per position: a growing cache would show in RSS
      c.model.n_layer = 2;
    });
    LoadedModel loaded = load_model(model_path(find_checkpoint(dir)));
    nn::GPT& model = *loaded.model;
    REQUIRE(model.kv_cache_rolls());
    const int64_t block = model.config().block_size;
    const auto [cached, recomputed] = greedy_both_ways(model, loaded.tokenizer, 6 * block);  // far past any max-context
    CHECK(cached == recomputed);
    CHECK(cached.size() == 8 + 6 * block);

    model.eval();
    NoGradGuard no_grad;
    const Context context = context_of(model, SampleOptions{});
    REQUIRE(context.at_end == Context::AtEnd::Roll);
    CachedLogits from_cache(model, context);
    RecomputeLogits recomputing(model, context);
    const int64_t V = model.config().vocab_size;
    Generator gen(9);
    std::vector<int64_t> ids = {1, 2, 3};
    std::vector<std::vector<double>> logits;  // after ids[0, n) for n = 3 … 4·block
    int64_t bytes_at_block = 0, resident_at_block = 0, tensors_at_block = 0;
    for (int64_t n = 3; n <= 4 * block; ++n) {
      logits.push_back(from_cache.next(ids));
      if (n == block)
        bytes_at_block = from_cache.cache().bytes(), resident_at_block = resident_bytes(), tensors_at_block = tensor_bytes();
      ids.push_back(static_cast<int64_t>(gen.integer(V)));
    }
    const int64_t resident_growth = resident_bytes() - resident_at_block, tensor_growth = tensor_bytes() - tensors_at_block;
    for (int64_t n = 3; n <= 4 * block; ++n) {  // every step as full recomputation with the window
      CAPTURE(n);
      const std::vector<int64_t> prefix(ids.begin(), ids.begin() + n);
      CHECK_CLOSE(Tensor::from_vector(logits[n - 3], {V}, DType::Float64),
                  Tensor::from_vector(recomputing.next(prefix), {V}, DType::Float64), 1e-5);
    }
    // Constant memory: the cache holds G + W·δ − 1 + block_size rows whatever the length; a cache that
    // grew would hold 4·block_size positions by now.
    CHECK(from_cache.cache().length() == 4 * block);
    CHECK(from_cache.cache().capacity() == model.rolling_kv_cache_capacity(block));
    CHECK(from_cache.cache().bytes() == bytes_at_block);
    const int64_t growing_cache = 4 * block * from_cache.cache().bytes_per_token();
    MESSAGE("from token " << block << " to " << 4 * block << ": resident memory " << resident_growth
                           << " bytes more, tensor memory " << tensor_growth << " (a growing cache would add "
                           << growing_cache << ")");
    CHECK(from_cache.cache().bytes() < growing_cache);  // 25 positions held, not 64
    CHECK(tensor_growth < growing_cache);
    if (kResidentMemoryMeasurable) CHECK(resident_growth < growing_cache);
    else MESSAGE("resident memory not checked: AddressSanitizer's quarantine grows it with every allocation");
  }
}

TEST_CASE("char_lm positions: eval reports the loss at longer T for rope, alibi and none, and refuses it for learned") {
  const std::string rope = trained_run("eval_rope", PositionEncoding::Rope);
  EvalOptions o;
  o.ckpt = rope;
  o.eval_iters = 2;
  const EvalResult at_training = evaluate_checkpoint(o);
  CHECK(at_training.block_size == 16);
  o.block_size = 64;
  const EvalResult longer = evaluate_checkpoint(o);
  CHECK(longer.block_size == 64);
  CHECK(longer.trained_block_size == 16);
  CHECK(std::isfinite(longer.losses.val_loss));
  CHECK(longer.losses.val_loss != at_training.losses.val_loss);  // other windows, other lengths

  const auto [status, output] = ag::test::run_char_lm("eval --ckpt '" + rope + "' --block-size 32 --eval-iters 1");
  CHECK(status == 0);
  CHECK(output.find("at T = 32 (trained at 16)") != std::string::npos);

  o.ckpt = trained_run("eval_learned", PositionEncoding::Learned);
  CHECK_THROWS_WITH_AS(evaluate_checkpoint(o), doctest::Contains("learned positions end there (position = learned)"), Error);
}

}  // namespace char_lm_positions_test
