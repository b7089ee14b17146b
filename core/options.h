// Options declared once. A table header (nn/gpt_options.h, optim/train_options.h,
// ...) lists a config's options, one line each, as a list macro:
//
//   #define AG_GPT_OPTIONS(X)  (each line ending in a backslash)
//     X(Model, int64_t, n_layer, 4, 1, 1024, "transformer blocks N")
//     ...  kind, type, name, default, min, max, help
//
// and the config struct expands it into its fields and a visitor over them:
//
//   struct GPTConfig {
//     AG_DECLARE_OPTIONS(AG_GPT_OPTIONS)
//   };
//
// Everything else is derived from that one line, by the generic functions
// below and by the command-line binding of the example programs: the option
// --n-layer and its --help line, the checkpoint's __metadata__ key n_layer (or
// n-layer in the training state), the range check, and the resume rules of
// its kind. Adding an option is one line plus the code that uses it.
//
// min and max bound numbers (inclusive); other types ignore them (write 0, 0).
// A line may end in one more column, the part of the config the option belongs
// to (OptionInfo::part; nn/gpt_options.h: the attention function whose option
// it is); without it, the option belongs to all of it.
#pragma once
#include <charconv>
#include <cmath>
#include <cstdint>
#include <initializer_list>
#include <limits>
#include <set>
#include <string>
#include <type_traits>
#include <utility>
#include <vector>

#include "core/enum_names.h"
#include "core/error.h"
#include "core/safetensors.h"  // Metadata

namespace ag {

// What an option is a property of, which decides where it is saved and
// whether a resumed run may change it.
enum class OptionKind {
  Model,    // of the function the model computes: saved in the weights' __metadata__; fixed for good
  Derived,  // a model property the program sets (vocab_size, from the text): saved with the model, not an option
  Run,      // of how training proceeds (lr, batch size, seed): saved with the training state; a resumed run keeps it
  Setting,  // may change from one invocation to the next (max_iters, data): saved, and the default when resuming
  Local,    // this invocation only (out, threads): never saved
};

inline constexpr double kNoLimit = std::numeric_limits<double>::infinity();

struct OptionInfo {
  const char* name;  // snake_case: the field, and the key in the model's __metadata__
  OptionKind kind;
  double min, max;
  const char* help;
  const char* part = nullptr;  // the part of its config it belongs to (a GPT's: an attention function's name); null: all

  std::string flag() const;  // "--n-layer"
  std::string dashed() const;  // "n-layer": the key in the training state's __metadata__
};

#define AG_OPTION_FIELD(kind, type, name, default_value, min, max, help, ...) type name = default_value;
#define AG_OPTION_VISIT(kind, type, name, default_value, min, max, help, ...) \
  visit(self.name, ::ag::OptionInfo{#name, ::ag::OptionKind::kind, min, max, help __VA_OPT__(, __VA_ARGS__)});
// The fields, and for_each_option(config, visit): visit(field, info) for each option in table order.
#define AG_DECLARE_OPTIONS(LIST)                                                     \
  LIST(AG_OPTION_FIELD)                                                              \
  template <class Self, class Visit> static void for_each_option(Self& self, Visit&& visit) { \
    LIST(AG_OPTION_VISIT)                                                            \
  }

// An error about the values of options: one outside its range, or several that
// do not fit together. options() names them (snake_case), the one the message
// is about first, so that a caller that knows where each value came from (a
// checkpoint rather than the command line) can say so: the range checks below
// and the configs' check() throw it.
class OptionError : public Error {
 public:
  OptionError(std::vector<std::string> options, const std::string& message)
      : Error(message), options_(std::move(options)) {}
  const std::vector<std::string>& options() const { return options_; }

 private:
  std::vector<std::string> options_;
};

// AG_CHECK about options: AG_CHECK_OPTIONS(min_lr <= lr, "--min-lr ... --lr ...", "min_lr", "lr").
#define AG_CHECK_OPTIONS(cond, message, ...)                           \
  do {                                                                 \
    if (!(cond)) {                                                     \
      std::ostringstream ag_check_stream_;                             \
      ag_check_stream_ << message;                                     \
      throw ::ag::OptionError({__VA_ARGS__}, ag_check_stream_.str());  \
    }                                                                  \
  } while (0)

// --- values as text -----------------------------------------------------------------
// The one text form of each option type, for the command line and metadata
// alike. Numbers round-trip exactly (shortest form: 0.1 is "0.1").

template <class T> std::string option_to_string(const T& value) {
  if constexpr (std::is_same_v<T, bool>) {
    return value ? "true" : "false";
  } else if constexpr (std::is_enum_v<T>) {
    return name_of(value);
  } else if constexpr (std::is_same_v<T, std::string>) {
    return value;
  } else {
    char buffer[64];
    const auto result = std::to_chars(buffer, buffer + sizeof buffer, value);
    return std::string(buffer, result.ptr);
  }
}

// Parses `text` as a T; `what` names its origin in the error ("--lr", "checkpoint 'x': __metadata__ 'lr'").
template <class T> T option_from_string(const std::string& text, const std::string& what) {
  if constexpr (std::is_same_v<T, bool>) {
    if (text == "true" || text == "1") return true;
    if (text == "false" || text == "0") return false;
    throw Error(what + ": '" + text + "' is not true or false");
  } else if constexpr (std::is_enum_v<T>) {
    return enum_from_name<T>(text, what);
  } else if constexpr (std::is_same_v<T, std::string>) {
    return text;
  } else {
    T value{};
    const auto result = std::from_chars(text.data(), text.data() + text.size(), value);
    if (result.ec == std::errc::result_out_of_range) throw Error(what + ": '" + text + "' is out of range");
    if (text.empty() || result.ec != std::errc() || result.ptr != text.data() + text.size())
      throw Error(what + ": '" + text + "' is not " + (std::is_integral_v<T> ? "an integer" : "a number"));
    return value;
  }
}

// Throws unless a number lies in [info.min, info.max] and is finite: a max of
// kNoLimit leaves the range open, yet an lr of inf is no learning rate (and NaN
// lies in no range). Every source of a value (command line, config file,
// checkpoint metadata) comes through here.
template <class T> void check_option_range(const T& value, const OptionInfo& info, const std::string& what) {
  if constexpr (std::is_arithmetic_v<T> && !std::is_same_v<T, bool>) {
    const double v = static_cast<double>(value);
    const bool finite = std::isfinite(v);
    if (finite && v >= info.min && v <= info.max) return;
    std::string bound = finite ? "" : "a finite number ";
    if (info.max == kNoLimit) bound += "≥ " + option_to_string(static_cast<T>(info.min));
    else bound += "in [" + option_to_string(static_cast<T>(info.min)) + ", " + option_to_string(static_cast<T>(info.max)) + "]";
    throw OptionError({info.name}, what + " must be " + bound + ", got " + option_to_string(value));
  }
}

// A value read from metadata: `text` parsed as a T and range-checked, or an
// OptionError about the option, naming `what` (its key).
template <class T> T option_from_metadata(const std::string& text, const OptionInfo& info, const std::string& what) {
  T value{};
  try {
    value = option_from_string<T>(text, what);
  } catch (const Error& e) {
    throw OptionError({info.name}, e.what());
  }
  check_option_range(value, info, what);
  return value;
}

// --- whole configs ---------------------------------------------------------------------

inline bool has_kind(std::initializer_list<OptionKind> kinds, OptionKind kind) {
  for (OptionKind k : kinds)
    if (k == kind) return true;
  return false;
}

// Every option's range; `where` prefixes the message ("train").
template <class Config> void check_option_ranges(const Config& config, const std::string& where = "") {
  Config::for_each_option(config, [&](const auto& value, const OptionInfo& info) {
    check_option_range(value, info, (where.empty() ? "" : where + ": ") + info.flag());
  });
}

enum class KeyStyle { Snake, Dashed };  // n_layer (model metadata) or n-layer (training state)
inline std::string option_key(const OptionInfo& info, KeyStyle style) {
  return style == KeyStyle::Snake ? info.name : info.dashed();
}

// Adds the options of the given kinds to `metadata`.
template <class Config>
void write_options(const Config& config, Metadata& metadata, std::initializer_list<OptionKind> kinds, KeyStyle style) {
  Config::for_each_option(config, [&](const auto& value, const OptionInfo& info) {
    if (has_kind(kinds, info.kind)) metadata[option_key(info, style)] = option_to_string(value);
  });
}

// A metadata key in messages: "__metadata__ 'lr'", after `where` if given (a
// caller that prefixes every error with the file passes none).
inline std::string metadata_key_origin(const std::string& where, const std::string& key) {
  return (where.empty() ? "" : where + ": ") + "__metadata__ '" + key + "'";
}

// Sets each option of the given kinds that `metadata` holds, range-checked;
// adds the keys it read to `used` (so the caller can reject the rest as unknown).
template <class Config>
void read_options(Config& config, const Metadata& metadata, std::initializer_list<OptionKind> kinds, KeyStyle style,
                  const std::string& where, std::set<std::string>& used) {
  Config::for_each_option(config, [&](auto& value, const OptionInfo& info) {
    const std::string key = option_key(info, style);
    const auto found = metadata.find(key);
    if (!has_kind(kinds, info.kind) || found == metadata.end()) return;
    value = option_from_metadata<std::decay_t<decltype(value)>>(found->second, info, metadata_key_origin(where, key));
    used.insert(key);
  });
}

// Throws naming the first key of `metadata` that is neither in `used` nor in
// `known`: a file from a newer attograd, whose model this build would compute wrongly.
void reject_unknown_keys(const Metadata& metadata, const std::set<std::string>& used,
                         std::initializer_list<const char*> known, const std::string& where);

// What resume_options did with the saved options it found.
struct ResumedValues {
  std::set<std::string> taken;  // not given on the command line: they took the saved values (snake_case)
  // Given with another value than the run's, and not a Setting: (option, "--lr: the run has 0.001, this call gives 0.002").
  std::vector<std::pair<std::string, std::string>> conflicts;
};

// Continuing a run saved with `saved` (training-state keys). For each saved
// option: one not `given` on this command line takes the saved value (an
// OptionError if it is none of the option's values); one given replaces it,
// and is a conflict if it differs, unless its kind is Setting. A saved text
// that is no value of its option is an OptionError too, unless `typed`: the
// given options are a user's, who may replace a saved value that way (a
// program's own call gives every option, and must match the run).
template <class Config>
void resume_options(Config& config, const Metadata& saved, const std::set<std::string>& given, bool typed,
                    const std::string& where, std::set<std::string>& used, ResumedValues& resumed) {
  Config::for_each_option(config, [&](auto& value, const OptionInfo& info) {
    const auto found = saved.find(info.dashed());
    if (info.kind == OptionKind::Local || info.kind == OptionKind::Derived || found == saved.end()) return;
    used.insert(info.dashed());
    using T = std::decay_t<decltype(value)>;
    const bool is_given = given.count(info.name) > 0;
    T saved_value{};
    try {
      saved_value = option_from_metadata<T>(found->second, info, metadata_key_origin(where, info.dashed()));
    } catch (const OptionError&) {
      if (is_given && typed) return;
      throw;
    }
    if (!is_given) {
      value = saved_value;
      resumed.taken.insert(info.name);
    } else if (info.kind != OptionKind::Setting && !(value == saved_value)) {
      resumed.conflicts.push_back({info.name, info.flag() + ": the run has " + option_to_string(saved_value) +
                                                  ", this call gives " + option_to_string(value)});
    }
  });
}

// The keys and values of `metadata` (in `style`) that an OptionError is about,
// where its options took their values there (`taken`, snake_case):
// "__metadata__ 'min-lr' = '0.0001' and 'lr' = '0'"; "" if none did.
std::string saved_values_of(const OptionError& error, const std::set<std::string>& taken, const Metadata& metadata,
                            KeyStyle style);

}  // namespace ag
