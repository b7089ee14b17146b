#include "examples/char_lm/checkpoint.h"

#include "core/safetensors.h"

namespace ag::char_lm {

namespace {
const char* gelu_name(GeluApprox g) { return g == GeluApprox::Erf ? "erf" : "tanh"; }

int64_t metadata_integer(const SafetensorsFile& file, const std::string& key, int64_t min = 1) {
  AG_CHECK(file.metadata.count(key), "checkpoint '" << file.path << "': __metadata__ has no '" << key << "'");
  const std::string& v = file.metadata.at(key);
  size_t used = 0;
  int64_t x = min - 1;
  try {
    x = std::stoll(v, &used);
  } catch (const std::exception&) {
  }
  AG_CHECK(used == v.size() && x >= min,
           "checkpoint '" << file.path << "': __metadata__ '" << key << "' = '" << v << "' is not an integer >= " << min);
  return x;
}

// A one-element int64 tensor holding a 64-bit unsigned value (its bits).
Tensor u64_tensor(uint64_t v) { return Tensor::from_indices({static_cast<int64_t>(v)}, {1}); }

uint64_t u64_value(const SafetensorsFile& file, const std::string& name) {
  const Tensor& t = file.at(name);
  AG_CHECK(t.dtype() == DType::Int64 && t.numel() == 1,
           "checkpoint '" << file.path << "': '" << name << "' should be one int64, is " << describe(t));
  return static_cast<uint64_t>(t.to_indices()[0]);
}
}  // namespace

std::string model_path(const std::string& dir) { return dir + "/model.safetensors"; }
std::string train_state_path(const std::string& dir) { return dir + "/train_state.safetensors"; }

void save_model(const std::string& path, const nn::GPT& model, const Tokenizer& tokenizer, int64_t iter) {
  const nn::GPTConfig& c = model.config();
  Metadata metadata = {{"n_layer", std::to_string(c.n_layer)},
                             {"n_head", std::to_string(c.n_head)},
                             {"n_embd", std::to_string(c.n_embd)},
                             {"block_size", std::to_string(c.block_size)},
                             {"vocab_size", std::to_string(c.vocab_size)},
                             {"gelu", gelu_name(c.gelu)}};
  metadata.merge(tokenizer.to_metadata());
  if (iter >= 0) metadata["iter"] = std::to_string(iter);
  std::vector<NamedTensor> tensors;
  for (const NamedTensor& p : model.state()) tensors.push_back({p.name, p.tensor.to(DType::Float32)});
  save_safetensors(path, tensors, metadata);
}

LoadedModel load_model(const std::string& path, DType dtype, double dropout) {
  const SafetensorsFile file = load_safetensors(path);
  nn::GPTConfig config{};
  config.n_layer = metadata_integer(file, "n_layer");
  config.n_head = metadata_integer(file, "n_head");
  config.n_embd = metadata_integer(file, "n_embd");
  config.block_size = metadata_integer(file, "block_size");
  config.vocab_size = metadata_integer(file, "vocab_size");
  const std::string gelu = file.metadata.count("gelu") ? file.metadata.at("gelu") : "erf";
  AG_CHECK(gelu == "erf" || gelu == "tanh", "checkpoint '" << path << "': gelu '" << gelu << "' is not erf or tanh");
  config.gelu = gelu == "erf" ? GeluApprox::Erf : GeluApprox::Tanh;
  config.dropout = dropout;
  AG_CHECK(config.n_embd % config.n_head == 0,
           "checkpoint '" << path << "': n_embd " << config.n_embd << " is not a multiple of n_head " << config.n_head);

  LoadedModel loaded;
  try {
    loaded.tokenizer = Tokenizer::from_metadata(file.metadata);
  } catch (const Error& e) {
    throw Error("checkpoint '" + path + "': " + e.what());
  }
  AG_CHECK(loaded.tokenizer.vocab_size() == 0 || loaded.tokenizer.vocab_size() == config.vocab_size,
           "checkpoint '" << path << "': " << loaded.tokenizer.vocab_size() << " characters for vocab_size "
                          << config.vocab_size);
  if (file.metadata.count("iter")) loaded.iter = metadata_integer(file, "iter", 0);
  Generator unused(0);  // the weights come from the file
  loaded.model = std::make_unique<nn::GPT>(config, unused);
  loaded.model->to(dtype);
  std::vector<NamedTensor> weights;
  for (const NamedTensor& t : file.tensors) {
    AG_CHECK(is_floating(t.tensor.dtype()),
             "checkpoint '" << path << "': parameter '" << t.name << "' has dtype " << t.tensor.dtype());
    weights.push_back({t.name, t.tensor.to(dtype)});
  }
  try {
    loaded.model->load_state(weights);
  } catch (const Error& e) {
    throw Error("checkpoint '" + path + "': " + e.what());
  }
  return loaded;
}

void save_train_state(const std::string& path, const TrainState& state, const optim::Optimizer& optimizer) {
  std::vector<NamedTensor> tensors = {{"iter", u64_tensor(state.iter)},
                                      {"rng.batch.seed", u64_tensor(state.batch_seed)},
                                      {"rng.batch.offset", u64_tensor(state.batch_offset)},
                                      {"rng.dropout.seed", u64_tensor(state.dropout_seed)},
                                      {"rng.dropout.offset", u64_tensor(state.dropout_offset)}};
  for (const NamedTensor& t : optimizer.state()) tensors.push_back({"optim." + t.name, t.tensor});
  save_safetensors(path, tensors, state.options);
}

TrainState load_train_state(const std::string& path, optim::Optimizer& optimizer) {
  const SafetensorsFile file = load_safetensors(path);
  TrainState state;
  state.iter = static_cast<int64_t>(u64_value(file, "iter"));
  state.batch_seed = u64_value(file, "rng.batch.seed");
  state.batch_offset = u64_value(file, "rng.batch.offset");
  state.dropout_seed = u64_value(file, "rng.dropout.seed");
  state.dropout_offset = u64_value(file, "rng.dropout.offset");
  state.options = file.metadata;
  optim::NamedTensors optimizer_state;
  for (const NamedTensor& t : file.tensors)
    if (t.name.rfind("optim.", 0) == 0) optimizer_state.push_back({t.name.substr(6), t.tensor});
  try {
    optimizer.load_state(optimizer_state);
  } catch (const Error& e) {
    throw Error("checkpoint '" + path + "': " + e.what());
  }
  return state;
}

}  // namespace ag::char_lm
