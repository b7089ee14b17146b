#include "examples/char_lm/checkpoint.h"

#include <nlohmann/json.hpp>

#include "core/options.h"
#include "core/safetensors.h"

namespace ag::char_lm {

namespace {
// A one-element int64 tensor holding a 64-bit unsigned value (its bits).
Tensor u64_tensor(uint64_t v) { return Tensor::from_indices({static_cast<int64_t>(v)}, {1}); }

uint64_t u64_value(const SafetensorsFile& file, const std::string& name) {
  const Tensor& t = file.at(name);
  AG_CHECK(t.dtype() == DType::Int64 && t.numel() == 1,
           "checkpoint '" << file.path << "': '" << name << "' should be one int64, is " << describe(t));
  return static_cast<uint64_t>(t.to_indices()[0]);
}

std::string where(const SafetensorsFile& file) { return "checkpoint '" + file.path + "'"; }

// The model options every checkpoint has recorded since the first; newer ones
// may be absent (then they take their defaults, the function older models computed).
constexpr const char* kRequiredModelKeys[] = {"vocab_size", "block_size", "n_layer", "n_head", "n_embd"};

// The parameters whose shapes the size options decide, checked against the
// file before the model is built: a file cannot make us allocate more than it holds.
void check_sizes_against_tensors(const SafetensorsFile& file, const nn::GPTConfig& c) {
  const auto expect = [&](const std::string& name, const Shape& shape) {
    AG_CHECK(file.contains(name), where(file) << ": has no tensor '" << name << "' (n_layer = " << c.n_layer << ")");
    AG_CHECK(file.at(name).shape() == shape, where(file) << ": '" << name << "' is " << to_string(file.at(name).shape())
                                                          << " but __metadata__ says " << to_string(shape));
  };
  expect("tok_emb.weight", {c.vocab_size, c.n_embd});
  expect("pos_emb.weight", {c.block_size, c.n_embd});
  for (int64_t i = 0; i < c.n_layer; ++i) expect("blocks." + std::to_string(i) + ".mlp.fc.weight", {c.n_embd, 4 * c.n_embd});
}
}  // namespace

std::string model_path(const std::string& dir) { return dir + "/model.safetensors"; }
std::string train_state_path(const std::string& dir) { return dir + "/train_state.safetensors"; }

void save_model(const std::string& path, const nn::GPT& model, const Tokenizer& tokenizer, int64_t iter) {
  Metadata metadata;
  write_options(model.config(), metadata, {OptionKind::Model, OptionKind::Derived}, KeyStyle::Snake);
  // JSON, so every byte of the vocabulary survives as text.
  metadata["chars"] = nlohmann::json(tokenizer.chars()).dump(-1, ' ', false, nlohmann::json::error_handler_t::replace);
  if (iter >= 0) metadata["iter"] = std::to_string(iter);
  std::vector<NamedTensor> tensors;
  for (const NamedTensor& p : model.state()) tensors.push_back({p.name, p.tensor.to(DType::Float32)});
  save_safetensors(path, tensors, metadata);
}

LoadedModel load_model(const std::string& path, DType dtype, const nn::GPTConfig& settings) {
  const SafetensorsFile file = load_safetensors(path);
  nn::GPTConfig config = settings;
  std::set<std::string> used;
  for (const char* key : kRequiredModelKeys)
    AG_CHECK(file.metadata.count(key), where(file) << ": __metadata__ has no '" << key << "'");
  read_options(config, file.metadata, {OptionKind::Model, OptionKind::Derived}, KeyStyle::Snake, where(file), used);
  reject_unknown_keys(file.metadata, used, {"chars", "iter"}, where(file));
  try {
    config.check();
  } catch (const Error& e) {
    throw Error(where(file) + ": " + e.what());
  }
  check_sizes_against_tensors(file, config);

  LoadedModel loaded;
  if (file.metadata.count("chars")) {
    try {
      loaded.tokenizer = Tokenizer(nlohmann::json::parse(file.metadata.at("chars")).get<std::string>());
    } catch (const nlohmann::json::exception& e) {
      throw Error(where(file) + ": __metadata__ 'chars' is not a JSON string: " + e.what());
    }
    AG_CHECK(loaded.tokenizer.vocab_size() == config.vocab_size,
             where(file) << ": " << loaded.tokenizer.vocab_size() << " characters for vocab_size " << config.vocab_size);
  }
  if (file.metadata.count("iter")) {
    loaded.iter = option_from_string<int64_t>(file.metadata.at("iter"), where(file) + ": __metadata__ 'iter'");
    AG_CHECK(loaded.iter >= 0, where(file) << ": __metadata__ 'iter' is negative");
  }
  Generator unused(0);  // the weights come from the file
  loaded.model = std::make_unique<nn::GPT>(config, unused);
  loaded.model->to(dtype);
  std::vector<NamedTensor> weights;
  for (const NamedTensor& t : file.tensors) {
    AG_CHECK(is_floating(t.tensor.dtype()), where(file) << ": parameter '" << t.name << "' has dtype " << t.tensor.dtype());
    weights.push_back({t.name, t.tensor.to(dtype)});
  }
  try {
    loaded.model->load_state(weights);
  } catch (const Error& e) {
    throw Error(where(file) + ": " + e.what());
  }
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
    write_options(table, options, {OptionKind::Model, OptionKind::Run, OptionKind::Setting}, KeyStyle::Dashed);
  });
  save_safetensors(path, tensors, options);
}

TrainState restore_train_state(const SafetensorsFile& file, optim::Optimizer& optimizer) {
  TrainState state;
  state.iter = static_cast<int64_t>(u64_value(file, "iter"));
  state.batch_seed = u64_value(file, "rng.batch.seed");
  state.batch_offset = u64_value(file, "rng.batch.offset");
  state.dropout_seed = u64_value(file, "rng.dropout.seed");
  state.dropout_offset = u64_value(file, "rng.dropout.offset");
  optim::NamedTensors optimizer_state;
  for (const NamedTensor& t : file.tensors)
    if (t.name.rfind("optim.", 0) == 0) optimizer_state.push_back({t.name.substr(6), t.tensor});
  try {
    optimizer.load_state(optimizer_state);
  } catch (const Error& e) {
    throw Error(where(file) + ": " + e.what());
  }
  return state;
}

void resume_options(TrainConfig& config, const SafetensorsFile& file) {
  std::set<std::string> given, used;
  if (config.given) given = *config.given;
  else TrainConfig::for_each_table(config, [&](const auto& table) {
    std::decay_t<decltype(table)>::for_each_option(table, [&](const auto&, const OptionInfo& info) { given.insert(info.name); });
  });
  std::string conflicts;
  TrainConfig::for_each_table(config, [&](auto& table) {
    conflicts += ag::resume_options(table, file.metadata, given, where(file), used);
  });
  reject_unknown_keys(file.metadata, used, {}, where(file));
  AG_CHECK(conflicts.empty(), "train --resume: '" << config.run.out << "' holds a run with other options (only Settings "
                                                     "such as --max-iters, --data, --log-interval, and --out, --device, "
                                                     "--threads may change; leave the others out to keep the run's):"
                                                  << conflicts);
}

}  // namespace ag::char_lm
