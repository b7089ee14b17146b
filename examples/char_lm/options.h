// Command-line options for the example programs: each subcommand declares its
// options once (name, default, help) and gets parsing, --help and errors.
#pragma once
#include <cstdint>
#include <string>
#include <vector>

namespace ag::cli {

class Options {
 public:
  Options(std::string usage_line, std::string summary);

  // `--name VALUE`, with a default ("" for none) and a line of help.
  Options& add(const std::string& name, const std::string& default_value, const std::string& help);
  // `--name` alone sets it.
  Options& flag(const std::string& name, const std::string& help);

  // Parses argv[first..argc). Returns false after printing usage for --help;
  // throws ag::Error on an unknown option or a missing value.
  bool parse(int argc, char** argv, int first);

  const std::string& str(const std::string& name) const;
  int64_t integer(const std::string& name) const;
  double real(const std::string& name) const;
  bool on(const std::string& name) const;
  bool given(const std::string& name) const;  // set on the command line, not defaulted
  // Replaces the default of option `name` (ignored when it was given on the
  // command line, or is not an option here).
  void set_default(const std::string& name, const std::string& value);
  std::string usage() const;

 private:
  struct Option {
    std::string name, value, help;
    bool is_flag = false, given = false;
  };
  const Option& find(const std::string& name) const;

  std::string usage_line_, summary_;
  std::vector<Option> options_;
};

}  // namespace ag::cli
