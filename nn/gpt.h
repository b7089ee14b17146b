// A GPT: token and position embeddings, N pre-LN blocks, a final LayerNorm and
// an output head tied to the token embedding (nanoGPT's model, with W stored
// [in, out]).
//
//   x = tok_emb[idx] + pos_emb[0..T)                  [B, T, C]
//       (position learned; rope, alibi and none have no pos_emb: x = tok_emb[idx],
//       and positions enter each attention layer instead)
//   each block:  x = x + attn(ln1(x));  x = x + mlp(ln2(x))
//   logits = ln_f(x) · tok_embᵀ                       [B, T, V]
//
// A forward observes (Module::set_activation_hook) its activations in order,
// each under the name of the module that computed it: tok_emb (the token
// embeddings), pos_emb (x, when positions are learned), then per block
// blocks.i.ln1, blocks.i.attn (O), blocks.i.ln2 (LN2(x + O)), blocks.i.mlp and
// blocks.i (the block's output), then ln_f and logits (the tied head).
#pragma once
#include <span>
#include <string_view>

#include "core/options.h"
#include "nn/gpt_options.h"
#include "nn/attention.h"
#include "nn/mixer.h"
#include "nn/layers.h"
#include "nn/module.h"

namespace ag::nn {

// What a block adds after its mixer (Zoology's "state mixer"): the MLP, or the
// identity, so that the block adds LN2(Y) itself (Zoology's figure-2 models:
// torch.nn.Identity in the MLP's place, after the same LayerNorm).
enum class StateMixer {
  Mlp,       // Y + mlp(ln2(Y))
  Identity,  // Y + ln2(Y): no MLP
};
}  // namespace ag::nn
template <> struct ag::EnumNames<ag::nn::StateMixer> {
  static constexpr std::pair<ag::nn::StateMixer, const char*> values[] = {{ag::nn::StateMixer::Mlp, "mlp"},
                                                                          {ag::nn::StateMixer::Identity, "identity"}};
};
namespace ag::nn {

// Pre-LN transformer block: Y = X + O with O = attn(ln1(X)), then Y + mlp(ln2(Y))
// (or Y + ln2(Y) where the state mixer is the identity).
// attn is the block's mixer (nn/mixer.h), registered as "attn" whatever its function.
class Block : public Module {
 public:
  // The mixer (made with the block's C), and the MLP's width C, GELU and dropout (no MLP
  // is made under StateMixer::Identity).
  Block(std::shared_ptr<Mixer> mixer, const MLP::Config& mlp, Generator* gen = nullptr,
        StateMixer state_mixer = StateMixer::Mlp);
  // x [B, T, C] -> [B, T, C]
  Tensor forward(const Tensor& x);
  // The same for the positions after the cache's, attending through it (Mixer::forward_cached).
  Tensor forward_cached(const Tensor& x, LayerKVCache& cache);

  Mixer& attn() { return *attn_; }
  // The mixer as the class of its function (MultiHeadSelfAttention, LinearSelfAttention,
  // SsdSelfAttention, or their base AttentionMixer); throws if it is another.
  template <class M> M& attn_as() {
    M* mixer = dynamic_cast<M*>(attn_.get());
    AG_CHECK(mixer, "Block: its mixer is not the class asked for");
    return *mixer;
  }

 private:
  std::shared_ptr<LayerNorm> ln1_;
  std::shared_ptr<Mixer> attn_;
  std::shared_ptr<LayerNorm> ln2_;
  std::shared_ptr<MLP> mlp_;  // null under StateMixer::Identity
};

// The model's options, from the table in nn/gpt_options.h.
struct GPTConfig {
  AG_DECLARE_OPTIONS(AG_GPT_OPTIONS)
  // Throws unless the options fit together (ranges, C a multiple of H, H a multiple of H_kv, head_mask's shape).
  void check() const;
  // H_kv: n_kv_head, where 0 (the default, and what a checkpoint without the key gets) means n_head.
  int64_t kv_heads() const { return n_kv_head == 0 ? n_head : n_kv_head; }
  // Learned positions end at block_size; the others take sequences of any length.
  bool positions_end_at_block_size() const { return position == PositionEncoding::Learned; }
  // head_mask as gates: [n_layer][n_head] of 0 and 1 (all 1 when head_mask is empty).
  std::vector<std::vector<double>> head_gates() const;
  // Whether the function this model computes depends on `option` (an option's
  // name): false for the options of a part the model does not use (the feature
  // map of a softmax model, a dense model's dilation), so that what describes
  // the model leaves them out.
  bool applies(std::string_view option) const;
};
// Fills in the model options that a file saved before they existed lacks, where
// the function such a file's model computed is not the option's default: absent
// alibi_slopes is geometric (attograd's slopes until then). Every reader of saved
// model options (a model's __metadata__, KeyStyle::Snake; a training state's,
// Dashed) calls it first, so that no saved model changes its function silently.
// It also resets the options of another function than the file's own (which
// older builds accepted and ignored) to their defaults, so such a file loads.
void add_older_files_options(Metadata& metadata, KeyStyle style);
// Writes the model options of `config` that its files hold (write_options' Model and Derived
// kinds, or Model alone) into `metadata` in `style`: all of them, but that the options of a
// function newer than the files' keys (not in kFunctionsInEveryFile: s4) are written only for its
// own models, so that every other model's files hold the keys they held before it, and an option
// added since (kOptionsWrittenWhenSet: state_mixer) only where it differs from its default. Read back,
// an absent key is its default, which check() demands of another function's option anyway.
void write_model_options(const GPTConfig& config, Metadata& metadata, std::initializer_list<OptionKind> kinds,
                         KeyStyle style);

// The head_mask text of gates of 0 and 1 ("1111/1011"; empty if every gate is 1).
std::string head_mask_text(const std::vector<std::vector<double>>& gates);

// One line saying what the model computes, from the options that apply (applies()), e.g.
// "4 layers, 4 heads of 32 (4 kv heads), width 128, context 64, vocab 65; softmax
// attention (dense), causal over all earlier keys; learned absolute positions; GELU erf".
std::string describe(const GPTConfig& config);

// Layer `layer`'s mixer, from the attention options: the class of config.attention with its options.
std::shared_ptr<Mixer> make_mixer(const GPTConfig& config, int64_t layer, Generator* gen);

// Layer `layer`'s sparse attention pattern, from the attn_* options (the random
// blocks are drawn per layer and head).
SparsePattern attention_pattern(const GPTConfig& config, int64_t layer);

// The floating-point operations of one training step (forward and backward) on
// a batch of B sequences of length T: 2·M·N·K for every matrix product, which is
// all but ~1 % of the work (layer norms, softmax, GELU and the optimizer are
// O(B·T·C) each and left out). Per block, with C = n_embd:
//   forward: W_Q, W_O  2 · 2·BT·C·C;  W_K, W_V  2 · 2·BT·C·C_kv  (C_kv = H_kv·d_h);
//            S = QKᵀ and Z = AV  2 · 2·B·T·T·C
//            (every head, all T×T entries: the causal mask skips no arithmetic);
//            linear attention instead, per head with r features: the state
//            Σ φ(k_j)[v_j, 1]ᵀ and its readout φ(q_i)ᵀ·state  2 · 2·B·T·r·(d_h + 1),
//            and FAVOR+'s projections of q and k on its r = m features  2 · 2·B·T·r·d_h;
//            mlp.fc and mlp.proj  2 · 2·BT·C·4C
//   plus the tied head  2·BT·C·V.
// Backward is twice the forward: each product C = AB gives dA = dC·Bᵀ and
// dB = Aᵀ·dC, and every operand here needs its gradient.
int64_t training_step_flops(const GPTConfig& config, int64_t B, int64_t T);

class GPT : public Module {
 public:
  // Initialised from `gen` as GPT-2: weights of Linear layers and embeddings
  // ~ N(0, 0.02), the residual projections (attn.w_o, mlp.proj) ~ N(0, 0.02/√(2N)),
  // biases 0, LayerNorm weight 1 and bias 0.
  GPT(const GPTConfig& config, Generator& gen);

  // idx int64 [B, T] -> logits [B, T, V]; T <= block_size under learned positions
  // (rope, alibi and none run at any T: what length extrapolation measures)
  Tensor forward(const Tensor& idx);
  // The same from the token embeddings E = tok_emb[idx] [B, T, C] (positions are
  // added here): forward(idx) = forward_embedded(token_embeddings(idx)). What
  // integrated gradients differentiates with respect to.
  Tensor forward_embedded(const Tensor& E);
  Tensor token_embeddings(const Tensor& idx) const { return tok_emb_->forward(idx); }
  // Generation (under NoGradGuard): idx int64 [B, T_new] holds positions
  // cache.length() … cache.length() + T_new − 1 (at most block_size in all
  // under learned positions; else up to the cache's capacity, or on and on for a
  // cache that rolls) -> logits [B, T_new, V], equal to the last T_new rows of
  // forward() on the whole prefix; the cache then holds those positions too. A
  // prefill is one call with the prompt, a decode step one call with T_new = 1.
  Tensor forward_cached(const Tensor& idx, KVCache& cache);
  // An empty cache for B sequences of up to `capacity` positions (0: block_size), in the parameters'
  // dtype and device (a linear-attention model's: each layer's recurrent state, constant in size).
  KVCache make_kv_cache(int64_t B, int64_t capacity = 0) const;
  // A token tree (issue 50, docs/attention.md "Token trees"): idx int64 [B, N] holds N candidate
  // tokens after the cache's positions, parents[n] node n's parent among them (< n), or −1 for a
  // child of the cache's last position. Node n sits at position start + depth(n) (start = the
  // cache's length, depth 0 for a root) and sees the cached positions, its ancestors and itself,
  // so its logits, row n of [B, N, V], equal those of decoding its path alone — every path scored
  // in one cached forward. The nodes join the cache (rows start … start + N − 1): truncate(start)
  // forgets them. Softmax attention with learned or no positions (rope's and alibi's would be the
  // rows', not the depths'), a cache that has not rolled; under NoGradGuard.
  Tensor forward_tree(const Tensor& idx, std::span<const int64_t> parents, KVCache& cache);
  // Whether a full cache of this model rolls (attention_cache_rolls: a window without random
  // blocks, positions that are not learned), and the capacity a rolling cache needs to take
  // T_new positions at a time.
  bool kv_cache_rolls() const;
  int64_t rolling_kv_cache_capacity(int64_t T_new) const;
  // idx, targets int64 [B, T] -> cross-entropy of the next-token logits, [],
  // averaged or summed over the targets that are not ignore_index.
  // targets_on_host: the targets' values when the caller has read them on the
  // host already (a training step, which counts them; optim::TrainStep), so that
  // the loss does not read them again; empty, it reads them itself.
  Tensor loss(const Tensor& idx, const Tensor& targets, Reduction reduction = Reduction::Mean,
              int64_t ignore_index = -100, std::span<const int64_t> targets_on_host = {});

  // idx int64 [B, T] -> the logits [n, V] at n of its B·T positions (rows: flat indices
  // b·T + t): the head, the costliest layer at a large vocabulary, only where it is read
  // (the lab scoring a recall task's few queried positions).
  Tensor logits_at(const Tensor& idx, const std::vector<int64_t>& rows);

  void set_attention_impl(AttentionImpl impl);
  // Packed documents (issue 50): ids int64 [B, T], equal within each document, each document one
  // run of positions, for the next forwards of [B, T] inputs: every softmax layer shows a query its
  // own document's keys only, and learned positions restart at 0 with each document (RoPE's and
  // ALiBi's scores depend on p − j alone, which is the same within a document either way), so a
  // packed row computes what its documents would alone. Undefined: none. Softmax attention only.
  void set_documents(const Tensor& ids);
  // A graph over the positions (issue 51; the lab's graph tasks): adjacency [B, T, T] or [T, T],
  // nonzero where position i sees position j, for the next forwards of [B, T] inputs: every softmax
  // layer attends along its edges only, both ways (it replaces the causal mask while set), so the
  // model is a message-passing network whose messages are attention; all ones is the complete
  // graph, a bidirectional transformer. Undefined: causal again. Softmax attention only.
  void set_adjacency(const Tensor& adjacency);
  // Context parallelism (optim::ProcessGrid): forward and loss then take this
  // process's rows of sequences split over `group` (its zigzag chunks,
  // core/context_parallel.h), each at its true position, and every attention
  // layer runs its ring over the group, a collective. nullptr: whole sequences.
  void set_context_parallel(dist::Communicator* group);
  // Switches heads off (config().head_mask, saved with the model); "" turns every head on.
  void set_head_mask(const std::string& head_mask);
  const GPTConfig& config() const { return config_; }
  Block& block(int64_t i) { return *blocks_.at(i); }

 private:
  void init_weights(Generator& gen);
  // x [B, T, C] from the token embeddings E [B, T, C] at positions start … start + T − 1.
  Tensor embed(const Tensor& E, int64_t start);
  // x [B, T, C] from E [B, T, C] at the given positions int64 [T] (learned positions; else E as it is).
  Tensor embed_at(const Tensor& E, const Tensor& positions);
  // idx checked to be int64 [B, T], then its token embeddings E [B, T, C].
  Tensor checked_token_embeddings(const Tensor& idx);
  // The last block's output x [B, T, C] from the token embeddings E.
  Tensor blocks_output(const Tensor& E);
  // logits [..., V] from the last block's output x [..., C].
  Tensor head(const Tensor& x);
  // The head at n of the B·T positions only: rows, int64 [n] flat indices b·T + t on x's device -> logits [n, V].
  Tensor head_at(const Tensor& x, const Tensor& rows);

  GPTConfig config_;
  Tensor positions_;  // int64 [block_size]: 0, 1, ..., on the device of the last input (learned positions)
  dist::Communicator* context_ = nullptr;  // set_context_parallel
  Tensor context_positions_;  // int64 [T / P]: this process's positions of the split sequences (learned positions)
  Tensor documents_, document_positions_;  // set_documents: the ids [B, T], and each position within its document
  std::shared_ptr<Embedding> tok_emb_, pos_emb_;  // pos_emb_ only under learned positions
  std::shared_ptr<Dropout> dropout_;
  std::vector<std::shared_ptr<Block>> blocks_;
  std::shared_ptr<LayerNorm> ln_f_;
};

}  // namespace ag::nn
