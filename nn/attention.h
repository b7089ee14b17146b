// Multi-head causal self-attention, in the users' notation:
//   Q = X W_Q,  K = X W_K,  V = X W_V          X [B, T, C], W_Q, W_O [C, C], W_K, W_V [C, H_kv·d_h]
//   heads: [B, T, C] viewed as [B, T, H, d_h], d_h = C / H (head h owns columns h·d_h … (h+1)·d_h − 1)
//   S = Q Kᵀ / √d_h,  A = softmax(S + M),  Z = A V   (per head; M the causal mask,
//                                                    or a sparse pattern: set_pattern)
//   O = Concat(head_1..head_H) W_O                 Z [B, T, H, d_h] viewed as [B, T, C]
// The residual (Y = X + O) is added by the Block, not here.
//
// Grouped-query attention: K and V have H_kv heads, a divisor of H, and query
// head h reads kv head h / (H / H_kv) (PyTorch's repeat_interleave order);
// H_kv = H is multi-head attention, H_kv = 1 multi-query. The op reads the
// shared head in place; its backward sums the group's dK, dV
// (docs/backprop.md, "Grouped-query attention and the KV cache").
//
// The per-head part is one op, ag::attention (core/ops.h), in the layout BTHD:
// it reads each head's columns of Q, K, V in place and writes Z in the same
// layout, so splitting and merging the heads are views, not copies.
//
// AttentionMixer holds what every attention function shares (the four
// projections, the head gates, the output's dropout, context parallelism and
// the probe); each function is a class of its own that adds its parameters
// and fills its part of the op's spec: MultiHeadSelfAttention (softmax, here),
// LinearSelfAttention (nn/linear_attention.h), SsdSelfAttention (nn/ssd.h).
#pragma once

#include "nn/kv_cache.h"
#include "nn/layers.h"
#include "nn/linear.h"
#include "nn/mixer.h"

namespace ag::nn {

using ag::AttentionImpl;

// What every attention mixer is built from.
struct AttentionConfig {
  int64_t C = 0;     // width of X and O
  int64_t H = 1;     // query heads, a divisor of C (d_h = C / H)
  int64_t H_kv = 0;  // key/value heads, a divisor of H; 0: H (multi-head)
  bool causal = true;
  double dropout = 0.0;  // on the output of w_o (residual dropout, as nanoGPT)
  // rope rotates q and k, alibi biases the scores (AttentionSpec::position);
  // learned and none leave attention as it is.
  PositionEncoding position = PositionEncoding::None;
  double rope_base = kDefaultRopeBase;
  AlibiSlopes alibi_slopes = AlibiSlopes::Reference;
};

class AttentionMixer : public Mixer {
 public:
  Tensor forward(const Tensor& x) override { return mix(x, nullptr); }
  Tensor forward_cached(const Tensor& x, LayerKVCache& cache) override { return mix(x, &cache); }
  void set_context(dist::Communicator* group) override { spec_.context = group; }
  // Head gates (Mixer::set_head_gates): g [H] scales each query head's Z before
  // W_O, in forward and forward_cached, so a head with g_h = 0 adds nothing to
  // O and its columns of W_Q get no gradient, nor W_K's and W_V's when it has
  // its own kv head (H_kv = H; a shared kv head still gets its group's others').
  // A gate that requires grad gets ∂L/∂g_h, the head's importance.
  void set_head_gates(const Tensor& gates) override;
  const Tensor& head_gates() const override { return head_gates_; }

  int64_t heads() const { return H_; }
  int64_t kv_heads() const { return H_kv_; }
  const Linear& w_o() const { return *w_o_; }
  // What every forward passes to ag::attention (but the cache and the tensors made per call).
  const AttentionSpec& spec() const { return spec_; }

 protected:
  // Registers w_q, w_o: Linear(C, C) and w_k, w_v: Linear(C, H_kv·d_h), all with biases, then the dropout.
  AttentionMixer(const AttentionConfig& config, Generator* gen);

  // The function's forward, X [B, T, C] -> O [B, T, C]: forward() without a cache; forward_cached()
  // with one, X holding the positions after the cache's (which join it).
  virtual Tensor mix(const Tensor& x, LayerKVCache* cache) = 0;

  // Q [B, T, H, d_h], K, V [B, T, H_kv, d_h]: views of the projections of X [B, T, C].
  struct Heads {
    Tensor q, k, v;
  };
  Tensor project_q(const Tensor& x) const;  // X W_Q + b_Q [B, T, C] (x checked)
  Tensor project_k(const Tensor& x) const;  // X W_K + b_K [B, T, H_kv·d_h]
  Tensor project_v(const Tensor& x) const;
  Heads split_heads(const Tensor& q, const Tensor& k, const Tensor& v) const;
  // Z = ag::attention(Q, K, V, spec), and, while a probe is set, the record of
  // this forward (weights, Q, K, V) into *record (left empty otherwise).
  Tensor attend(const Heads& heads, const AttentionSpec& spec, MixerRecord* record) const;
  // Hands the record to the probe, if one is set.
  void report(const MixerRecord& record) const;
  // Z [B, T, H, d_h] -> O [B, T, C]: the heads gated, merged, scaled by `gate`
  // [B, T, C] if given (ssd's), projected by W_O, dropped out.
  Tensor output(const Tensor& Z, const Tensor& gate = {});

  int64_t H_, H_kv_, d_h_;
  AttentionSpec spec_;  // the shared options and this function's own; the cache is added per call

 private:
  Tensor head_gates_;  // [H], or undefined
  std::shared_ptr<Linear> w_q_, w_k_, w_v_, w_o_;
  std::shared_ptr<Dropout> dropout_;
};

// Softmax attention's own options.
struct SoftmaxOptions {
  AttentionImpl impl = kDefaultAttentionImpl;  // how it is computed
  // Which earlier keys each query sees (window, dilation, global, random
  // blocks): part of the function the model computes. Default: all of them.
  SparsePattern pattern = {};
};

// Softmax attention: A = softmax(S + M), Z = A V, with its implementation
// (AttentionImpl: every implementation computes the same function, which the
// tests check in the output and every gradient) and its sparse pattern.
class MultiHeadSelfAttention : public AttentionMixer {
 public:
  using Options = SoftmaxOptions;
  explicit MultiHeadSelfAttention(const AttentionConfig& config, const Options& options = {}, Generator* gen = nullptr);

  int64_t state_floats(int64_t positions) const override;
  bool cache_rolls() const override { return attention_cache_rolls(spec_); }
  int64_t rolling_cache_capacity(int64_t T_new) const override;

  void set_impl(AttentionImpl impl) { own().impl = impl; }
  AttentionImpl impl() const { return own().impl; }
  void set_pattern(const SparsePattern& pattern) { own().pattern = pattern; }
  // Packed documents (MaskMods::documents): int64 [B, T] ids, a query seeing its own document's keys
  // only; undefined: none. For the next forwards without a cache.
  void set_documents(const Tensor& ids) { own().masks.documents = ids; }
  // A token tree (MaskMods::parents, tree_prefix): int64 [Tk] parents over every key position, for
  // the next forwards (GPT::forward_tree); undefined: none.
  void set_tree(const Tensor& parents, int64_t tree_prefix) {
    own().masks.parents = parents;
    own().masks.tree_prefix = tree_prefix;
  }
  // A graph over the positions (MaskMods::adjacency): [B, T, T] or [T, T], nonzero where position i
  // sees position j. A graph has no order: while set, it replaces the causal mask (attention both
  // ways along its edges; all ones is the complete graph). Undefined: the mask of before.
  void set_adjacency(const Tensor& adjacency) {
    if (!own().masks.adjacency.defined()) causal_without_graph_ = spec_.causal;
    own().masks.adjacency = adjacency;
    spec_.causal = adjacency.defined() ? false : causal_without_graph_;
  }
  const SparsePattern& pattern() const { return own().pattern; }

 private:
  Tensor mix(const Tensor& x, LayerKVCache* cache) override;
  // Its parameters in the spec (always softmax's: the constructor puts them there).
  SoftmaxAttention& own() { return std::get<SoftmaxAttention>(spec_.function); }
  const SoftmaxAttention& own() const { return std::get<SoftmaxAttention>(spec_.function); }
  bool causal_without_graph_ = true;  // spec_.causal before set_adjacency, restored when it is cleared
};

}  // namespace ag::nn
