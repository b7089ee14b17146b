#include "nn/gpt.h"

#include <algorithm>
#include <cmath>
#include <set>
#include <sstream>
#include <string>

#include "core/context_parallel.h"
#include "core/dispatch.h"
#include "dist/communicator.h"
#include "nn/linear_attention.h"
#include "nn/lstm.h"
#include "nn/s4.h"
#include "nn/ssd.h"

namespace ag::nn {

Block::Block(std::shared_ptr<Mixer> mixer, const MLP::Config& mlp, Generator* gen, StateMixer state_mixer)
    : ln1_(register_module("ln1", std::make_shared<LayerNorm>(mlp.C))),
      attn_(register_module("attn", std::move(mixer))),
      ln2_(register_module("ln2", std::make_shared<LayerNorm>(mlp.C))),
      mlp_(state_mixer == StateMixer::Mlp ? register_module("mlp", std::make_shared<MLP>(mlp, gen)) : nullptr) {}

// Y = X + O and LN2(Y) in one pass (add_layer_norm); Y goes on as the residual stream.
// Each sub-layer's output is observed (Module::observe) under its module's name; ln2's is LN2(X + O).
// Without an MLP the state mixer is the identity: Y + LN2(Y), as Zoology's block computes
// with torch.nn.Identity in the MLP's place (its next block adds the normed stream back).
Tensor Block::forward(const Tensor& x) {
  const Tensor o = observe("attn", attn_->forward(observe("ln1", ln1_->forward(x))));
  const auto [y, normed] = ln2_->forward_residual(x, o);
  const Tensor z = observe("ln2", normed);
  return observe("", y + (mlp_ ? observe("mlp", mlp_->forward(z)) : z));
}

Tensor Block::forward_cached(const Tensor& x, LayerKVCache& cache) {
  const Tensor o = observe("attn", attn_->forward_cached(observe("ln1", ln1_->forward(x)), cache));
  const auto [y, normed] = ln2_->forward_residual(x, o);
  const Tensor z = observe("ln2", normed);
  return observe("", y + (mlp_ ? observe("mlp", mlp_->forward(z)) : z));
}

// Each rule names the options it relates (OptionError), so that a caller that read some of them from a checkpoint
// can say so.
void GPTConfig::check() const {
  check_option_ranges(*this);
  AG_CHECK_OPTIONS(n_embd % n_head == 0, "--n-embd " << n_embd << " is not a multiple of --n-head " << n_head
                                                     << " (each head gets C / H dims)",
                   "n_embd", "n_head");
  AG_CHECK_OPTIONS(n_head % kv_heads() == 0, "--n-head " << n_head << " is not a multiple of --n-kv-head " << n_kv_head
                                                         << " (each kv head serves n_head / n_kv_head query heads)",
                   "n_kv_head", "n_head");
  head_gates();  // throws on a malformed head_mask
  try {
    check_sparse_pattern(attention_pattern(*this, 0), "--attn-window, --attn-dilation, --attn-global, --attn-random-blocks");
  } catch (const Error& e) {
    throw OptionError({"attn_window", "attn_dilation", "attn_global", "attn_random_blocks"}, e.what());
  }
  // Another function's option given a value of its own: accepting it would claim a part (a
  // sparse pattern, a faster implementation, a feature map) that the model never has.
  const GPTConfig default_config;
  std::vector<std::string> defaults;
  for_each_option(default_config, [&](const auto& value, const OptionInfo&) { defaults.push_back(option_to_string(value)); });
  size_t i = 0;
  for_each_option(*this, [&](const auto& value, const OptionInfo& info) {
    const std::string& default_value = defaults[i++];
    if (!info.part || info.part == std::string_view(name_of(attention))) return;
    AG_CHECK_OPTIONS(option_to_string(value) == default_value,
                     info.flag() << " " << option_to_string(value) << " is an option of " << info.part
                                 << " attention; a model with --attention " << name_of(attention)
                                 << " takes none of its options: leave " << info.flag() << " out",
                     info.name, "attention");
  });
  AG_CHECK_OPTIONS(attention_function_traits(attention).has_scores || position != PositionEncoding::Alibi,
                   "position alibi (--position) biases softmax attention's scores; --attention " << name_of(attention)
                                                                                                << " has none: use "
                                                                                                << (attention < kFirstOwnMixer ? "rope" : "learned") << " or none",
                   "position", "attention");
  AG_CHECK_OPTIONS(attention < kFirstOwnMixer || position != PositionEncoding::Rope,
                   "position rope (--position) rotates queries and keys; --attention " << name_of(attention)
                                                                                        << " has none: use learned or none",
                   "position", "attention");
  if (attention == AttentionFunction::S4) {
    AG_CHECK_OPTIONS(s4_state % 2 == 0, "--s4-state " << s4_state << " is odd: S4D's state is N/2 complex modes, N even",
                     "s4_state");
    AG_CHECK_OPTIONS(s4_dt_min > 0, "--s4-dt-min " << s4_dt_min << " must be > 0 (log Δ is drawn from [log min, log max])",
                     "s4_dt_min");
    AG_CHECK_OPTIONS(s4_dt_min <= s4_dt_max, "--s4-dt-min " << s4_dt_min << " is above --s4-dt-max " << s4_dt_max
                                                            << ": the range of Δ is [min, max]",
                     "s4_dt_min", "s4_dt_max");
  }
  AG_CHECK_OPTIONS(position != PositionEncoding::Rope || (n_embd / n_head) % 2 == 0,
                   "position rope (--position) rotates pairs of dims: head size n_embd / n_head = " << n_embd / n_head << " is odd",
                   "position", "n_embd", "n_head");
  AG_CHECK_OPTIONS(rope_base > 0, "rope_base (--rope-base) must be > 0, got " << rope_base, "rope_base");
}

bool GPTConfig::applies(std::string_view option) const {
  // An attention function's options apply to its models alone (the table's part column)...
  const auto of_this_function = [this](std::string_view name) {
    bool shared_or_own = true;
    for_each_option(*this, [&](const auto&, const OptionInfo& info) {
      if (info.name == name) shared_or_own = !info.part || info.part == std::string_view(name_of(attention));
    });
    return shared_or_own;
  };
  if (!of_this_function(option)) return false;
  // ... and some only with the options that switch their part on, as the model's constructor reads them.
  const bool favor = of_this_function("feature_map") && feature_map == FeatureMap::Favor;
  const bool sparse = of_this_function("attn_window") && attn_window > 0;
  if (option == "attn_dilation" || option == "attn_global" || option == "attn_random_blocks") return sparse;
  if (option == "attn_seed") return (sparse && attn_random_blocks > 0) || favor;
  if (option == "n_features") return favor;
  if (option == "rope_base") return position == PositionEncoding::Rope;
  if (option == "alibi_slopes") return position == PositionEncoding::Alibi;
  return true;
}

namespace {
SsdOptions ssd_options(const GPTConfig& config) { return {.conv = config.ssd_conv, .gate = config.ssd_gate}; }
}  // namespace

std::shared_ptr<Mixer> make_mixer(const GPTConfig& config, int64_t layer, Generator* gen) {
  const AttentionConfig shared{.C = config.n_embd, .H = config.n_head, .H_kv = config.kv_heads(), .causal = true,
                               .dropout = config.dropout, .position = config.position, .rope_base = config.rope_base,
                               .alibi_slopes = config.alibi_slopes};
  switch (config.attention) {
    case AttentionFunction::Softmax:
      return std::make_shared<MultiHeadSelfAttention>(
          shared, MultiHeadSelfAttention::Options{.impl = config.attn_impl, .pattern = attention_pattern(config, layer)}, gen);
    case AttentionFunction::Linear:
      return std::make_shared<LinearSelfAttention>(
          shared,
          LinearSelfAttention::Options{.feature_map = config.feature_map, .n_features = config.n_features,
                                       .seed = static_cast<uint64_t>(config.attn_seed),
                                       .stream = static_cast<uint64_t>(layer)},  // each layer its own FAVOR+ features
          gen);
    case AttentionFunction::Ssd:
      return std::make_shared<SsdSelfAttention>(shared, ssd_options(config), gen);
    case AttentionFunction::Lstm:  // not an attention function: a mixer with its own op (nn/lstm.h)
      return std::make_shared<LstmMixer>(LstmMixer::Config{.C = config.n_embd, .dropout = config.dropout}, gen);
    case AttentionFunction::S4:  // not an attention function: a long convolution with its own op (nn/s4.h)
      return std::make_shared<S4Mixer>(S4Mixer::Config{.C = config.n_embd, .N = config.s4_state, .dt_min = config.s4_dt_min,
                                                       .dt_max = config.s4_dt_max, .dropout = config.dropout},
                                       gen);
  }
  throw Error("make_mixer: attention function " + std::to_string(static_cast<int>(config.attention)) + " has no mixer");
}

SparsePattern attention_pattern(const GPTConfig& config, int64_t layer) {
  return {.window = config.attn_window, .dilation = config.attn_dilation, .global = config.attn_global,
          .random_blocks = config.attn_random_blocks, .seed = static_cast<uint64_t>(config.attn_seed), .layer = layer};
}

std::vector<std::vector<double>> GPTConfig::head_gates() const {
  std::vector<std::vector<double>> gates(n_layer, std::vector<double>(n_head, 1.0));
  if (head_mask.empty()) return gates;
  const std::string shape = std::to_string(n_layer) + " groups of " + std::to_string(n_head) + " 0s and 1s split by '/'";
  AG_CHECK_OPTIONS(static_cast<int64_t>(head_mask.size()) == n_layer * (n_head + 1) - 1,
                   "head_mask '" << head_mask << "' is not " << shape, "head_mask");
  for (int64_t layer = 0; layer < n_layer; ++layer) {
    for (int64_t h = 0; h < n_head; ++h) {
      const char c = head_mask[layer * (n_head + 1) + h];
      AG_CHECK_OPTIONS(c == '0' || c == '1', "head_mask '" << head_mask << "' is not " << shape, "head_mask");
      gates[layer][h] = c == '1' ? 1.0 : 0.0;
    }
    AG_CHECK_OPTIONS(layer + 1 == n_layer || head_mask[layer * (n_head + 1) + n_head] == '/',
                     "head_mask '" << head_mask << "' is not " << shape, "head_mask");
  }
  return gates;
}

std::string describe(const GPTConfig& c) {
  std::ostringstream line;
  line << c.n_layer << " layers, " << c.n_head << " heads of " << c.n_embd / c.n_head << " (" << c.kv_heads()
       << " kv heads), width " << c.n_embd << ", context " << c.block_size << ", vocab " << c.vocab_size << "; ";
  line << option_to_string(c.attention) << " attention (";
  if (c.applies("attn_impl")) line << option_to_string(c.attn_impl);
  if (c.applies("feature_map")) line << option_to_string(c.feature_map);
  if (c.applies("n_features")) line << ", " << c.n_features << " features, seed " << c.attn_seed;
  if (c.applies("ssd_conv"))
    line << (c.ssd_conv > 0 ? "convolution of " + std::to_string(c.ssd_conv) : std::string("no convolution"))
         << (c.ssd_gate ? ", gated" : ", ungated");
  if (c.applies("s4_state"))
    line << "state " << c.s4_state << " per channel, Δ from [" << option_to_string(c.s4_dt_min) << ", "
         << option_to_string(c.s4_dt_max) << "]";
  line << "), causal";
  if (c.applies("attn_window")) {
    line << " over ";
    if (c.attn_window == 0) line << "all earlier keys";
    else {
      line << "a window of " << c.attn_window << " keys";
      if (c.attn_dilation > 1) line << " (dilation " << c.attn_dilation << ")";
      if (c.attn_global > 0) line << ", " << c.attn_global << " global";
      if (c.attn_random_blocks > 0) line << ", " << c.attn_random_blocks << " random blocks (seed " << c.attn_seed << ")";
    }
  }
  if (!c.head_mask.empty()) line << ", heads " << c.head_mask;
  switch (c.position) {
    case PositionEncoding::Learned: line << "; learned absolute positions"; break;
    case PositionEncoding::Rope: line << "; rotary positions (RoPE, base " << option_to_string(c.rope_base) << ")"; break;
    case PositionEncoding::Alibi:
      line << "; ALiBi positions (distance-biased scores";
      if ((c.n_head & (c.n_head - 1)) != 0) line << ", " << option_to_string(c.alibi_slopes) << " slopes";  // the rules differ
      line << ")";
      break;
    case PositionEncoding::None: line << "; no positions (the causal mask alone)"; break;
  }
  if (c.state_mixer == StateMixer::Identity) line << "; no MLP (the state mixer is the identity)";
  else line << "; GELU " << option_to_string(c.gelu);
  return line.str();
}

void add_older_files_options(Metadata& metadata, KeyStyle style) {
  metadata.try_emplace(style == KeyStyle::Snake ? "alibi_slopes" : "alibi-slopes", option_to_string(AlibiSlopes::Geometric));
  // Builds before issue 46 took another function's options (a softmax model's --feature-map favor or
  // --ssd-conv 2) and ignored them; they never shaped the model, so a file that holds them loads with
  // their defaults, which check() now asks of them. The file's own function's options are read as saved.
  const GPTConfig defaults;
  const auto attention = metadata.find("attention");  // one word: the same key in both styles
  const std::string function = attention == metadata.end() ? name_of(defaults.attention) : attention->second;
  GPTConfig::for_each_option(defaults, [&](const auto& value, const OptionInfo& info) {
    if (!info.part || info.part == function) return;
    const auto found = metadata.find(option_key(info, style));
    if (found != metadata.end()) found->second = option_to_string(value);
  });
}

void write_model_options(const GPTConfig& config, Metadata& metadata, std::initializer_list<OptionKind> kinds,
                         KeyStyle style) {
  write_options(config, metadata, kinds, style);
  const auto in_every_file = [](std::string_view part) {
    return std::find(std::begin(kFunctionsInEveryFile), std::end(kFunctionsInEveryFile), part) != std::end(kFunctionsInEveryFile);
  };
  const GPTConfig defaults;
  std::vector<std::string> default_values;
  GPTConfig::for_each_option(defaults, [&](const auto& value, const OptionInfo&) { default_values.push_back(option_to_string(value)); });
  size_t at = 0;
  GPTConfig::for_each_option(config, [&](const auto& value, const OptionInfo& info) {
    const std::string& default_value = default_values[at++];
    if (info.part && !in_every_file(info.part) && info.part != std::string_view(name_of(config.attention)))
      metadata.erase(option_key(info, style));
    const bool newer = std::find_if(std::begin(kOptionsWrittenWhenSet), std::end(kOptionsWrittenWhenSet),
                                    [&](const char* name) { return info.name == std::string_view(name); }) !=
                       std::end(kOptionsWrittenWhenSet);
    if (newer && option_to_string(value) == default_value) metadata.erase(option_key(info, style));
  });
}

std::string head_mask_text(const std::vector<std::vector<double>>& gates) {
  std::string text;
  bool all_on = true;
  for (const std::vector<double>& layer : gates) {
    if (!text.empty()) text += '/';
    for (const double g : layer) {
      AG_CHECK(g == 0.0 || g == 1.0, "head_mask: gate " << g << " is neither 0 nor 1");
      text += g == 1.0 ? '1' : '0';
      all_on = all_on && g == 1.0;
    }
  }
  return all_on ? "" : text;
}

GPT::GPT(const GPTConfig& config, Generator& gen) : config_(config) {
  config.check();
  const int64_t C = config.n_embd;
  tok_emb_ = register_module("tok_emb", std::make_shared<Embedding>(config.vocab_size, C, &gen));
  if (config.position == PositionEncoding::Learned)
    pos_emb_ = register_module("pos_emb", std::make_shared<Embedding>(config.block_size, C, &gen));
  dropout_ = register_module("dropout", std::make_shared<Dropout>(config.dropout));
  for (int64_t i = 0; i < config.n_layer; ++i)
    blocks_.push_back(register_module(
        "blocks." + std::to_string(i),
        std::make_shared<Block>(make_mixer(config, i, &gen), MLP::Config{.C = C, .gelu = config.gelu, .dropout = config.dropout},
                                &gen, config.state_mixer)));
  ln_f_ = register_module("ln_f", std::make_shared<LayerNorm>(C));
  init_weights(gen);
  set_head_mask(config.head_mask);
}

void GPT::set_head_mask(const std::string& head_mask) {
  GPTConfig config = config_;
  config.head_mask = head_mask;
  const std::vector<std::vector<double>> gates = config.head_gates();
  config_ = config;
  for (int64_t i = 0; i < config_.n_layer; ++i)  // constant gates: a pruned model's heads stay off
    blocks_[i]->attn().set_head_gates(head_mask.empty() ? Tensor() : Tensor::from_vector(gates[i], {config_.n_head}));
}

// By name, as nanoGPT's _init_weights, drawing in named_parameters() order.
// Each of the N blocks adds two terms to the residual stream (attn.w_o and
// mlp.proj write into it), so those weights are scaled by 1/√(2N) to keep the
// stream's variance from growing with depth. LayerNorms keep their 1 and 0.
void GPT::init_weights(Generator& gen) {
  const double residual_std = 0.02 / std::sqrt(2.0 * static_cast<double>(config_.n_layer));
  std::set<std::string> own_init;  // the mixers' parameters whose initialisation is part of their function
  for (int64_t i = 0; i < config_.n_layer; ++i)
    for (const NamedTensor& p : blocks_[i]->attn().named_parameters())
      if (blocks_[i]->attn().keeps_own_init(p.name)) own_init.insert("blocks." + std::to_string(i) + ".attn." + p.name);
  std::vector<NamedTensor> values = named_parameters();
  for (NamedTensor& p : values) {
    const std::string path = p.name.substr(0, p.name.rfind('.'));  // "blocks.0.attn.w_o"
    const std::string module = path.substr(path.rfind('.') + 1);   // "w_o" (npos + 1 = 0)
    if (module.starts_with("ln")) continue;                         // ln1, ln2, ln_f
    if (own_init.contains(p.name)) continue;  // ssd's decays, steps and convolution
    const bool residual = p.name.ends_with("attn.w_o.weight") || p.name.ends_with("mlp.proj.weight");
    if (p.name.ends_with(".bias"))
      p.tensor = Tensor::zeros(p.tensor.shape());
    else
      p.tensor = Tensor::randn(p.tensor.shape(), DType::Float32, &gen, 0.0, residual ? residual_std : 0.02);
  }
  load_state(values);
}

Tensor GPT::forward(const Tensor& idx) { return forward_embedded(checked_token_embeddings(idx)); }

Tensor GPT::checked_token_embeddings(const Tensor& idx) {
  AG_CHECK(idx.dim() == 2 && idx.dtype() == DType::Int64,
           "GPT: idx " << describe(idx) << " is not int64 [B, T]");
  return tok_emb_->forward(idx);
}

Tensor GPT::forward_embedded(const Tensor& E) { return head(blocks_output(E)); }

Tensor GPT::blocks_output(const Tensor& E) {
  AG_CHECK(E.dim() == 3 && E.size(2) == config_.n_embd,
           "GPT: token embeddings " << describe(E) << " are not [B, T, C = " << config_.n_embd << "]");
  const int64_t T = E.size(1) * (context_ ? context_->size() : 1);  // the whole sequence's, under context parallelism
  AG_CHECK(T >= 1 && (T <= config_.block_size || !config_.positions_end_at_block_size()),
           "GPT: sequence length T = " << T << " is outside [1, block_size = " << config_.block_size
                                       << "] (learned positions end there)");
  AG_CHECK(!documents_.defined() || (documents_.size(0) == E.size(0) && documents_.size(1) == E.size(1)),
           "GPT: document ids " << describe(documents_) << " are not [B, T] of the input's " << describe(E));
  Tensor x = embed(observe("tok_emb", E), 0);
  for (const std::shared_ptr<Block>& block : blocks_) x = block->forward(x);
  return x;
}

Tensor GPT::embed(const Tensor& E, int64_t start) {
  if (!pos_emb_) return dropout_->forward(E);  // rope, alibi, none: positions enter attention
  if (documents_.defined() && start == 0)  // packed documents: each at positions 0, 1, … of its own
    return observe("pos_emb", dropout_->forward(E + pos_emb_->forward(document_positions_)));  // [B, T, C] + [B, T, C]
  if (context_) {  // this process's zigzag chunks (start is 0: generation is not context-parallel)
    const int64_t T_local = E.size(1);
    if (!context_positions_.defined() || context_positions_.numel() != T_local || context_positions_.device() != E.device()) {
      const ZigzagSplit split(T_local * context_->size(), context_->size(), context_->rank());
      std::vector<int64_t> positions(static_cast<size_t>(T_local));
      for (int64_t i = 0; i < T_local; ++i) positions[static_cast<size_t>(i)] = split.position(i);
      context_positions_ = Tensor::from_indices(positions, {T_local}).to(E.device());
    }
    return observe("pos_emb", dropout_->forward(E + pos_emb_->forward(context_positions_)));
  }
  // Positions 0..block_size−1, uploaded once per device: a fresh upload each forward would make the host wait for the device.
  if (!positions_.defined() || positions_.device() != E.device())
    positions_ = Tensor::arange(config_.block_size, DType::Int64, E.device());
  return embed_at(E, positions_.view(start, {E.size(1)}));
}

Tensor GPT::embed_at(const Tensor& E, const Tensor& positions) {
  if (!pos_emb_) return dropout_->forward(E);
  return observe("pos_emb", dropout_->forward(E + pos_emb_->forward(positions)));  // [B, T, C] + [T, C]
}

Tensor GPT::head(const Tensor& x) {
  Shape logits_shape = x.shape();
  logits_shape.back() = config_.vocab_size;
  // The head is tied: logits = h · W_embᵀ with W_emb = tok_emb.weight [V, C]. One
  // parameter, so its gradient sums the lookup's and the head's contributions.
  const Tensor h = observe("ln_f", ln_f_->forward(x));
  return observe("logits", matmul(h.reshape({-1, config_.n_embd}), transpose(tok_emb_->weight(), 0, 1)).reshape(logits_shape));
}

Tensor GPT::forward_cached(const Tensor& idx, KVCache& cache) {
  AG_CHECK(!context_, "GPT: generation with a KV cache is not context-parallel (set_context_parallel(nullptr) first)");
  AG_CHECK(idx.dim() == 2 && idx.dtype() == DType::Int64 && idx.size(0) == cache.batch(),
           "GPT: idx " << describe(idx) << " is not int64 [" << cache.batch() << ", T] (the cache's batch)");
  AG_CHECK(cache.num_layers() == config_.n_layer, "GPT: a cache for " << cache.num_layers() << " layers, the model has "
                                                                       << config_.n_layer);
  const int64_t start = cache.length(), T_new = idx.size(1);
  AG_CHECK(T_new >= 1 && (start + T_new <= config_.block_size || !config_.positions_end_at_block_size()),
           "GPT: positions " << start << " … " << start + T_new - 1 << " reach past block_size = "
                             << config_.block_size << " (learned positions end there)");
  Tensor x = embed(observe("tok_emb", tok_emb_->forward(idx)), start);  // each token's embedding at its true position
  for (int64_t i = 0; i < config_.n_layer; ++i) x = blocks_[i]->forward_cached(x, cache.layer(i));  // each layer's cache advances
  return head(x);
}

// The nodes' rows join the cache as any new positions do; what differs is where each sits
// (start + its depth, for the position embedding) and what it sees (the tree mask, MaskMods::parents
// over every row, the cached ones a shared prefix: tree_prefix = start).
Tensor GPT::forward_tree(const Tensor& idx, std::span<const int64_t> parents, KVCache& cache) {
  AG_CHECK(!context_, "GPT: a token tree is not context-parallel (set_context_parallel(nullptr) first)");
  AG_CHECK(config_.attention == AttentionFunction::Softmax,
           "GPT: a token tree needs softmax attention (its tree mask), not " << name_of(config_.attention));
  AG_CHECK(config_.position == PositionEncoding::Learned || config_.position == PositionEncoding::None,
           "GPT: a token tree needs learned or no positions: under " << name_of(config_.position)
               << " a key's position is its row in the cache, which a tree's nodes do not share with their depth");
  AG_CHECK(!documents_.defined(), "GPT: a token tree after packed documents: set_documents(Tensor()) first");
  const int64_t N = static_cast<int64_t>(parents.size()), start = cache.length();
  AG_CHECK(idx.dim() == 2 && idx.dtype() == DType::Int64 && idx.size(0) == cache.batch() && idx.size(1) == N && N >= 1,
           "GPT: token tree idx " << describe(idx) << " is not int64 [" << cache.batch() << ", " << N
                                  << "] (the cache's batch, one token per node)");
  std::vector<int64_t> depth(static_cast<size_t>(N)), positions(static_cast<size_t>(N)),
      rows(static_cast<size_t>(start + N), -1);
  for (int64_t n = 0; n < N; ++n) {
    const int64_t parent = parents[static_cast<size_t>(n)];
    AG_CHECK(parent >= -1 && parent < n, "GPT: token tree node " << n << " has parent " << parent
                                                                  << ": a parent must be an earlier node, or -1 (the prefix)");
    depth[static_cast<size_t>(n)] = parent < 0 ? 0 : depth[static_cast<size_t>(parent)] + 1;
    positions[static_cast<size_t>(n)] = start + depth[static_cast<size_t>(n)];
    rows[static_cast<size_t>(start + n)] = parent < 0 ? -1 : start + parent;
  }
  const int64_t deepest = start + *std::max_element(depth.begin(), depth.end());
  AG_CHECK(deepest < config_.block_size || !config_.positions_end_at_block_size(),
           "GPT: the token tree's deepest node sits at position " << deepest << ", past block_size = "
                                                                   << config_.block_size << " (learned positions end there)");
  const Tensor tree = Tensor::from_indices(rows, {start + N}).to(idx.device());
  // The masks hold for this forward only, also when it throws.
  struct Untree {
    std::vector<std::shared_ptr<Block>>& blocks;
    ~Untree() {
      for (const std::shared_ptr<Block>& block : blocks) block->attn_as<MultiHeadSelfAttention>().set_tree(Tensor(), 0);
    }
  } untree{blocks_};
  for (const std::shared_ptr<Block>& block : blocks_) block->attn_as<MultiHeadSelfAttention>().set_tree(tree, start);
  const Tensor pos = Tensor::from_indices(positions, {N}).to(idx.device());
  Tensor x = embed_at(observe("tok_emb", tok_emb_->forward(idx)), pos);
  for (int64_t i = 0; i < config_.n_layer; ++i) x = blocks_[i]->forward_cached(x, cache.layer(i));
  return head(x);
}

KVCache GPT::make_kv_cache(int64_t B, int64_t capacity) const {
  return KVCache({.layers = config_.n_layer, .batch = B, .capacity = capacity > 0 ? capacity : config_.block_size});
}

// Every layer's pattern differs from the first's only in its random draws, which a rolling cache has none of.
bool GPT::kv_cache_rolls() const {
  if (config_.positions_end_at_block_size()) return false;  // no position past block_size to roll to
  return blocks_.front()->attn().cache_rolls();
}

int64_t GPT::rolling_kv_cache_capacity(int64_t T_new) const {
  return blocks_.front()->attn().rolling_cache_capacity(T_new);
}

Tensor GPT::loss(const Tensor& idx, const Tensor& targets, Reduction reduction, int64_t ignore_index,
                 std::span<const int64_t> targets_on_host) {
  AG_CHECK(targets.shape() == idx.shape(),
           "GPT::loss: targets " << describe(targets) << " and idx " << describe(idx) << " differ in shape");
  AG_CHECK(targets_on_host.empty() || static_cast<int64_t>(targets_on_host.size()) == targets.numel(),
           "GPT::loss: " << targets_on_host.size() << " targets read on the host for targets " << describe(targets));
  const Tensor x = blocks_output(checked_token_embeddings(idx)).reshape({-1, config_.n_embd});  // [BT, C]
  const Tensor y = targets.reshape({-1});
  // Positions whose target is ignored skip the head and its softmax, the
  // costliest layer at a large vocabulary: a task scored at a few positions
  // (the lab's recall tasks) pays for those alone. The loss and every gradient
  // are the same, since ignored positions add nothing to either. Only on the
  // CPU, where reading the targets is free: on a device it waits for the device.
  // The targets are read here unless the caller has read them already.
  // On a device, the targets the caller read on the host (a training step's) give the count n of
  // the scored ones; the rows themselves are found on the device (kernel::scored_positions), from
  // the targets already there: nothing goes up, so a captured CUDA graph finds each replay's rows.
  if (y.device() == Device::CPU || !targets_on_host.empty()) {
    const std::vector<int64_t> read = targets_on_host.empty() ? y.to_indices() : std::vector<int64_t>();
    const std::span<const int64_t> all = targets_on_host.empty() ? std::span<const int64_t>(read) : targets_on_host;
    const int64_t n = std::count_if(all.begin(), all.end(), [ignore_index](int64_t t) { return t != ignore_index; });
    if (n > 0 && n < static_cast<int64_t>(all.size())) {
      Tensor rows = Tensor::empty({n}, DType::Int64, y.device()), scored = Tensor::empty({n}, DType::Int64, y.device());
      kernel::scored_positions(y, ignore_index, rows, scored);
      return cross_entropy(head_at(x, rows), scored, ignore_index, reduction);
    }
  }
  return cross_entropy(head(x), y, ignore_index, reduction);
}

Tensor GPT::head_at(const Tensor& x, const Tensor& rows) {
  // embedding() is a row gather: its backward adds each row's gradient back into x's.
  return head(embedding(x, rows));  // [n, V]
}

Tensor GPT::logits_at(const Tensor& idx, const std::vector<int64_t>& rows) {
  const Tensor at = Tensor::from_indices(rows, {static_cast<int64_t>(rows.size())}).to(idx.device());
  return head_at(blocks_output(checked_token_embeddings(idx)).reshape({-1, config_.n_embd}), at);  // [BT, C] -> [n, V]
}

int64_t training_step_flops(const GPTConfig& config, int64_t B, int64_t T) {
  const int64_t C = config.n_embd, BT = B * T;
  const int64_t C_kv = config.kv_heads() * (C / config.n_head);
  // W_Q, W_O [C, C] and W_K, W_V [C, C_kv]; a mixer with its own op (lstm, s4) has none: its row counts all it does
  const int64_t projections =
      config.attention < kFirstOwnMixer ? 2 * 2 * BT * C * C + 2 * 2 * BT * C * C_kv : 0;
  const int64_t H = config.n_head, d_h = C / H;
  const int64_t features = config.feature_map == FeatureMap::Favor ? config.n_features : d_h;
  const int64_t attention = attention_forward_flops(config.attention, config.feature_map, features, B, H, T, d_h);
  const int64_t own = config.attention == AttentionFunction::Ssd  // its w_dt, w_g and convolution
                          ? SsdSelfAttention::own_forward_flops({.C = C, .H = H, .H_kv = config.kv_heads()}, ssd_options(config), BT)
                          : 0;
  const int64_t mlp = config.state_mixer == StateMixer::Mlp ? 2 * 2 * BT * C * 4 * C : 0;
  const int64_t head = 2 * BT * C * config.vocab_size;
  const int64_t forward = config.n_layer * (projections + own + attention + mlp) + head;
  return 3 * forward;
}

void GPT::set_context_parallel(dist::Communicator* group) {
  context_ = group;
  for (const std::shared_ptr<Block>& block : blocks_) block->attn().set_context(group);
}

void GPT::set_documents(const Tensor& ids) {
  AG_CHECK(!ids.defined() || config_.attention == AttentionFunction::Softmax,
           "GPT: packed documents need softmax attention (its document mask), not " << name_of(config_.attention));
  AG_CHECK(!ids.defined() || (ids.dtype() == DType::Int64 && ids.dim() == 2),
           "GPT: document ids " << describe(ids) << " are not int64 [B, T]");
  documents_ = ids;
  document_positions_ = Tensor();
  if (ids.defined()) {  // t − (the first position of t's document)
    const std::vector<double> values = ids.to_vector();
    const int64_t T = ids.size(1);
    std::vector<int64_t> positions(values.size());
    for (size_t e = 0; e < values.size(); ++e)
      positions[e] = e % T != 0 && values[e] == values[e - 1] ? positions[e - 1] + 1 : 0;
    document_positions_ = Tensor::from_indices(positions, ids.shape()).to(ids.device());
  }
  if (config_.attention != AttentionFunction::Softmax) return;  // nothing to clear
  for (const std::shared_ptr<Block>& block : blocks_) block->attn_as<MultiHeadSelfAttention>().set_documents(ids);
}

void GPT::set_adjacency(const Tensor& adjacency) {
  AG_CHECK(!adjacency.defined() || config_.attention == AttentionFunction::Softmax,
           "GPT: a graph's mask needs softmax attention (its adjacency mask), not " << name_of(config_.attention));
  AG_CHECK(!adjacency.defined() || adjacency.dim() == 2 || adjacency.dim() == 3,
           "GPT: adjacency " << describe(adjacency) << " is not [T, T] or [B, T, T]");
  if (config_.attention != AttentionFunction::Softmax) return;  // nothing to clear
  for (const std::shared_ptr<Block>& block : blocks_) block->attn_as<MultiHeadSelfAttention>().set_adjacency(adjacency);
}

void GPT::set_attention_impl(AttentionImpl impl) {
  config_.attn_impl = impl;
  if (config_.attention != AttentionFunction::Softmax) return;  // check() refuses another implementation for them
  for (const std::shared_ptr<Block>& block : blocks_) block->attn_as<MultiHeadSelfAttention>().set_impl(impl);
}

}  // namespace ag::nn
