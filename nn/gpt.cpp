#include "nn/gpt.h"

#include <cmath>
#include <string>

namespace ag::nn {

Block::Block(int64_t C, int64_t H, double dropout, GeluApprox gelu, AttentionImpl impl, Generator* gen)
    : ln1_(register_module("ln1", std::make_shared<LayerNorm>(C))),
      attn_(register_module("attn",
                            std::make_shared<MultiHeadSelfAttention>(C, H, true, dropout, impl, gen))),
      ln2_(register_module("ln2", std::make_shared<LayerNorm>(C))),
      mlp_(register_module("mlp", std::make_shared<MLP>(C, gelu, dropout, gen))) {}

// Y = X + O and LN2(Y) in one pass (add_layer_norm); Y goes on as the residual stream.
Tensor Block::forward(const Tensor& x) {
  const auto [y, normed] = ln2_->forward_residual(x, attn_->forward(ln1_->forward(x)));
  return y + mlp_->forward(normed);
}

void GPTConfig::check() const {
  check_option_ranges(*this);
  AG_CHECK(n_embd % n_head == 0, "--n-embd " << n_embd << " is not a multiple of --n-head " << n_head
                                             << " (each head gets C / H dims)");
  check_sparse_pattern(attention_pattern(*this, 0), "--attn-window, --attn-dilation, --attn-global, --attn-random-blocks");
}

SparsePattern attention_pattern(const GPTConfig& config, int64_t layer) {
  return {.window = config.attn_window, .dilation = config.attn_dilation, .global = config.attn_global,
          .random_blocks = config.attn_random_blocks, .seed = static_cast<uint64_t>(config.attn_seed), .layer = layer};
}

GPT::GPT(const GPTConfig& config, Generator& gen) : config_(config) {
  config.check();
  const int64_t C = config.n_embd;
  tok_emb_ = register_module("tok_emb", std::make_shared<Embedding>(config.vocab_size, C, &gen));
  pos_emb_ = register_module("pos_emb", std::make_shared<Embedding>(config.block_size, C, &gen));
  dropout_ = register_module("dropout", std::make_shared<Dropout>(config.dropout));
  for (int64_t i = 0; i < config.n_layer; ++i)
    blocks_.push_back(register_module(
        "blocks." + std::to_string(i),
        std::make_shared<Block>(C, config.n_head, config.dropout, config.gelu, config.attn_impl, &gen)));
  for (int64_t i = 0; i < config.n_layer; ++i) blocks_[i]->attn().set_pattern(attention_pattern(config, i));
  ln_f_ = register_module("ln_f", std::make_shared<LayerNorm>(C));
  init_weights(gen);
}

// By name, as nanoGPT's _init_weights, drawing in named_parameters() order.
// Each of the N blocks adds two terms to the residual stream (attn.w_o and
// mlp.proj write into it), so those weights are scaled by 1/√(2N) to keep the
// stream's variance from growing with depth. LayerNorms keep their 1 and 0.
void GPT::init_weights(Generator& gen) {
  const double residual_std = 0.02 / std::sqrt(2.0 * static_cast<double>(config_.n_layer));
  std::vector<NamedTensor> values = named_parameters();
  for (NamedTensor& p : values) {
    const std::string path = p.name.substr(0, p.name.rfind('.'));  // "blocks.0.attn.w_o"
    const std::string module = path.substr(path.rfind('.') + 1);   // "w_o" (npos + 1 = 0)
    if (module.starts_with("ln")) continue;                         // ln1, ln2, ln_f
    const bool residual = p.name.ends_with("attn.w_o.weight") || p.name.ends_with("mlp.proj.weight");
    if (p.name.ends_with(".bias"))
      p.tensor = Tensor::zeros(p.tensor.shape());
    else
      p.tensor = Tensor::randn(p.tensor.shape(), DType::Float32, &gen, 0.0, residual ? residual_std : 0.02);
  }
  load_state(values);
}

Tensor GPT::forward(const Tensor& idx) {
  AG_CHECK(idx.dim() == 2 && idx.dtype() == DType::Int64,
           "GPT: idx " << describe(idx) << " is not int64 [B, T]");
  const int64_t B = idx.size(0), T = idx.size(1), C = config_.n_embd, V = config_.vocab_size;
  AG_CHECK(T >= 1 && T <= config_.block_size,
           "GPT: sequence length T = " << T << " is outside [1, block_size = " << config_.block_size << "]");
  // Positions 0..T−1, uploaded once per device: a fresh upload each forward would make the host wait for the device.
  if (!positions_.defined() || positions_.device() != idx.device())
    positions_ = Tensor::arange(config_.block_size, DType::Int64, idx.device());
  const Tensor pos = positions_.view(0, {T});
  Tensor x = dropout_->forward(tok_emb_->forward(idx) + pos_emb_->forward(pos));  // [B, T, C] + [T, C]
  for (const std::shared_ptr<Block>& block : blocks_) x = block->forward(x);
  x = ln_f_->forward(x).reshape({B * T, C});
  // The head is tied: logits = h · W_embᵀ with W_emb = tok_emb.weight [V, C]. One
  // parameter, so its gradient sums the lookup's and the head's contributions.
  return matmul(x, transpose(tok_emb_->weight(), 0, 1)).reshape({B, T, V});
}

Tensor GPT::loss(const Tensor& idx, const Tensor& targets, Reduction reduction, int64_t ignore_index) {
  AG_CHECK(targets.shape() == idx.shape(),
           "GPT::loss: targets " << describe(targets) << " and idx " << describe(idx) << " differ in shape");
  const Tensor logits = forward(idx);  // [B, T, V]
  return cross_entropy(logits.reshape({-1, config_.vocab_size}), targets.reshape({-1}), ignore_index, reduction);
}

int64_t training_step_flops(const GPTConfig& config, int64_t B, int64_t T) {
  const int64_t C = config.n_embd, BT = B * T;
  const int64_t projections = 4 * 2 * BT * C * C;
  const int64_t attention = 2 * 2 * B * T * T * C;
  const int64_t mlp = 2 * 2 * BT * C * 4 * C;
  const int64_t head = 2 * BT * C * config.vocab_size;
  const int64_t forward = config.n_layer * (projections + attention + mlp) + head;
  return 3 * forward;
}

void GPT::set_attention_impl(AttentionImpl impl) {
  config_.attn_impl = impl;
  for (const std::shared_ptr<Block>& block : blocks_) block->attn().set_impl(impl);
}

}  // namespace ag::nn
