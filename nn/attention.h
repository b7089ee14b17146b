// Multi-head causal self-attention, in the users' notation:
//   Q = X W_Q,  K = X W_K,  V = X W_V          X [B, T, C], W_Q, W_O [C, C], W_K, W_V [C, H_kv·d_h]
//   heads: [B, T, C] viewed as [B, T, H, d_h], d_h = C / H (head h owns columns h·d_h … (h+1)·d_h − 1)
//   S = Q Kᵀ / √d_h,  A = softmax(S + M),  Z = A V   (per head; M the causal mask,
//                                                    or a sparse pattern: Config::pattern)
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
// layout, so splitting and merging the heads are views, not copies. The
// function it computes (softmax, linear attention with a feature map, or ssd) and,
// for softmax, its implementation (AttentionImpl) are the module's spec; every
// implementation computes the same function, which the tests check in the
// output and every gradient.
//
// ssd (Mamba-2's selective state space; docs/backprop.md, "State-space attention") adds, per layer:
//   u = [X W_Q | X W_K | X W_V],  u' = SiLU(conv(u)) (a causal depthwise convolution of width
//   ssd_conv; 0: u' = u), split back into Q, K, V;  Δ = softplus(X w_dt + b_dt) [B, T, H];
//   Z = the op's ssd with a_log, d_skip [H];  then, with ssd_gate, Concat(heads) ⊙ SiLU(X W_g + b_g)
// before W_O. Decoding, the cache keeps the convolution's last W − 1 inputs beside the state.
#pragma once

#include "nn/layers.h"
#include "nn/kv_cache.h"
#include "nn/linear.h"
#include "nn/module.h"

namespace ag::nn {

using ag::AttentionImpl;

class MultiHeadSelfAttention : public Module {
 public:
  struct Config {
    int64_t C = 0;     // width of X and O
    int64_t H = 1;     // query heads, a divisor of C (d_h = C / H)
    int64_t H_kv = 0;  // key/value heads, a divisor of H; 0: H (multi-head)
    bool causal = true;
    double dropout = 0.0;  // on the output of w_o (residual dropout, as nanoGPT)
    AttentionFunction function = AttentionFunction::Softmax;
    AttentionImpl impl = kDefaultAttentionImpl;  // how softmax attention is computed
    // Which earlier keys each query sees (window, dilation, global, random
    // blocks): part of the function the model computes. Default: all of them.
    SparsePattern pattern = {};
    // Linear attention's feature map. FAVOR+ draws its n_features × d_h
    // features from (seed, stream) at construction, once: not parameters,
    // recomputed from the seed whenever the model is built (the checkpoint holds
    // only the seed).
    FeatureMap feature_map = FeatureMap::Elu1;
    int64_t n_features = 64;
    uint64_t seed = 0, stream = 0;
    // rope rotates q and k, alibi biases the scores (AttentionSpec::position);
    // learned and none leave attention as it is.
    PositionEncoding position = PositionEncoding::None;
    double rope_base = kDefaultRopeBase;
    AlibiSlopes alibi_slopes = AlibiSlopes::Reference;
    // ssd only: the convolution's width W (0: none) and whether a SiLU gate scales the merged heads.
    int64_t ssd_conv = 4;
    bool ssd_gate = true;
  };
  // Submodules w_q, w_o: Linear(C, C); w_k, w_v: Linear(C, H_kv·d_h); all with biases. ssd adds
  // conv (CausalConv1d over C + 2·H_kv·d_h channels, if ssd_conv > 0), w_dt: Linear(C, H), a_log
  // and d_skip [H] and, with ssd_gate, w_g: Linear(C, C); initialised as Mamba: a_log = log U[1, 16],
  // Δ = exp(U[log 1e-3, log 0.1]) with w_dt's bias its inverse softplus, d_skip = 1.
  explicit MultiHeadSelfAttention(const Config& config, Generator* gen = nullptr);
  // Whether `name` (relative to the module: "a_log", "w_dt.bias") is a parameter whose
  // initialisation is part of the function (ssd's decays and steps, its convolution): a model
  // re-initialising its weights leaves these as the module drew them.
  static bool keeps_own_init(std::string_view name);

  // X [B, T, C] -> O [B, T, C]
  Tensor forward(const Tensor& x);
  // Generation with a cache (under NoGradGuard; causal modules only): X [B,
  // T_new, C] holds the positions after the cache's, which join it; their
  // queries attend over every position it then holds. Equals the last T_new
  // rows of forward() on the whole prefix.
  Tensor forward_cached(const Tensor& x, LayerKVCache& cache);

  const Tensor& favor_features() const { return omega_; }  // ω [m, d_h] float64 (favor only)

  // Softmax attention's implementation and pattern (a module of another function has neither:
  // set_impl leaves it as it is, pattern() is the empty pattern, impl() the default).
  void set_impl(AttentionImpl impl) {
    if (auto* softmax = std::get_if<SoftmaxAttention>(&spec_.function)) softmax->impl = impl;
  }
  // Context parallelism (AttentionSpec::context): x holds this process's rows of sequences split over `group`.
  void set_context(dist::Communicator* group) { spec_.context = group; }
  const SparsePattern& pattern() const;
  const AttentionSpec& spec() const { return spec_; }  // what every forward passes to ag::attention (but the cache)
  AttentionImpl impl() const;

  // With keep_attention on, each forward stores A [B, H, T, T] (detached) for
  // attention() to return, so every head's pattern can be inspected. Flash never
  // forms A, so a Flash module computes those forwards with Dense (the same
  // function; only the memory differs); linear attention stores the weights its
  // output implies (Z = A V). Q [B, T, H, d_h] and K, V [B, T, H_kv, d_h] are kept beside it
  // (detached, before any rotation by rope): for the scores' norm and angle parts and the
  // attention × value norms (examples/interp/).
  void set_keep_attention(bool keep) { keep_attention_ = keep; }
  const Tensor& attention() const { return attention_; }
  const Tensor& queries() const { return queries_; }
  const Tensor& keys() const { return keys_; }
  const Tensor& values() const { return values_; }
  const Linear& w_o() const { return *w_o_; }
  // ssd, with keep_attention: each position's decay a_t = exp(−exp(a_log)·Δ_t) [B, T, H] (detached):
  // how much of its state a head keeps per step (undefined for the other functions).
  const Tensor& decays() const { return decays_; }

  // Head gates (Michel et al. 2019): g [H] scales each query head's Z before
  // W_O, in forward and forward_cached, so a head with g_h = 0 adds nothing to O
  // and its columns of W_Q get no gradient, nor W_K's and W_V's when it has its
  // own kv head (H_kv = H; a shared kv head still gets its group's others').
  // Undefined (the default): every head on, and no multiply. A gate that
  // requires grad gets ∂L/∂g_h, the head's importance.
  void set_head_gates(const Tensor& gates);
  const Tensor& head_gates() const { return head_gates_; }

 private:
  // X [B, T, C] -> Q [B, T, H, d_h], K, V [B, T, H_kv, d_h], views of the projections;
  // for ssd also Δ [B, T, H] and the gate SiLU(X W_g + b_g) [B, T, C] (if any).
  struct Heads {
    Tensor q, k, v, dt = {}, gate = {};
  };
  Heads project(const Tensor& x, LayerKVCache* cache);
  Tensor attend(const Heads& heads, LayerKVCache* cache);
  Tensor output(const Tensor& Z, const Tensor& gate);

  int64_t H_, H_kv_;
  AttentionSpec spec_;  // the function and its options; the cache and ω are added per call
  bool keep_attention_ = false;
  Tensor attention_, queries_, keys_, values_, decays_;
  Tensor head_gates_;  // [H], or undefined
  std::shared_ptr<Linear> w_q_, w_k_, w_v_, w_o_;
  std::shared_ptr<CausalConv1d> conv_;   // ssd with ssd_conv > 0
  std::shared_ptr<Linear> w_dt_, w_g_;   // ssd; w_g_ with ssd_gate
  Tensor a_log_, d_skip_;                // ssd
  Tensor omega_, omega_here_;  // favor's ω: float64 on the CPU, and converted as the input (cached)
  std::shared_ptr<Dropout> dropout_;
};

}  // namespace ag::nn
