// A block's token mixer: the sub-layer that moves information between
// positions, X [B, T, C] -> O [B, T, C] (the MLP then works on each position
// alone). A GPT block holds one (Block::mixer()); which one is the model's
// `attention` option. The first three are attention functions behind the
// projections W_Q, W_K, W_V and W_O (nn/attention.h); the LSTM (a recurrent
// network) and S4 (a long convolution) have ops of their own (docs/attention.md
// says how they join the option):
//
//   MultiHeadSelfAttention  softmax attention (nn/attention.h)
//   LinearSelfAttention     linear attention with a kernel feature map (nn/linear_attention.h)
//   SsdSelfAttention        Mamba-2's selective state space (nn/ssd.h)
//   LstmMixer               an LSTM, hidden size C (nn/lstm.h)
//   S4Mixer                 S4D, a diagonal state space per channel as one long convolution (nn/s4.h)
//
// Adding one: README, "How to add a mixer".
#pragma once
#include <cstdint>
#include <functional>
#include <string_view>

#include "core/ops.h"
#include "nn/module.h"

namespace ag::nn {

// What a mixer shows a probe after a forward, detached (examples/interp reads
// it): the weights A [B, H, T, T] with Z = A V (softmax's probabilities, or the
// weights linear attention and ssd imply: AttentionInternals::probabilities),
// Q [B, T, H, d_h] and K, V [B, T, H_kv, d_h] before any rotation by rope, and
// for ssd each position's decay a_t = exp(−exp(a_log)·Δ_t) [B, T, H] (how much
// of its state a head keeps per step; undefined for the others). The LSTM's
// and S4's records are empty: neither forms weights from its input nor has
// q, k, v (S4's weights over positions are its kernel: S4Mixer::kernel).
struct MixerRecord {
  Tensor weights, queries, keys, values, decays;
};
// Looking inside: called once per forward (forward and forward_cached) with
// that forward's record. Forming the weights costs T² per head, so a mixer
// forms them only while a probe is set; a flash module computes those forwards
// with dense (the same function, other memory) to have them.
using MixerProbe = std::function<void(const MixerRecord& record)>;

class Mixer : public Module {
 public:
  // X [B, T, C] -> O [B, T, C]
  virtual Tensor forward(const Tensor& x) = 0;
  // Generation with a cache (under NoGradGuard): X [B, T_new, C] holds the
  // positions after the cache's, which join it. Equals the last T_new rows of
  // forward() on the whole prefix.
  virtual Tensor forward_cached(const Tensor& x, LayerKVCache& cache) = 0;

  // Whether parameter `name` (relative to the mixer: "a_log", "w_dt.bias")
  // keeps the initialisation the mixer gave it when a model re-initialises its
  // weights (GPT-2's N(0, 0.02)): ssd's decays, steps and convolution.
  virtual bool keeps_own_init(std::string_view name) const;

  // Context parallelism: x holds this process's rows of sequences split over
  // `group` (AttentionSpec::context); nullptr: whole sequences. A mixer that
  // reads each sequence whole (the default: the LSTM's and S4's) refuses a group.
  virtual void set_context(dist::Communicator* group);

  // Head gates (Michel et al. 2019): g [H] scales each head's output before it
  // is merged, so a head with g_h = 0 adds nothing; undefined: all on. A mixer
  // without heads (the default) takes only undefined gates.
  virtual void set_head_gates(const Tensor& gates);
  virtual const Tensor& head_gates() const { return no_gates_; }

  // The generation state one sequence holds after `positions` positions, in
  // floats: what the KV cache keeps for this layer (softmax: the keys and
  // values it has not rolled off; linear and ssd: a state of constant size).
  virtual int64_t state_floats(int64_t positions) const = 0;
  // Whether a full cache rolls (attention_cache_rolls), and the positions a
  // rolling cache must hold to take T_new at a time.
  virtual bool cache_rolls() const { return false; }
  virtual int64_t rolling_cache_capacity(int64_t T_new) const { return T_new; }

  // Looking inside (MixerProbe); an empty function removes it.
  void set_probe(MixerProbe probe) { probe_ = std::move(probe); }

 protected:
  // `kind` names the mixer in the messages of the defaults above ("LstmMixer").
  explicit Mixer(const char* kind = "Mixer") : kind_(kind) {}
  const MixerProbe& probe() const { return probe_; }

 private:
  const char* kind_;
  MixerProbe probe_;
  Tensor no_gates_;  // undefined: every head on
};

}  // namespace ag::nn
