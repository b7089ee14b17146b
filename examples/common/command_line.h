// The example programs' command lines, derived from the option tables of
// core/options.h through CLI11: every option of a config becomes --its-name,
// with its help line and its current value as the default, and its text is
// converted by the table's own parser (option_from_string) and range-checked,
// the same code that reads checkpoint metadata.
//
// CLI11 is included by command_line.cpp alone: it is header-only and slow to
// compile (each file that included it took seconds more, docs/performance.md),
// so the programs see only this facade, a Program with its Commands, and the
// handful of CLI11's features they use.
#pragma once
#include <cstdint>
#include <deque>
#include <functional>
#include <memory>
#include <set>
#include <string>
#include <vector>

#include "core/options.h"
#include "examples/common/process_options.h"

namespace CLI {
class App;
class Option;
}  // namespace CLI

namespace ag::cli {

// The options every example takes (examples/common/process_options.h).
struct ProcessOptions {
  AG_DECLARE_OPTIONS(AG_PROCESS_OPTIONS)
  void apply() const;  // sets the thread count
};

// An option added with Command::option (one not from a table), for its few
// modifiers and, after parsing, whether it was given.
class Option {
 public:
  explicit Option(CLI::Option* option) : option_(option) {}
  Option& expected(int n);                                // exactly n values (a std::vector's)
  Option& one_of(const std::vector<std::string>& values);  // the value must be one of them (CLI::IsMember)
  Option& type_name(const std::string& name);             // the value's kind in --help (TEXT, INT, ...)
  Option& default_text(const std::string& text);          // the default --help shows
  Option& take_last();                                    // given twice, the last value wins
  bool given() const;                                     // on the command line, after parsing

 private:
  CLI::Option* option_;
};

// One command (a program, or a subcommand such as `char_lm train`) and the
// configs bound to it. A Program makes them.
class Command {
 public:
  explicit Command(CLI::App* app) : app_(app) {}
  Command(const Command&) = delete;  // CLI11 and the bindings point into it
  Command& operator=(const Command&) = delete;

  // Binds every option of `config` of the given kinds (never Derived ones: the
  // program sets those). The config must outlive parsing.
  template <class Config>
  Command& bind(Config& config, std::initializer_list<OptionKind> kinds = {OptionKind::Model, OptionKind::Run,
                                                                          OptionKind::Setting, OptionKind::Local}) {
    Config::for_each_option(config, [&](auto& value, const OptionInfo& info) {
      if (has_kind(kinds, info.kind) && info.kind != OptionKind::Derived) bind_one(value, info);
    });
    return *this;
  }
  // Binds only the options of `config` called `names` (snake_case): for a
  // command that uses a few of them, whose --help should list no others.
  template <class Config, class Names> Command& bind_only(Config& config, const Names& names) {
    Config::for_each_option(config, [&](auto& value, const OptionInfo& info) {
      for (const char* name : names)
        if (std::string(name) == info.name) bind_one(value, info);
    });
    return *this;
  }
  // Adds --config FILE: options from a TOML file (key = value, keys the option
  // names with - or _), applied before the command line's, which win.
  Command& allow_config_file();

  // An option that no table describes (a benchmark's, a positional argument
  // when `name` has no dashes), which CLI11 parses into `value` itself, with
  // CLI11's own messages for a bad value.
  Option option(const std::string& name, int& value, const std::string& help = "");
  Option option(const std::string& name, int64_t& value, const std::string& help = "");
  Option option(const std::string& name, double& value, const std::string& help = "");
  Option option(const std::string& name, std::string& value, const std::string& help = "");
  Option option(const std::string& name, std::vector<std::string>& value, const std::string& help = "");

  // After parsing: sets each option given in the config file or on the
  // command line (range-checked) and records it as given. Throws ag::Error
  // naming the option.
  void apply();
  bool given(const std::string& name) const { return given_.count(name) > 0; }  // snake_case name
  const std::set<std::string>& given_names() const { return given_; }
  bool parsed() const;       // after parsing: whether the command line chose this command
  std::string help() const;  // what --help prints

 private:
  // Parses `text` as the option's type, range-checks it and assigns it;
  // `what` names the option in an error.
  using Setter = std::function<void(const std::string& text, const std::string& what)>;
  struct Binding {
    OptionInfo info;
    Setter set;
    const CLI::Option* option;  // its count() says whether the command line gave it
    const std::string* text;    // the command line's text, CLI11's target
    bool is_switch;             // a bool: --x alone means true
  };

  // The value's kind in --help: INT, NUMBER, TEXT, or an enum's choices.
  template <class T> static std::string type_name() {
    if constexpr (std::is_enum_v<T>) return enum_choices<T>();
    else if constexpr (std::is_integral_v<T>) return "INT";
    else if constexpr (std::is_floating_point_v<T>) return "NUMBER";
    else return "TEXT";
  }

  template <class T> void bind_one(T& value, const OptionInfo& info) {
    Setter set = [&value, info](const std::string& text, const std::string& what) {
      value = option_from_string<T>(text, what);
      check_option_range(value, info, what);
    };
    if constexpr (std::is_same_v<T, bool>) bind_switch(info, value, std::move(set));
    else bind_value(info, type_name<T>(), option_to_string(value), std::move(set));
  }
  // Adds the bound option to CLI11, as text for `set` to parse when applied: a
  // switch (--x alone is true, and --x true|false sets it either way, so a
  // switch on by default can be turned off), or an option with a value.
  void bind_switch(const OptionInfo& info, bool on, Setter set);
  void bind_value(const OptionInfo& info, const std::string& type_name, const std::string& default_text, Setter set);
  void apply_config_file(const std::string& path);

  CLI::App* app_;
  std::deque<std::string> texts_;  // a deque: CLI11 keeps pointers into it
  std::vector<Binding> bindings_;
  std::string config_file_;
  std::set<std::string> given_;
};

// A program's command line: its own command and its subcommands, which own
// the CLI11 parser between them.
class Program {
 public:
  // `name` is what messages start with; without one, CLI11 takes argv[0].
  explicit Program(const std::string& description, const std::string& name = "");
  ~Program();
  Program(const Program&) = delete;
  Program& operator=(const Program&) = delete;

  Command& command() { return command_; }  // the program's own options
  Command& add_subcommand(const std::string& name, const std::string& help);
  void require_subcommand(int n);  // exactly n of the subcommands on each command line

  // Parses argv. An unknown option becomes "unknown option --x (did you mean
  // --y?)", an unknown subcommand "unknown command 'x' (did you mean y?); the
  // commands are y, z (see --help)"; an option given twice takes the last
  // value. Returns -1 to go on, else the exit code to return (0 after --help,
  // 2 after a usage error, whose message it printed).
  int parse(int argc, char** argv);

  // A program of one command: parse (above), then apply the command's options
  // and the process options. Returns -1 to go on, else the exit code: 0 after
  // --help, 2 after a usage error or an invalid option, whose message it
  // printed as "<program>: message".
  int parse_and_apply(int argc, char** argv, const ProcessOptions& process);

  // Parses argv as CLI11 alone does (CLI11_PARSE), with its own messages: for
  // the benchmarks, whose options no table describes. Returns -1 to go on,
  // else the exit code CLI11 gives (0 after --help).
  int parse_plain(int argc, char** argv);

 private:
  std::unique_ptr<CLI::App> app_;
  Command command_;
  std::deque<Command> subcommands_;  // a deque: Commands do not move
};

// "a,b,c" -> {a, b, c}, empty items dropped: the comma lists of the lab's and the
// benchmarks' options.
std::vector<std::string> split_list(const std::string& text);

}  // namespace ag::cli
