// For the char_lm tests: tiny Shakespeare, found at run time the way char_lm
// finds it, for the tests that need that very text; made-up text, generated in
// the test, for those that need only some text; and a run small enough to train
// on it in well under a second.
#pragma once
#include <doctest/doctest.h>

#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include "core/random.h"
#include "examples/char_lm/data.h"
#include "examples/char_lm/train.h"

namespace ag::test {

// $ATTOGRAD_DATA, else data/tinyshakespeare.txt, else ../shared/data/tinyshakespeare.txt,
// the last two relative to the checkout; fails, saying what to do, if there is none.
inline std::string shakespeare_path() {
  const std::string path = char_lm::resolve_data_path("", ATTOGRAD_SOURCE_DIR);
  REQUIRE_MESSAGE(std::filesystem::is_regular_file(path),
                  "tiny Shakespeare not found at '" << path << "': set ATTOGRAD_DATA to its path, or run "
                                                       "scripts/get_data.sh (scripts/test.sh does)");
  return path;
}

// Made-up sentences: `n_words` words drawn from `words` (seeded), joined by
// `space`, with `stop` after every eighth. A small vocabulary, and enough
// structure for a tiny model's loss to fall.
struct Lexicon {
  std::vector<std::string> words;
  std::string space, stop;
};

inline std::string generated_text(const Lexicon& lexicon, size_t n_words, uint64_t seed = 1) {
  Generator gen(seed);
  std::string text;
  for (size_t i = 1; i <= n_words; ++i) {
    text += lexicon.words[gen.integer(lexicon.words.size())];
    text += i % 8 == 0 ? lexicon.stop : lexicon.space;
  }
  return text;
}

inline const Lexicon english = {{"the", "king", "and", "queen", "of", "all", "my", "lord", "shall", "we", "speak",
                                 "now", "to", "thee", "good", "night", "sweet", "prince", "ROMEO", "JULIET"},
                                " ",
                                ".\n"};
inline const Lexicon chinese = {{"天", "地", "人", "山", "水", "风", "月", "花", "春", "秋", "我", "你", "他", "的", "是",
                                 "在", "有", "不", "明", "白"},
                                "",
                                "。\n"};
// Accented Latin and emoji: two-, three- and four-byte UTF-8 characters.
inline const Lexicon accented = {{"Café", "crème", "brûlée", "naïve", "façade", "über", "señor", "😀", "☕", "🥐"},
                                 " ",
                                 ".\n"};

// 1 layer, 2 heads, 32 wide, context 16, batch 4, 20 iterations, an evaluation
// and checkpoint every 10, dropout 0.1 (so resuming must restore the dropout
// generator too), quiet, no sample.
inline char_lm::TrainConfig tiny_run(const std::string& data_path, const std::string& out_dir) {
  char_lm::TrainConfig c;
  c.data_path = data_path;
  c.out_dir = out_dir;
  c.n_layer = 1;
  c.n_head = 2;
  c.n_embd = 32;
  c.block_size = 16;
  c.batch_size = 4;
  c.dropout = 0.1;
  c.max_iters = 20;
  c.warmup_iters = 5;
  c.lr_decay_iters = 20;
  c.eval_interval = 10;
  c.eval_iters = 2;
  c.sample_tokens = 0;
  c.quiet = true;
  return c;
}

inline void write_file(const std::string& path, const std::string& bytes) {
  std::ofstream(path, std::ios::binary) << bytes;
}

}  // namespace ag::test
