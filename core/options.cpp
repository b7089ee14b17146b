#include "core/options.h"

#include <algorithm>

namespace ag {

std::string OptionInfo::dashed() const {
  std::string out = name;
  std::replace(out.begin(), out.end(), '_', '-');
  return out;
}

std::string OptionInfo::flag() const { return "--" + dashed(); }

void reject_unknown_keys(const Metadata& metadata, const std::set<std::string>& used,
                         std::initializer_list<const char*> known, const std::string& where) {
  for (const auto& [key, value] : metadata) {
    if (used.count(key) || std::find(known.begin(), known.end(), key) != known.end()) continue;
    throw Error((where.empty() ? "" : where + ": ") + "__metadata__ has '" + key + "' (= '" + value +
                "'), which this build of attograd does not know: the file may come from a newer version, whose "
                "model this one would compute wrongly");
  }
}

std::string saved_values_of(const OptionError& error, const std::set<std::string>& taken, const Metadata& metadata,
                            KeyStyle style) {
  std::vector<std::string> values;
  for (const std::string& option : error.options()) {
    if (!taken.count(option)) continue;
    std::string key = option;
    if (style == KeyStyle::Dashed) std::replace(key.begin(), key.end(), '_', '-');
    const auto found = metadata.find(key);
    if (found != metadata.end()) values.push_back("'" + key + "' = '" + found->second + "'");
  }
  std::string text;
  for (size_t i = 0; i < values.size(); ++i)
    text += (i == 0 ? "__metadata__ " : i + 1 == values.size() ? " and " : ", ") + values[i];
  return text;
}

}  // namespace ag
