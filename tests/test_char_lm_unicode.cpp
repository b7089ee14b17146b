// char_lm on any UTF-8 text: the tokenizer's code points, their round trip
// through the checkpoint, training, sampling and resuming on Chinese, accented
// Latin and emoji, the errors for text that is not UTF-8, and where the text is
// looked for.
#include <cstdlib>
#include <nlohmann/json.hpp>

#include "core/safetensors.h"
#include "examples/char_lm/checkpoint.h"
#include "examples/char_lm/data.h"
#include "examples/char_lm/sample.h"
#include "examples/char_lm/train.h"
#include "tests/char_lm_helpers.h"
#include "tests/helpers.h"

using namespace ag;
using namespace ag::char_lm;
using ag::test::TempDir;
using ag::test::write_file;

namespace {
// Trains on `text`, then checks what a user does next: sample from the saved
// checkpoint (the same characters the trained model sampled, all of them in the
// vocabulary) and resume the run.
void check_train_sample_resume(const std::string& text, const std::string& name) {
  TempDir tmp(name);
  write_file(tmp.file("text.txt"), text);
  TrainConfig c = ag::test::tiny_run(tmp.file("run"), tmp.file("text.txt"));
  c.model.dropout = 0;
  c.run.sample_tokens = 60;
  const TrainResult trained = train(c);
  REQUIRE(trained.sample.size() > 0);

  LoadedModel loaded = load_model(model_path(find_checkpoint(c.run.out)));
  const Tokenizer expected = Tokenizer::from_text(text);
  CHECK(loaded.tokenizer.characters() == expected.characters());
  SampleOptions sampling;  // as train() samples
  sampling.tokens = 60;
  sampling.seed = c.optim.seed;
  const std::string sampled = generate(*loaded.model, loaded.tokenizer, "", sampling);
  CHECK(sampled == trained.sample);  // the reloaded model is the trained one
  const std::u32string characters = decode_utf8(sampled);  // valid UTF-8
  CHECK(characters.size() == 60);
  for (const char32_t ch : characters) CHECK(expected.id(ch).has_value());

  c.run.resume = true;
  c.run.max_iters = 30;
  c.run.sample_tokens = 0;
  const TrainResult resumed = train(c);
  CHECK(resumed.batch_losses.size() == 10);
}
}  // namespace

TEST_CASE("char_lm text: tokens are the sorted unique code points") {
  const Tokenizer t = Tokenizer::from_text("hello world");
  CHECK(t.chars() == " dehlorw");
  CHECK(t.encode("low") == std::vector<int64_t>{4, 5, 7});
  CHECK_THROWS_WITH_AS(t.encode("z"), doctest::Contains("'z' (U+007A) is not in the model's vocabulary"), Error);

  // One token per character, whatever its UTF-8 length (2, 3 and 4 bytes here).
  const Tokenizer u = Tokenizer::from_text("é中😀é");
  CHECK(u.characters() == U"é中😀");
  CHECK(u.encode("😀é中") == std::vector<int64_t>{2, 0, 1});
  CHECK(u.decode({2, 0, 1}) == "😀é中");
  CHECK_THROWS_WITH_AS(u.decode({3}), doctest::Contains("id 3 is outside the vocabulary [0, 3)"), Error);
}

TEST_CASE("char_lm text: accented Latin and emoji round-trip through the tokenizer and its metadata") {
  const std::string text = ag::test::generated_text(ag::test::accented, 200);
  const Tokenizer t = Tokenizer::from_text(text);
  CHECK(t.decode(t.encode(text)) == text);
  CHECK(t.vocab_size() == static_cast<int64_t>(decode_utf8(t.chars()).size()));

  const Metadata metadata = t.to_metadata();
  REQUIRE(metadata.size() == 1);
  for (const char byte : metadata.at("chars")) CHECK(static_cast<unsigned char>(byte) < 0x80);  // \u-escaped
  const Tokenizer back = Tokenizer::from_metadata(metadata);
  CHECK(back.characters() == t.characters());
  CHECK(back.decode(back.encode(text)) == text);
}

TEST_CASE("char_lm text: the 'chars' metadata of an ASCII vocabulary is written as before UTF-8 support, and read") {
  // Until UTF-8 support, char_lm wrote "chars" with this call, over the
  // vocabulary's bytes. Same bytes for ASCII: old checkpoints load, and old
  // readers read new ASCII checkpoints.
  const std::string ascii = "\n !&',-.:;?ABCXYZabcxyz";
  const std::string old_writer = nlohmann::json(ascii).dump(-1, ' ', false, nlohmann::json::error_handler_t::replace);
  const Tokenizer t = Tokenizer::from_text(ascii);
  CHECK(t.to_metadata().at("chars") == old_writer);
  CHECK(Tokenizer::from_metadata({{"chars", old_writer}}).chars() == ascii);

  // Old checkpoints of non-ASCII text lost their vocabulary: a clear error, not a crash.
  CHECK_THROWS_WITH_AS(Tokenizer::from_metadata({{"chars", R"("ab\ufffd\ufffd")"}}),
                       doctest::Contains("older than its UTF-8 support"), Error);
  CHECK_THROWS_WITH_AS(Tokenizer::from_metadata({{"chars", "[1, 2]"}}),
                       doctest::Contains("'chars' is not a JSON string"), Error);
  CHECK(Tokenizer::from_metadata({}).vocab_size() == 0);  // a weights file without a vocabulary
}

TEST_CASE("char_lm text: a model trained on Chinese samples from its reloaded checkpoint, and resumes") {
  check_train_sample_resume(ag::test::generated_text(ag::test::chinese, 2000), "chinese");
}

TEST_CASE("char_lm text: 'Café crème' trains, then samples and resumes from its checkpoint") {
  // Issue 9: a vocabulary with bytes >= 0x80 was saved as repeated U+FFFD, so
  // the checkpoint could not be loaded.
  check_train_sample_resume(ag::test::generated_text(ag::test::accented, 1500), "cafe_creme");
}

TEST_CASE("char_lm text: text that is not UTF-8 is an error naming the byte offset") {
  struct Case {
    std::string bytes, message;
  };
  const Case cases[] = {
      {"Caf\xE9 cr\xE8me", "byte offset 4: byte 0x20 should continue the 3-byte character that byte 0xE9 at offset 3"},
      {"ab\x80", "byte offset 2: byte 0x80 continues a character that never started"},
      {"abc\xE4\xB8", "byte offset 3: byte 0xE4 starts a 3-byte character, but the text ends after 2"},
      {"a\xC0\xAF", "byte offset 1: an overlong encoding of U+002F"},
      {"xy\xED\xA0\x80", "byte offset 2: a UTF-16 surrogate, U+D800"},
      {"\xF4\x90\x80\x80", "byte offset 0: U+110000 is beyond U+10FFFF"},
      {"ok\xFF", "byte offset 2: byte 0xFF never occurs in UTF-8"},
  };
  for (const Case& c : cases) {
    CAPTURE(c.message);
    CHECK_THROWS_WITH_AS(decode_utf8(c.bytes), doctest::Contains(("invalid UTF-8 at " + c.message).c_str()), Error);
  }

  TempDir tmp("latin1");
  const std::string latin1 = tmp.file("latin1.txt");
  write_file(latin1, std::string(40, 'a') + "Caf\xE9 cr\xE8me");
  const std::string expected = "'" + latin1 + "' is not UTF-8 text: invalid UTF-8 at byte offset 44";
  CHECK_THROWS_WITH_AS(read_text(latin1), doctest::Contains(expected.c_str()), Error);
  CHECK_THROWS_WITH_AS(Tokenizer::from_text("abc").encode("ab\xE9"), doctest::Contains("byte offset 2"), Error);
}

TEST_CASE("char_lm text: the text is --data, else $ATTOGRAD_DATA, else data/, else ../shared/data/") {
  TempDir tmp("resolve");
  const std::string checkout = tmp.file("checkout");
  std::filesystem::create_directories(checkout + "/data");
  std::filesystem::create_directories(tmp.file("shared/data"));
  const char* saved = std::getenv("ATTOGRAD_DATA");
  const std::string saved_value = saved ? saved : "";
  unsetenv("ATTOGRAD_DATA");

  CHECK(resolve_data_path("", checkout) == checkout + "/data/tinyshakespeare.txt");  // none there: where to put it
  write_file(tmp.file("shared/data/tinyshakespeare.txt"), "shared");
  CHECK(resolve_data_path("", checkout) == tmp.file("shared/data/tinyshakespeare.txt"));
  write_file(checkout + "/data/tinyshakespeare.txt", "local");
  CHECK(resolve_data_path("", checkout) == checkout + "/data/tinyshakespeare.txt");
  setenv("ATTOGRAD_DATA", "/from/env.txt", 1);
  CHECK(resolve_data_path("", checkout) == "/from/env.txt");
  CHECK(resolve_data_path("/from/flag.txt", checkout) == "/from/flag.txt");

  if (saved) setenv("ATTOGRAD_DATA", saved_value.c_str(), 1);
  else unsetenv("ATTOGRAD_DATA");
}
