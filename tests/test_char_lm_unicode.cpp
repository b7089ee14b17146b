// char_lm on any UTF-8 text: the tokenizer's code points, their round trip
// through the checkpoint, training, sampling and resuming on Chinese, accented
// Latin and emoji, the errors for text that is not UTF-8, where the text is
// looked for, and the memory a large text takes.
#include <fcntl.h>
#include <sys/resource.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdlib>
#include <nlohmann/json.hpp>

#include "core/safetensors.h"
#include "examples/common/checkpoint.h"
#include "examples/common/text_data.h"
#include "examples/common/sample.h"
#include "examples/common/train.h"
#include "tests/char_lm_helpers.h"
#include "tests/helpers.h"

// The file's names and using-directives stay its own in a unity build, where the test
// files compile as one translation unit (CMakeLists.txt).
namespace char_lm_unicode_test {

using namespace ag;
using namespace ag::char_lm;
using namespace ag::text;  // the text data (examples/common/text_data.h)
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

TEST_CASE("char_lm text: token ids take the narrowest integer that holds the vocabulary, and tile the text") {
  struct Case {
    std::string text;
    size_t bytes_per_id;
  };
  std::u32string cjk, supplementary;  // 300 and 70,000 distinct characters
  for (char32_t c = 0x4E00; c < 0x4E00 + 300; ++c) cjk += c;
  for (char32_t c = 0x10000; c < 0x10000 + 70000; ++c) supplementary += c;
  const Case cases[] = {{ag::test::generated_text(ag::test::accented, 300), 1},
                        {encode_utf8(cjk + cjk), 2},
                        {encode_utf8(supplementary), 4}};
  for (const Case& c : cases) {
    CAPTURE(c.bytes_per_id);
    const Dataset data = make_dataset(c.text, 8);
    CHECK(data.train.bytes_per_id() == c.bytes_per_id);
    CHECK(data.val.bytes_per_id() == c.bytes_per_id);
    // The first 90% of the characters, then the rest: the same ids encode() gives.
    const std::vector<int64_t> ids = data.tokenizer.encode(c.text);
    REQUIRE(data.train.size() == ids.size() * 9 / 10);
    REQUIRE(data.train.size() + data.val.size() == ids.size());
    std::vector<int64_t> stored(ids.size());
    data.train.copy_to(0, data.train.size(), stored.data());
    data.val.copy_to(0, data.val.size(), stored.data() + data.train.size());
    CHECK(stored == ids);
    CHECK(data.val[data.val.size() - 1] == ids.back());
  }
}

namespace {
// The peak resident memory, in bytes, of char_lm run with `args` (no shell:
// wait4 reports the child's own peak).
int64_t char_lm_peak_rss(const std::vector<std::string>& args) {
  std::vector<char*> argv = {const_cast<char*>(ATTOGRAD_CHAR_LM)};
  for (const std::string& a : args) argv.push_back(const_cast<char*>(a.c_str()));
  argv.push_back(nullptr);
  const pid_t pid = fork();
  if (pid == 0) {
    const int null = ::open("/dev/null", O_WRONLY);
    dup2(null, STDOUT_FILENO);
    execv(argv[0], argv.data());
    _exit(127);
  }
  int status = 0;
  rusage usage{};
  REQUIRE(wait4(pid, &status, 0, &usage) == pid);
  REQUIRE(WIFEXITED(status));
  REQUIRE(WEXITSTATUS(status) == 0);
  return static_cast<int64_t>(usage.ru_maxrss) * 1024;
}
}  // namespace

TEST_CASE("char_lm text: a large text takes about two bytes of memory per byte: itself and one-byte ids") {
  // Issue 10: a 2 GB text needed ~18x its size (the text copied through a
  // stream, its characters as char32_t, three copies of int64 ids). Now the
  // text is read once and its ids are one byte each (a vocabulary of <= 256).
  TempDir tmp("large_text");
  const std::string sentences = ag::test::generated_text(ag::test::english, 4000);
  std::string text;
  const size_t size = size_t{32} << 20;
  while (text.size() < size) text += sentences;
  write_file(tmp.file("large.txt"), text);
  write_file(tmp.file("small.txt"), sentences);
  const auto peak = [&](const std::string& name) {
    return char_lm_peak_rss({"train", "--data", tmp.file(name + ".txt"), "--out", tmp.file(name), "--max-iters",
                             "0", "--eval-iters", "1", "--n-layer", "1", "--n-head", "2", "--n-embd", "16", "--block-size",
                             "8", "--batch-size", "2", "--sample-tokens", "0", "--threads", "1"});
  };
  const int64_t small = peak("small");
  const int64_t large = peak("large");
  const double bytes_per_byte = static_cast<double>(large - small) / static_cast<double>(text.size());
  INFO("peak RSS " << small << " B on " << sentences.size() << " B of text, " << large << " B on " << text.size()
                   << " B: " << bytes_per_byte << " bytes per byte of text");
  CHECK(bytes_per_byte < 3.0);
}

}  // namespace char_lm_unicode_test
