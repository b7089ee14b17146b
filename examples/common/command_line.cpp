#include "examples/common/command_line.h"

#include <CLI/CLI.hpp>  // here alone (command_line.h says why)

#include <algorithm>
#include <cstdio>
#include <filesystem>
#include <optional>

#include "core/threads.h"
#include "dist/communicator.h"

namespace ag::cli {

void ProcessOptions::apply() const {
  set_num_threads(threads > 0 ? static_cast<int>(threads) : default_num_threads(dist::world().local_size()));
}

Option& Option::expected(int n) {
  option_->expected(n);
  return *this;
}

Option& Option::one_of(const std::vector<std::string>& values) {
  option_->check(CLI::IsMember(values));
  return *this;
}

Option& Option::type_name(const std::string& name) {
  option_->type_name(name);
  return *this;
}

Option& Option::default_text(const std::string& text) {
  option_->default_str(text);
  return *this;
}

Option& Option::take_last() {
  option_->multi_option_policy(CLI::MultiOptionPolicy::TakeLast);
  return *this;
}

bool Option::given() const { return option_->count() > 0; }

Option Command::option(const std::string& name, int& value, const std::string& help) {
  return Option(app_->add_option(name, value, help));
}
Option Command::option(const std::string& name, int64_t& value, const std::string& help) {
  return Option(app_->add_option(name, value, help));
}
Option Command::option(const std::string& name, double& value, const std::string& help) {
  return Option(app_->add_option(name, value, help));
}
Option Command::option(const std::string& name, std::string& value, const std::string& help) {
  return Option(app_->add_option(name, value, help));
}
Option Command::option(const std::string& name, std::vector<std::string>& value, const std::string& help) {
  return Option(app_->add_option(name, value, help));
}

void Command::bind_switch(const OptionInfo& info, bool on, Setter set) {
  std::string& text = texts_.emplace_back();
  const CLI::Option* option =
      app_->add_option(info.flag(), text, info.help)
          ->expected(0, 1)
          ->type_name(on ? "[true|false]=true" : "[true|false]")  // (a default string would be taken as the value of --x alone)
          ->multi_option_policy(CLI::MultiOptionPolicy::TakeLast);
  bindings_.push_back({info, std::move(set), option, &text, true});
}

void Command::bind_value(const OptionInfo& info, const std::string& type_name, const std::string& default_text,
                         Setter set) {
  std::string& text = texts_.emplace_back();
  const CLI::Option* option =
      app_->add_option(info.flag(), text, info.help)
          ->type_name(type_name)
          ->default_str(default_text)
          ->multi_option_policy(CLI::MultiOptionPolicy::TakeLast);  // as argparse, and as over a --config file
  bindings_.push_back({info, std::move(set), option, &text, false});
}

Command& Command::allow_config_file() {
  app_->add_option("--config", config_file_,
                   "read options from a TOML file (key = value per line, e.g. n-layer = 6); the command line's win")
      ->multi_option_policy(CLI::MultiOptionPolicy::TakeLast);
  return *this;
}

void Command::apply_config_file(const std::string& path) {
  AG_CHECK(std::filesystem::exists(path), "--config '" << path << "' does not exist");
  std::vector<CLI::ConfigItem> items;
  try {
    items = CLI::ConfigTOML().from_file(path);
  } catch (const CLI::Error& e) {
    throw Error("--config '" + path + "': " + e.what());
  }
  for (const CLI::ConfigItem& item : items) {
    std::string key = item.name;
    std::replace(key.begin(), key.end(), '_', '-');
    const std::string what = "--config '" + path + "': " + key;
    Binding* found = nullptr;
    for (Binding& b : bindings_)
      if (b.info.dashed() == key) found = &b;
    AG_CHECK(item.parents.empty() && found, what << ": not an option of this command (see --help)");
    AG_CHECK(item.inputs.size() == 1, what << ": needs exactly one value");
    found->set(item.inputs[0], what);
    given_.insert(found->info.name);
  }
}

void Command::apply() {
  if (!config_file_.empty()) apply_config_file(config_file_);
  for (Binding& b : bindings_) {
    if (b.option->count() == 0) continue;
    b.set(b.is_switch && b.text->empty() ? std::string("true") : *b.text, b.info.flag());
    given_.insert(b.info.name);
  }
}

bool Command::parsed() const { return app_->parsed(); }

std::string Command::help() const { return app_->help(); }

namespace {
// Edit distance, for "did you mean".
size_t distance(const std::string& a, const std::string& b) {
  std::vector<size_t> row(b.size() + 1);
  for (size_t j = 0; j <= b.size(); ++j) row[j] = j;
  for (size_t i = 1; i <= a.size(); ++i) {
    size_t diagonal = row[0];
    row[0] = i;
    for (size_t j = 1; j <= b.size(); ++j) {
      const size_t up = row[j];
      row[j] = std::min({row[j] + 1, row[j - 1] + 1, diagonal + (a[i - 1] != b[j - 1])});
      diagonal = up;
    }
  }
  return row[b.size()];
}

// " (did you mean X?)" for the candidate nearest `name`, if it is near enough to be a typo of it.
std::string suggestion(const std::string& name, const std::vector<std::string>& candidates) {
  std::string nearest;
  size_t best = SIZE_MAX;
  for (const std::string& candidate : candidates) {
    const size_t d = distance(name, candidate);
    if (d < best) best = d, nearest = candidate;
  }
  return best <= std::max<size_t>(2, name.size() / 3) ? " (did you mean " + nearest + "?)" : "";
}

// The first argument `app` did not take, as an error with the nearest option name.
std::string unknown_argument(const CLI::App& app, const std::string& arg) {
  if (arg.rfind("-", 0) != 0) return "unexpected argument '" + arg + "' (see --help)";
  const std::string name = arg.substr(0, arg.find('='));
  std::vector<std::string> options;
  for (const CLI::Option* option : app.get_options())
    for (const std::string& long_name : option->get_lnames()) options.push_back("--" + long_name);
  return "unknown option " + name + suggestion(name, options) + "; see --help";
}

// The first argument, when the program takes subcommands and it names none of
// them, as an error with the nearest command and the list of them: CLI11
// itself would only say "A subcommand is required".
std::optional<std::string> unknown_command(const CLI::App& app, int argc, char** argv) {
  std::vector<std::string> commands;
  std::string known;
  for (const CLI::App* sub : app.get_subcommands({})) {
    commands.push_back(sub->get_name());
    known += (known.empty() ? "" : ", ") + sub->get_name();
  }
  if (commands.empty() || argc < 2 || argv[1][0] == '-') return std::nullopt;
  const std::string name = argv[1];
  if (std::find(commands.begin(), commands.end(), name) != commands.end()) return std::nullopt;
  return "unknown command '" + name + "'" + suggestion(name, commands) + "; the commands are " + known + " (see --help)";
}
}  // namespace

Program::Program(const std::string& description, const std::string& name)
    : app_(std::make_unique<CLI::App>(description, name)), command_(app_.get()) {}

Program::~Program() = default;

Command& Program::add_subcommand(const std::string& name, const std::string& help) {
  return subcommands_.emplace_back(app_->add_subcommand(name, help));
}

void Program::require_subcommand(int n) { app_->require_subcommand(n); }

int Program::parse(int argc, char** argv) {
  CLI::App& app = *app_;
  if (const std::optional<std::string> error = unknown_command(app, argc, argv)) {
    std::fprintf(stderr, "%s: %s\n", app.get_name().c_str(), error->c_str());
    return 2;
  }
  app.allow_extras();
  for (CLI::App* sub : app.get_subcommands({})) sub->allow_extras();
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    return app.exit(e);  // --help prints and returns 0; a usage error prints and returns non-zero
  }
  std::vector<const CLI::App*> chosen{&app};
  for (const CLI::App* sub : app.get_subcommands()) chosen.push_back(sub);
  for (const CLI::App* a : chosen) {
    const std::vector<std::string> extra = a->remaining();
    if (extra.empty()) continue;
    // Suggest from the innermost command: an unknown option after "train" was meant for train.
    std::fprintf(stderr, "%s: %s\n", app.get_name().c_str(), unknown_argument(*chosen.back(), extra[0]).c_str());
    return 2;
  }
  return -1;
}

int Program::parse_and_apply(int argc, char** argv, const ProcessOptions& process) {
  if (const int code = parse(argc, argv); code >= 0) return code;
  try {
    command_.apply();
    process.apply();
  } catch (const std::exception& e) {
    std::fprintf(stderr, "%s: %s\n", app_->get_name().c_str(), e.what());
    return 2;
  }
  return -1;
}

int Program::parse_plain(int argc, char** argv) {
  try {
    app_->parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    return app_->exit(e);
  }
  return -1;
}

std::vector<std::string> split_list(const std::string& text) {
  std::vector<std::string> items;
  size_t start = 0;
  while (start <= text.size()) {
    const size_t comma = std::min(text.find(',', start), text.size());
    if (comma > start) items.push_back(text.substr(start, comma - start));
    start = comma + 1;
  }
  return items;
}

}  // namespace ag::cli
