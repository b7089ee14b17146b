// char_lm test helpers: tiny Shakespeare, found at run time the way char_lm
// finds it, for the tests that need that very text; made-up text, generated in
// the test, for those that need only some text; a run small enough to train on
// it in a second; and the built char_lm, run as a user would.
#pragma once
#include <doctest/doctest.h>

#include <filesystem>
#include <map>
#include <set>
#include <sstream>
#include <fstream>
#include <string>
#include <type_traits>
#include <utility>
#include <vector>

#include "core/random.h"
#include "examples/common/command_line.h"
#include "examples/common/text_data.h"
#include "examples/common/train.h"
#include "tests/helpers.h"

namespace ag::test {

// $ATTOGRAD_DATA, else data/tinyshakespeare.txt, else ../shared/data/tinyshakespeare.txt,
// the last two relative to the checkout; fails, saying what to do, if there is none.
inline std::string shakespeare_path() {
  const std::string path = text::resolve_data_path("", ATTOGRAD_SOURCE_DIR);
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

// 4000 words of made-up English, written once per process, for the tests that
// need some text, not tiny Shakespeare in particular.
inline const std::string& generated_text_file() {
  static const TempDir dir("char_lm_text");
  static const std::string path = [] {
    write_file(dir.file("text.txt"), generated_text(english, 4000));
    return dir.file("text.txt");
  }();
  return path;
}

// A model small enough to train in a second, with dropout on so that resuming
// must restore the dropout generator too.
inline char_lm::TrainConfig tiny_run(const std::string& out_dir, const std::string& data = generated_text_file()) {
  char_lm::TrainConfig c;
  c.run.data = data;
  c.run.out = out_dir;
  c.model.n_layer = 1;
  c.model.n_head = 2;
  c.model.n_embd = 32;
  c.model.block_size = 16;
  c.optim.batch_size = 4;
  c.model.dropout = 0.1;
  c.run.max_iters = 20;
  c.optim.warmup_iters = 5;
  c.optim.lr_decay_iters = 20;
  c.run.eval_interval = 10;
  c.run.eval_iters = 2;
  c.run.sample_tokens = 0;
  c.quiet = true;
  return c;
}

// `char_lm train`'s command line for `c`: every option of its tables, so the
// program (say under mpirun) trains what train(c) trains in-process.
inline std::string train_arguments(const char_lm::TrainConfig& c) {
  std::string args = "train";
  char_lm::TrainConfig::for_each_table(c, [&](const auto& table) {
    std::decay_t<decltype(table)>::for_each_option(table, [&](const auto& value, const OptionInfo& info) {
      if (info.kind == OptionKind::Derived) return;
      if constexpr (std::is_same_v<std::decay_t<decltype(value)>, bool>) {
        if (value) args.append(" ").append(info.flag());
      } else {
        args.append(" ").append(info.flag()).append(" '").append(option_to_string(value)).append("'");
      }
    });
  });
  return args;
}

// Parses `args` (after "char_lm train") into `config` as char_lm train does; returns the
// options given. `help`, if given, receives the command's help text. A bad option throws
// what the command line would print.
inline std::set<std::string> parse_train(char_lm::TrainConfig& config, std::vector<std::string> args,
                                         std::string* help = nullptr) {
  cli::Program program("test", "char_lm");
  cli::Command& command = program.add_subcommand("train", "train");
  cli::ProcessOptions process;
  command.bind(config.model).bind(config.optim).bind(config.run).bind(process);
  if (help) *help = command.help();
  args.insert(args.begin(), {"char_lm", "train"});
  std::vector<char*> argv;
  for (std::string& a : args) argv.push_back(a.data());
  REQUIRE(program.parse(static_cast<int>(argv.size()), argv.data()) == -1);
  command.apply();
  return command.given_names();
}

// Runs the built char_lm with `args` (after `env`, e.g. "VAR=1 "); returns its
// exit status and output (stdout and stderr together).
inline std::pair<int, std::string> run_char_lm(const std::string& args, const std::string& env = "") {
  return run_command(env + std::string(ATTOGRAD_CHAR_LM) + " " + args);
}

// The XML elements (by tag, and rect by class) of an SVG file, counted by
// Python's XML parser: a file that is not well-formed XML fails to parse.
inline std::map<std::string, int> count_svg_elements(const std::string& path) {
  int status = 0;
  std::string output;
  std::tie(status, output) = run_command(
      "python3 -c \"import sys, xml.etree.ElementTree as ET, collections\n"
      "c = collections.Counter()\n"
      "for e in ET.parse(sys.argv[1]).iter():\n"
      "    tag = e.tag.split('}')[-1]\n"
      "    c[tag] += 1\n"
      "    if tag == 'rect' and e.get('class'): c['rect.' + e.get('class')] += 1\n"
      "print(' '.join(f'{k}={v}' for k, v in c.items()))\" '" + path + "'");
  INFO(output);
  REQUIRE(status == 0);
  std::map<std::string, int> counts;
  std::istringstream words(output);
  std::string word;
  while (words >> word) counts[word.substr(0, word.find('='))] = std::stoi(word.substr(word.find('=') + 1));
  return counts;
}

}  // namespace ag::test
