#include "examples/char_lm/options.h"

#include <cstdio>
#include <sstream>

#include "core/error.h"

namespace ag::cli {

Options::Options(std::string usage_line, std::string summary)
    : usage_line_(std::move(usage_line)), summary_(std::move(summary)) {}

Options& Options::add(const std::string& name, const std::string& default_value, const std::string& help) {
  options_.push_back({name, default_value, help});
  return *this;
}

Options& Options::flag(const std::string& name, const std::string& help) {
  options_.push_back({name, "", help, true});
  return *this;
}

bool Options::parse(int argc, char** argv, int first) {
  for (int i = first; i < argc; ++i) {
    const std::string arg = argv[i];
    if (arg == "--help" || arg == "-h") {
      std::fputs(usage().c_str(), stdout);
      return false;
    }
    AG_CHECK(arg.rfind("--", 0) == 0, "unexpected argument '" << arg << "'\n" << usage());
    Option* option = nullptr;
    for (Option& o : options_)
      if (o.name == arg.substr(2)) option = &o;
    AG_CHECK(option, "unknown option " << arg << "\n" << usage());
    option->given = true;
    AG_CHECK(option->is_flag || i + 1 < argc, "option " << arg << " needs a value");
    option->value.assign(option->is_flag ? "1" : argv[++i]);
  }
  return true;
}

const Options::Option& Options::find(const std::string& name) const {
  for (const Option& o : options_)
    if (o.name == name) return o;
  throw Error("internal: no option --" + name);
}

const std::string& Options::str(const std::string& name) const { return find(name).value; }
bool Options::on(const std::string& name) const { return find(name).value == "1"; }
bool Options::given(const std::string& name) const { return find(name).given; }

void Options::set_default(const std::string& name, const std::string& value) {
  for (Option& o : options_)
    if (o.name == name && !o.given) o.value = value;
}

namespace {
// parse(text, &used) over the whole of `value`, else an error naming the option.
template <class Parse>
auto parse_whole(const std::string& name, const std::string& value, const char* kind, Parse parse) {
  size_t used = 0;
  decltype(parse(value, &used)) x{};
  try {
    x = parse(value, &used);
  } catch (const std::exception&) {
  }
  AG_CHECK(!value.empty() && used == value.size(), "--" << name << ": '" << value << "' is not " << kind);
  return x;
}
}  // namespace

int64_t Options::integer(const std::string& name) const {
  return parse_whole(name, str(name), "an integer", [](const std::string& v, size_t* used) { return std::stoll(v, used); });
}

double Options::real(const std::string& name) const {
  return parse_whole(name, str(name), "a number", [](const std::string& v, size_t* used) { return std::stod(v, used); });
}

std::string Options::usage() const {
  std::ostringstream os;
  os << "usage: " << usage_line_ << "\n" << summary_ << "\n\noptions:\n";
  for (const Option& o : options_) {
    std::string left = "  --" + o.name + (o.is_flag ? "" : " X");
    left.resize(std::max<size_t>(left.size() + 1, 24), ' ');
    os << left << o.help;
    if (!o.is_flag && !o.value.empty()) os << " (default " << o.value << ")";
    os << "\n";
  }
  return os.str();
}

}  // namespace ag::cli
