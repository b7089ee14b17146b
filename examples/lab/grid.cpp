#include "examples/lab/grid.h"

#include <algorithm>
#include <cstdio>

#include "core/error.h"
#include "dist/communicator.h"

namespace ag::lab {

namespace {
std::string snake(std::string name) {
  std::replace(name.begin(), name.end(), '-', '_');
  return name;
}
std::string dashed(std::string name) {
  std::replace(name.begin(), name.end(), '_', '-');
  return name;
}

// Mixer options' short names: the model option each stands for.
const std::map<std::string, std::string>& mixer_aliases() {
  static const std::map<std::string, std::string> aliases = {
      {"window", "attn_window"}, {"dilation", "attn_dilation"}, {"global", "attn_global"},
      {"random_blocks", "attn_random_blocks"}, {"gqa", "n_kv_head"}, {"features", "n_features"}};
  return aliases;
}

// Sets the enum-valued model option that has a value called `value`; false if none has.
bool set_by_value(nn::GPTConfig& model, const std::string& value) {
  bool found = false;
  nn::GPTConfig::for_each_option(model, [&](auto& field, const OptionInfo& info) {
    using T = std::decay_t<decltype(field)>;
    if constexpr (std::is_enum_v<T>) {
      if (found || info.kind != OptionKind::Model || std::string(info.name) == "attention") return;
      for (const auto& [v, name] : EnumNames<T>::values)
        if (value == name) field = v, found = true;
    }
  });
  return found;
}

std::string known_mixer_options(const nn::GPTConfig& model) {
  std::string known;
  for (const auto& [alias, option] : mixer_aliases()) known += alias + ", ";
  std::string values;
  nn::GPTConfig::for_each_option(model, [&](const auto& field, const OptionInfo& info) {
    using T = std::decay_t<decltype(field)>;
    if (info.kind != OptionKind::Model || std::string(info.name) == "attention") return;
    known += info.dashed() + ", ";
    if constexpr (std::is_enum_v<T>) values += (values.empty() ? "" : ", ") + info.dashed() + " " + enum_choices<T>();
  });
  return known.substr(0, known.size() - 2) + "=VALUE; or a value alone of " + values;
}
}  // namespace

bool set_option(Cell& cell, const std::string& name, const std::string& text) {
  bool found = false;
  Cell::for_each_table(cell, [&](auto& table) {
    std::decay_t<decltype(table)>::for_each_option(table, [&](auto& value, const OptionInfo& info) {
      if (info.name != snake(name)) return;
      using T = std::decay_t<decltype(value)>;
      value = option_from_string<T>(text, info.flag());
      check_option_range(value, info, info.flag());
      found = true;
    });
  });
  return found;
}

std::string get_option(const Cell& cell, const std::string& name) {
  std::string text;
  Cell::for_each_table(cell, [&](const auto& table) {
    std::decay_t<decltype(table)>::for_each_option(table, [&](const auto& value, const OptionInfo& info) {
      if (info.name == snake(name)) text = option_to_string(value);
    });
  });
  return text;
}

void apply_mixer(const std::string& mixer, nn::GPTConfig& model) {
  const std::vector<std::string> items = [&] {
    std::vector<std::string> parts;
    size_t start = 0;
    for (size_t colon; (colon = mixer.find(':', start)) != std::string::npos; start = colon + 1)
      parts.push_back(mixer.substr(start, colon - start));
    parts.push_back(mixer.substr(start));
    return parts;
  }();
  model.attention = enum_from_name<AttentionFunction>(items[0], "mixer '" + mixer + "': the attention function");
  for (size_t i = 1; i < items.size(); ++i) {
    const std::string& item = items[i];
    const size_t equals = item.find('=');
    if (equals == std::string::npos) {
      AG_CHECK(set_by_value(model, item), "mixer '" << mixer << "': unknown option '" << item << "'; the known ones: "
                                                    << known_mixer_options(model));
      continue;
    }
    std::string name = snake(item.substr(0, equals));
    if (const auto alias = mixer_aliases().find(name); alias != mixer_aliases().end()) name = alias->second;
    bool found = false;
    nn::GPTConfig::for_each_option(model, [&](auto& value, const OptionInfo& info) {
      if (info.name != name || info.kind != OptionKind::Model || name == "attention") return;
      using T = std::decay_t<decltype(value)>;
      const std::string what = "mixer '" + mixer + "': " + item.substr(0, equals);
      value = option_from_string<T>(item.substr(equals + 1), what);
      check_option_range(value, info, what);
      found = true;
    });
    AG_CHECK(found, "mixer '" << mixer << "': unknown option '" << item.substr(0, equals) << "'; the known ones: "
                              << known_mixer_options(model));
  }
}

std::string Cell::label() const {
  std::string text = std::string(name_of(task.task)) + " " + mixer;
  for (const std::string& axis : axes)  // append, not " " + …: GCC 12 warns falsely (-Wrestrict) on the inlined insert
    text.append(" ").append(dashed(axis)).append("=").append(get_option(*this, axis));
  return text;
}

// The options that differ from their table's defaults make the id: an option added to
// a table later, at its default, leaves every cell's id (and a lab's finished cells) as it was.
std::string Cell::id() const {
  std::string options = mixer;
  for_each_table(*this, [&](const auto& table) {
    using Table = std::decay_t<decltype(table)>;
    const Table fresh{};
    std::vector<std::string> defaults;
    Table::for_each_option(fresh, [&](const auto& value, const OptionInfo&) { defaults.push_back(option_to_string(value)); });
    size_t at = 0;
    Table::for_each_option(table, [&](const auto& value, const OptionInfo& info) {
      const std::string text = option_to_string(value);
      if (text != defaults[at++]) options += "\n" + std::string(info.name) + "=" + text;
    });
  });
  for (const double lr : lrs) options += "\nlr sweep " + option_to_string(lr);
  char hex[17];
  std::snprintf(hex, sizeof hex, "%016llx", static_cast<unsigned long long>(dist::fingerprint(options)));
  return hex;
}

std::vector<Cell> expand(const Grid& grid, const Cell& defaults) {
  std::vector<Cell> cells{defaults};
  cells[0].lrs = grid.lrs.empty() ? std::vector<double>{defaults.optim.lr} : grid.lrs;
  for (const Axis& axis : grid.axes) {
    if (axis.values.size() > 1) cells[0].axes.push_back(axis.name);
  }
  // The zipped axes, checked: each an axis of the grid, all lists of the first one's length.
  std::vector<const Axis*> zipped;
  for (const std::string& name : grid.zipped) {
    const auto axis = std::find_if(grid.axes.begin(), grid.axes.end(), [&](const Axis& a) { return a.name == snake(name); });
    AG_CHECK(axis != grid.axes.end(), "--zip " << name << ": the grid has no such axis (give --" << dashed(name) << " a list)");
    AG_CHECK(zipped.empty() || axis->values.size() == zipped[0]->values.size(),
             "--zip: --" << dashed(zipped[0]->name) << " has " << zipped[0]->values.size() << " values and --" << dashed(name) << " "
                         << axis->values.size() << "; zipped lists go together item by item");
    zipped.push_back(&*axis);
  }
  const auto is_zipped = [&](const Axis& axis) { return std::find(zipped.begin(), zipped.end(), &axis) != zipped.end(); };
  bool zipped_done = false;
  for (const Axis& axis : grid.axes) {
    const bool zip = is_zipped(axis);
    if (zip && zipped_done) continue;  // set with the first zipped axis
    zipped_done = zipped_done || zip;
    const std::vector<const Axis*> together = zip ? zipped : std::vector<const Axis*>{&axis};
    std::vector<Cell> next;
    for (const Cell& cell : cells)
      for (size_t k = 0; k < axis.values.size(); ++k) {
        Cell c = cell;
        for (const Axis* a : together)
          AG_CHECK(set_option(c, a->name, a->values[k]), "the lab has no option --" << a->name);
        next.push_back(std::move(c));
      }
    cells = std::move(next);
  }
  std::vector<Cell> with_mixers;
  for (const Cell& cell : cells)
    for (const std::string& mixer : grid.mixers) {
      Cell c = cell;
      c.mixer = mixer;
      apply_mixer(mixer, c.model);
      with_mixers.push_back(std::move(c));
    }
  return with_mixers;
}

// --- results.csv ------------------------------------------------------------------------

const std::vector<std::string>& result_columns() {
  static const std::vector<std::string> columns = {
      "task", "mixer", "block_size", "pairs", "depth", "digits", "copy_tokens", "vocab", "n_embd", "n_head",
      "n_kv_head", "n_layer", "seed", "params", "state_floats", "lr", "steps", "accuracy", "loss", "ms_per_iter",
      "tokens_per_s", "peak_mb", "seconds", "device", "status", "reason", "cell", "cell_seconds",
      "graph_mask", "min_nodes", "nodes", "max_distance"};
  return columns;
}

namespace {
std::string csv_field(const std::string& value) {
  if (value.find_first_of(",\"\n") == std::string::npos) return value;
  std::string quoted = "\"";
  for (const char c : value) quoted += c == '"' ? std::string("\"\"") : std::string(1, c);
  return quoted + "\"";
}

// The fields of each record of `text` (RFC 4180: quoted fields may hold commas, quotes and newlines).
std::vector<std::vector<std::string>> csv_records(const std::string& text) {
  std::vector<std::vector<std::string>> records;
  std::vector<std::string> record;
  std::string field;
  bool quoted = false, any = false;
  for (size_t i = 0; i < text.size(); ++i) {
    const char c = text[i];
    any = true;
    if (quoted) {
      if (c == '"' && i + 1 < text.size() && text[i + 1] == '"') field += '"', ++i;
      else if (c == '"') quoted = false;
      else field += c;
    } else if (c == '"') {
      quoted = true;
    } else if (c == ',') {
      record.push_back(std::move(field));
      field.clear();
    } else if (c == '\n') {
      record.push_back(std::move(field));
      field.clear();
      records.push_back(std::move(record));
      record.clear();
      any = false;
    } else {
      field += c;
    }
  }
  if (any) {
    record.push_back(std::move(field));
    records.push_back(std::move(record));
  }
  return records;
}
}  // namespace

std::string csv_text(const std::vector<Row>& rows) {
  // A record of the columns' fields, given each column's text.
  const auto record = [](const auto& field_of) {
    std::string line;
    for (const std::string& column : result_columns()) {
      if (&column != &result_columns().front()) line += ',';
      line += field_of(column);
    }
    return line + "\n";
  };
  std::string text = record([](const std::string& column) { return column; });
  for (const Row& row : rows)
    text += record([&](const std::string& column) {
      const auto found = row.find(column);
      return csv_field(found == row.end() ? "" : found->second);
    });
  return text;
}

std::vector<Row> parse_csv(const std::string& text) {
  const std::vector<std::vector<std::string>> records = csv_records(text);
  AG_CHECK(!records.empty(), "results.csv: no header line");
  const std::vector<std::string>& header = records[0];
  std::vector<Row> rows;
  for (size_t r = 1; r < records.size(); ++r) {
    AG_CHECK(records[r].size() == header.size(), "results.csv: line " << r + 1 << " has " << records[r].size()
                                                                        << " fields, the header " << header.size());
    Row row;
    for (size_t i = 0; i < header.size(); ++i)
      if (!records[r][i].empty()) row[header[i]] = records[r][i];
    rows.push_back(std::move(row));
  }
  return rows;
}

}  // namespace ag::lab
