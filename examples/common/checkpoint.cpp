#include "examples/common/checkpoint.h"

#include <fcntl.h>
#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <limits>
#include <map>
#include <optional>
#include <nlohmann/json.hpp>

#include "core/autograd.h"
#include "core/options.h"
#include "core/safetensors.h"

namespace ag::char_lm {

namespace {
// A one-element int64 tensor holding a 64-bit unsigned value (its bits).
Tensor u64_tensor(uint64_t v) { return Tensor::from_indices({static_cast<int64_t>(v)}, {1}); }

uint64_t u64_value(const SafetensorsFile& file, const std::string& name) {
  AG_CHECK(file.contains(name), "has no tensor '" << name << "'");
  const Tensor& t = file.at(name);
  AG_CHECK(t.dtype() == DType::Int64 && t.numel() == 1, "'" << name << "' should be one int64, is " << describe(t));
  return static_cast<uint64_t>(t.to_indices()[0]);
}

std::string where(const SafetensorsFile& file) { return "checkpoint '" + file.path + "'"; }

// Runs `read` on a loaded file and prefixes whatever it throws with the file's
// name: the one place that names it, so each check below names only the key.
template <class Read> auto naming_file(const SafetensorsFile& file, Read&& read) -> decltype(read()) {
  try {
    return read();
  } catch (const Error& e) {
    throw Error(where(file) + ": " + e.what());
  }
}

// The tensors of a training state besides the optimizer's (optim.*), each one int64.
constexpr const char* kTrainStateCounters[] = {"iter", "rng.batch.seed", "rng.batch.offset", "rng.dropout.seed",
                                               "rng.dropout.offset"};
// Run options every training state has recorded since the first: without them
// a resumed run would go on with defaults, another run than the one saved.
constexpr const char* kRequiredRunKeys[] = {"block-size", "n-layer", "n-head", "n-embd", "lr", "batch-size", "seed"};

// The model options every checkpoint has recorded since the first; newer ones
// may be absent (then they take their defaults, the function older models computed).
constexpr const char* kRequiredModelKeys[] = {"vocab_size", "block_size", "n_layer", "n_head", "n_embd"};

// The parameters whose shapes the size options decide, checked against the
// file before the model is built: a file cannot make us allocate more than it holds.
void check_sizes_against_tensors(const SafetensorsFile& file, const nn::GPTConfig& c) {
  // `keys`: the __metadata__ keys that decide the shape, so the message names them.
  const auto expect = [&](const std::string& name, const Shape& shape, const char* keys) {
    AG_CHECK(file.contains(name), "has no tensor '" << name << "' (n_layer = " << c.n_layer << ")");
    AG_CHECK(file.at(name).shape() == shape, "'" << name << "' is " << to_string(file.at(name).shape()) << " but __metadata__ ("
                                                 << keys << ") says " << to_string(shape));
  };
  expect("tok_emb.weight", {c.vocab_size, c.n_embd}, "vocab_size, n_embd");
  if (c.position == PositionEncoding::Learned) {
    AG_CHECK(file.contains("pos_emb.weight"), "has no tensor 'pos_emb.weight', which __metadata__ 'position' = learned needs"
                                                  " (a model without learned positions says so in 'position')");
    expect("pos_emb.weight", {c.block_size, c.n_embd}, "block_size, n_embd");
  } else {
    AG_CHECK(!file.contains("pos_emb.weight"), "holds 'pos_emb.weight', but __metadata__ 'position' = "
                                                   << name_of(c.position) << " has no learned positions");
  }
  const int64_t kv_width = c.kv_heads() * (c.n_embd / c.n_head);  // H_kv·d_h
  for (int64_t i = 0; i < c.n_layer; ++i) {
    const std::string block = "blocks." + std::to_string(i);
    if (c.state_mixer == nn::StateMixer::Mlp) expect(block + ".mlp.fc.weight", {c.n_embd, 4 * c.n_embd}, "n_embd");
    if (c.attention == AttentionFunction::Lstm) {  // not an attention function: no projections (nn/lstm.h)
      for (const char* weight : {"weight_ih", "weight_hh"})
        expect(block + ".attn." + weight, {c.n_embd, 4 * c.n_embd}, "n_embd, attention");
      for (const char* bias : {"bias_ih", "bias_hh"}) expect(block + ".attn." + bias, {4 * c.n_embd}, "n_embd, attention");
      continue;
    }
    if (c.attention == AttentionFunction::S4) {  // S4D's parameters per channel and W_O (nn/s4.h)
      const std::string attn = block + ".attn.";
      for (const char* per_channel : {"log_dt", "D"}) expect(attn + per_channel, {c.n_embd}, "n_embd, attention");
      for (const char* per_mode : {"log_A_re", "A_im"}) expect(attn + per_mode, {c.n_embd, c.s4_state / 2}, "n_embd, s4_state");
      for (const char* complex : {"B", "C"}) expect(attn + complex, {c.n_embd, c.s4_state / 2, 2}, "n_embd, s4_state");
      expect(attn + "w_o.weight", {c.n_embd, c.n_embd}, "n_embd");
      expect(attn + "w_o.bias", {c.n_embd}, "n_embd");
      continue;
    }
    expect(block + ".attn.w_k.weight", {c.n_embd, kv_width}, "n_embd, n_head, n_kv_head");
    expect(block + ".attn.w_v.weight", {c.n_embd, kv_width}, "n_embd, n_head, n_kv_head");
    if (!c.applies("ssd_conv")) continue;
    const std::string attn = block + ".attn.";
    if (c.ssd_conv > 0) {
      expect(attn + "conv.weight", {c.ssd_conv, c.n_embd + 2 * kv_width}, "ssd_conv, n_embd, n_head, n_kv_head");
      expect(attn + "conv.bias", {c.n_embd + 2 * kv_width}, "n_embd, n_head, n_kv_head");
    }
    expect(attn + "w_dt.weight", {c.n_embd, c.n_head}, "n_embd, n_head");
    expect(attn + "a_log", {c.n_head}, "n_head");
    expect(attn + "d_skip", {c.n_head}, "n_head");
    if (c.ssd_gate) expect(attn + "w_g.weight", {c.n_embd, c.n_embd}, "n_embd, ssd_gate");
  }
}
}  // namespace

std::string model_path(const std::string& dir) { return dir + "/model.safetensors"; }
std::string train_state_path(const std::string& dir) { return dir + "/train_state.safetensors"; }

void save_model(const std::string& path, const nn::GPT& model, const text::Tokenizer& tokenizer, int64_t iter) {
  Metadata metadata;
  nn::write_model_options(model.config(), metadata, {OptionKind::Model, OptionKind::Derived}, KeyStyle::Snake);
  if (model.config().head_mask.empty()) metadata.erase("head_mask");  // every head on: files as before pruning existed
  metadata.merge(tokenizer.to_metadata());
  if (iter >= 0) metadata["iter"] = std::to_string(iter);
  std::vector<NamedTensor> tensors;
  for (const NamedTensor& p : model.state()) tensors.push_back({p.name, p.tensor.to(DType::Float32)});
  save_safetensors(path, tensors, metadata);
}

namespace {
// What follows an error about a model's options as its file holds them.
constexpr const char* kModelOptionsAdvice =
    ". A model's options are saved with its weights, and no command line replaces them: this file is damaged or "
    "another program wrote it (the run's other checkpoints, ckpt-*, may be intact)";

// load_model's checks and construction; its caller names the file in every error.
LoadedModel model_from(const SafetensorsFile& file, DType dtype, const nn::GPTConfig& settings) {
  nn::GPTConfig config = settings;
  std::set<std::string> used;
  for (const char* key : kRequiredModelKeys) AG_CHECK(file.metadata.count(key), "__metadata__ has no '" << key << "'");
  Metadata metadata = file.metadata;
  nn::add_older_files_options(metadata, KeyStyle::Snake);
  // The file's options alone first, so that a bad value is blamed on the file (its key and value), and a setting
  // that does not apply to its model (--attn-impl flash on linear attention) on the call that gave it.
  nn::GPTConfig file_only;
  try {
    read_options(config, metadata, {OptionKind::Model, OptionKind::Derived}, KeyStyle::Snake, "", used);
    read_options(file_only, metadata, {OptionKind::Model, OptionKind::Derived}, KeyStyle::Snake, "", used);
  } catch (const OptionError& e) {
    throw OptionError(e.options(), e.what() + std::string(kModelOptionsAdvice));
  }
  reject_unknown_keys(file.metadata, used, {"chars", "iter"}, "");
  try {
    file_only.check();
  } catch (const OptionError& e) {
    const std::string values = saved_values_of(e, used, metadata, KeyStyle::Snake);
    throw OptionError(e.options(), "the model's " + (values.empty() ? "__metadata__" : values) +
                                       " describes no valid model: " + e.what() + kModelOptionsAdvice);
  }
  config.check();
  check_sizes_against_tensors(file, config);

  LoadedModel loaded;
  loaded.tokenizer = text::Tokenizer::from_metadata(file.metadata);
  AG_CHECK(loaded.tokenizer.vocab_size() == 0 || loaded.tokenizer.vocab_size() == config.vocab_size,
           "__metadata__ 'chars' has " << loaded.tokenizer.vocab_size() << " characters for vocab_size " << config.vocab_size);
  if (file.metadata.count("iter")) {
    loaded.iter = option_from_string<int64_t>(file.metadata.at("iter"), "__metadata__ 'iter'");
    AG_CHECK(loaded.iter >= 0, "__metadata__ 'iter' is negative");
  }
  Generator unused(0);  // the weights come from the file
  loaded.model = std::make_unique<nn::GPT>(config, unused);
  loaded.model->to(dtype);
  std::vector<NamedTensor> weights;
  for (const NamedTensor& t : file.tensors) {
    AG_CHECK(is_floating(t.tensor.dtype()), "parameter '" << t.name << "' has dtype " << t.tensor.dtype());
    AG_CHECK(all_finite(t.tensor),
             "parameter '" << t.name << "' holds NaN or infinite values (a diverged run's weights?)");
    weights.push_back({t.name, t.tensor.to(dtype)});
  }
  loaded.model->load_state(weights);
  return loaded;
}
}  // namespace

LoadedModel load_model(const std::string& path, DType dtype, const nn::GPTConfig& settings) {
  const SafetensorsFile file = load_safetensors(path);  // its own errors name the file
  return naming_file(file, [&] { return model_from(file, dtype, settings); });
}

namespace {
// The activation `name` (Module::observe's) in words, with the parameters that computed it.
std::string activation_words(const std::string& name) {
  if (name == "logits") return "the logits (ln_f's output times tok_emb.weight, the tied head)";
  if (name == "tok_emb") return "the token embeddings (tok_emb.weight's rows)";
  return "the output of " + name + " (parameters " + name + ".*)";
}
}  // namespace

// Why parameters are checked before running, besides the activations while it runs: a huge but finite weight may
// never reach an activation that overflows. An embedding row of a character the prompt lacks is never read, nor a
// position past the prompt; a LayerNorm bias of 3e38 gives logits of about 1e36, finite and meaningless. The bound
// is the largest value whose square float32 holds, since a LayerNorm's variance and every dot product square their
// inputs; no trained model comes near it (its weights are O(1)), so the check refuses only damaged files, and it
// covers every tensor of the checkpoint, read or not.
LoadedModel load_model_to_run(const std::string& path, const nn::GPTConfig& settings) {
  LoadedModel loaded = load_model(path, DType::Float32, settings);
  const double bound = std::sqrt(static_cast<double>(std::numeric_limits<float>::max()));
  for (const NamedTensor& p : loaded.model->named_parameters()) {
    const std::vector<double> values = p.tensor.to_vector();
    const auto huge = std::find_if(values.begin(), values.end(), [&](double v) { return std::fabs(v) > bound; });
    AG_CHECK(huge == values.end(),
             "checkpoint '" << path << "': parameter '" << p.name << "' holds " << *huge << " (element "
                            << huge - values.begin() << "): finite, but over √FLT_MAX ≈ 1.8e19 in magnitude, so its "
                            "square overflows float32 (a LayerNorm's variance, a dot product) and the model cannot run; "
                            "no trained model holds such a value (a damaged file?)");
  }
  loaded.model->set_activation_hook([path](const std::string& name, const Tensor& activation) {
    AG_CHECK(all_finite(activation), "checkpoint '" << path << "': running the model gave a NaN or an infinity, first in "
                                                    << activation_words(name) << ": its weights are finite but too "
                                                    "large for float32 arithmetic; the model is refused");
  });
  return loaded;
}

void save_train_state(const std::string& path, const TrainState& state, const TrainConfig& config,
                      const optim::Optimizer& optimizer) {
  std::vector<NamedTensor> tensors = {{"iter", u64_tensor(state.iter)},
                                      {"rng.batch.seed", u64_tensor(state.batch_seed)},
                                      {"rng.batch.offset", u64_tensor(state.batch_offset)},
                                      {"rng.dropout.seed", u64_tensor(state.dropout_seed)},
                                      {"rng.dropout.offset", u64_tensor(state.dropout_offset)}};
  for (const NamedTensor& t : optimizer.state()) tensors.push_back({"optim." + t.name, t.tensor});
  Metadata options;
  TrainConfig::for_each_table(config, [&](const auto& table) {
    if constexpr (std::is_same_v<std::decay_t<decltype(table)>, nn::GPTConfig>)
      nn::write_model_options(table, options, {OptionKind::Model, OptionKind::Run, OptionKind::Setting}, KeyStyle::Dashed);
    else
      write_options(table, options, {OptionKind::Model, OptionKind::Run, OptionKind::Setting}, KeyStyle::Dashed);
  });
  save_safetensors(path, tensors, options);
}

SafetensorsFile load_train_state(const std::string& path) {
  SafetensorsFile file = load_safetensors(path);  // its own errors name the file
  naming_file(file, [&] {
    for (const char* key : kRequiredRunKeys)
      AG_CHECK(file.metadata.count(key), "__metadata__ has no '" << key << "': the run's options are missing, and "
                                         "continuing on defaults would train another run than the one saved");
    for (const NamedTensor& t : file.tensors)
      AG_CHECK(t.name.starts_with("optim.") ||
                   std::find(std::begin(kTrainStateCounters), std::end(kTrainStateCounters), t.name) != std::end(kTrainStateCounters),
               "holds a tensor '" << t.name << "' that no version of char_lm writes in a training state");
    for (const char* name : kTrainStateCounters) u64_value(file, name);
    AG_CHECK(static_cast<int64_t>(u64_value(file, "iter")) >= 0, "'iter' is negative");
  });
  return file;
}

int64_t train_state_iter(const SafetensorsFile& file) {
  return naming_file(file, [&] { return static_cast<int64_t>(u64_value(file, "iter")); });
}

TrainState restore_train_state(const SafetensorsFile& file, optim::Optimizer& optimizer) {
  return naming_file(file, [&] {
    TrainState state;
    state.iter = static_cast<int64_t>(u64_value(file, "iter"));
    state.batch_seed = u64_value(file, "rng.batch.seed");
    state.batch_offset = u64_value(file, "rng.batch.offset");
    state.dropout_seed = u64_value(file, "rng.dropout.seed");
    state.dropout_offset = u64_value(file, "rng.dropout.offset");
    optim::NamedTensors optimizer_state;
    for (const NamedTensor& t : file.tensors)
      if (t.name.starts_with("optim.")) optimizer_state.push_back({t.name.substr(6), t.tensor});
    try {
      optimizer.load_state(optimizer_state);
    } catch (const Error& e) {
      throw Error(std::string("optim.* (the optimizer's state, named below without optim.): ") + e.what());
    }
    return state;
  });
}

namespace {
// The options given on the command line: config.given, or every option (a program's own call).
std::set<std::string> given_options(const TrainConfig& config) {
  if (config.given) return *config.given;
  std::set<std::string> given;
  TrainConfig::for_each_table(config, [&](const auto& table) {
    std::decay_t<decltype(table)>::for_each_option(table, [&](const auto&, const OptionInfo& info) { given.insert(info.name); });
  });
  return given;
}

// Takes the saved options not in `given` (ag::resume_options: `typed`, by a user; an older file's absent ones as
// nn::add_older_files_options fills them), and rejects the keys no table knows.
ResumedValues merge_saved(TrainConfig& config, const Metadata& file_metadata, const std::set<std::string>& given, bool typed) {
  Metadata saved = file_metadata;
  nn::add_older_files_options(saved, KeyStyle::Dashed);
  ResumedValues resumed;
  std::set<std::string> used;
  TrainConfig::for_each_table(config, [&](auto& table) { ag::resume_options(table, saved, given, typed, "", used, resumed); });
  reject_unknown_keys(saved, used, {}, "");
  return resumed;
}

// What follows an error about values a resumed run took from its training state
// (snake_case names, the first the one the error is about): how to replace them
// on the command line. A model option must keep the value its weights have.
std::string replace_advice(const TrainConfig& config, const std::vector<std::string>& options) {
  std::map<std::string, OptionInfo> infos;
  TrainConfig::for_each_table(config, [&](const auto& table) {
    std::decay_t<decltype(table)>::for_each_option(table, [&](const auto&, const OptionInfo& info) { infos.emplace(info.name, info); });
  });
  std::string advice = ". To replace a saved value, give it again: char_lm train --resume --out " + config.run.out;
  bool model_option = false;
  for (size_t i = 0; i < options.size(); ++i) {
    const OptionInfo& info = infos.at(options[i]);
    advice += (i == 0 ? " " : i == 1 ? " (or " : ", or ") + info.flag() + " VALUE";
    model_option = model_option || info.kind == OptionKind::Model;
  }
  if (options.size() > 1) advice += ")";
  if (model_option) advice += "; a model option must keep the value the weights were trained with (model.safetensors has it)";
  return advice;
}

// The options of `e` that took the file's values, in e's order.
std::vector<std::string> taken_from_file(const OptionError& e, const ResumedValues& values) {
  std::vector<std::string> taken;
  for (const std::string& option : e.options())
    if (values.taken.count(option)) taken.push_back(option);
  return taken;
}
}  // namespace

void read_run_options(TrainConfig& config, const SafetensorsFile& file) {
  naming_file(file, [&] { merge_saved(config, file.metadata, {}, false); });
}

ResumedOptions resume_options(TrainConfig& config, const SafetensorsFile& file) {
  ResumedOptions resumed{file.path, file.metadata, given_options(config), config.given.has_value(), {}};
  nn::add_older_files_options(resumed.saved, KeyStyle::Dashed);  // as merge_saved reads it
  naming_file(file, [&] {
    try {
      resumed.values = merge_saved(config, file.metadata, resumed.given, resumed.typed);
    } catch (const OptionError& e) {  // a saved value not given again that is none of its option's
      throw OptionError(e.options(), e.what() + replace_advice(config, e.options()));
    }
  });
  return resumed;
}

void check_resumed_options(const TrainConfig& config, const ResumedOptions& resumed) {
  std::vector<std::pair<std::string, std::string>> conflicts = resumed.values.conflicts;
  if (!conflicts.empty() && resumed.typed) {
    // The run as saved, but for what the command line may change anyway (Settings, Local options): a saved value
    // its checks refuse is one the user may replace.
    TrainConfig as_saved = config;
    std::set<std::string> given = resumed.given;
    for (const auto& [option, line] : conflicts) given.erase(option);
    merge_saved(as_saved, resumed.saved, given, true);
    try {
      as_saved.check();
    } catch (const OptionError& e) {
      std::erase_if(conflicts, [&](const auto& conflict) {
        return std::find(e.options().begin(), e.options().end(), conflict.first) != e.options().end();
      });
    }
  }
  std::string lines;
  for (const auto& [option, line] : conflicts) lines += "\n  " + line;
  AG_CHECK(lines.empty(), "train --resume: '" << config.run.out << "' holds a run with other options (only Settings "
                                                 "such as --max-iters, --data, --log-interval, and --out, --device, "
                                                 "--threads may change; leave the others out to keep the run's):"
                                              << lines);
  try {
    config.check();
  } catch (const OptionError& e) {
    const std::vector<std::string> taken = taken_from_file(e, resumed.values);
    if (taken.empty()) throw;  // about values given on this command line
    throw OptionError(e.options(), "checkpoint '" + resumed.path + "': the run was saved with " +
                                       saved_values_of(e, resumed.values.taken, resumed.saved, KeyStyle::Dashed) +
                                       ", which its checks refuse: " + e.what() + replace_advice(config, taken));
  }
}

}  // namespace ag::char_lm
