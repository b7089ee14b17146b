// The GPT's options, one line each (core/options.h explains the columns and
// what is derived from them). Model options are the checkpoint's __metadata__
// keys: a file format that users and other tools read, so never rename one.
//
// The options every model takes come first; then each attention function's
// own, in a list of its own whose lines end in `of`, the function's name
// (OptionInfo::part): GPTConfig::applies and check() read it, so that an
// option of another function than the model's is left out where the model is
// described and refused where it is given.
#pragma once

#define AG_GPT_OPTIONS(X) \
  AG_GPT_SHARED_OPTIONS(X) \
  AG_GPT_SOFTMAX_OPTIONS(X, "softmax") \
  AG_GPT_LINEAR_OPTIONS(X, "linear") \
  AG_GPT_SSD_OPTIONS(X, "ssd") \
  AG_GPT_S4_OPTIONS(X, "s4")

// The functions whose options every model's files hold, whatever its function: those
// that existed when the files' keys were fixed (tests/test_before46.cpp keeps such
// files). A function added since (s4, and any after it) has its options written only
// in its own models' files, so that every other model's files keep the keys they had
// (nn::write_model_options).
namespace ag::nn {
inline constexpr const char* kFunctionsInEveryFile[] = {"softmax", "linear", "ssd"};
// Options added since whose default is the model every file before them holds: written
// only where they differ from it, so that such a model's files keep the keys they had.
inline constexpr const char* kOptionsWrittenWhenSet[] = {"state_mixer"};
}  // namespace ag::nn

//  kind     type               name        default                min  max        help
#define AG_GPT_SHARED_OPTIONS(X) \
  X(Derived, int64_t,           vocab_size, 0,                     1,   1 << 24,   "vocabulary size V (from the text)") \
  X(Model,   int64_t,           block_size, 64,                    1,   1 << 20,   "context length T") \
  X(Model,   int64_t,           n_layer,    4,                     1,   1024,      "transformer blocks N") \
  X(Model,   int64_t,           n_head,     4,                     1,   1024,      "attention heads H") \
  X(Model,   int64_t,           n_kv_head,  0,                     0,   1024,      "key/value heads H_kv, a divisor of H: each serves H / H_kv query heads (1: multi-query; 0: H, multi-head)") \
  X(Model,   int64_t,           n_embd,     128,                   1,   1 << 16,   "embedding width C") \
  X(Model,   GeluApprox,        gelu,       GeluApprox::Erf,       0,   0,         "GELU: erf (exact) or tanh (GPT-2's approximation)") \
  X(Run,     double,            dropout,    0.0,                   0,   0.99,      "dropout probability (training only)") \
  X(Model,   int64_t,           attn_seed,  0,                     0,   int64_t{1} << 62, "seed of the attention's random draws (sparse random blocks, FAVOR+ features)") \
  X(Model,   std::string,       head_mask,  "",                    0,   0,         "heads switched off (char_lm heads --prune): per layer one 0/1 per head, layers split by '/', e.g. 1111/1011; empty: all on") \
  X(Model,   AttentionFunction, attention,  AttentionFunction::Softmax, 0, 0,       "attention function: softmax, linear (a kernel feature map, O(T) time), ssd (Mamba-2's selective state space, O(T) time), lstm (a recurrent network, not attention: nn/lstm.h) or s4 (S4D, a diagonal state space applied as one long convolution, O(T log T) time: nn/s4.h)") \
  X(Model,   PositionEncoding,  position,   PositionEncoding::Learned, 0, 0,        "positions: learned (a table of block_size rows added to X), rope (q, k rotated), alibi (scores biased by distance; softmax only) or none (the causal mask alone)") \
  X(Model,   double,            rope_base,  kDefaultRopeBase,      0,   kNoLimit,  "RoPE's frequency base: f_i = base^(-2i/d_h) (--position rope; > 0)") \
  X(Model,   AlibiSlopes,       alibi_slopes, AlibiSlopes::Reference, 0, 0,       "ALiBi's slopes when n_head is not a power of two: reference (Press et al.'s and BLOOM's) or geometric (2^(-8(h+1)/H), models saved without this key); equal for a power of two (--position alibi)") \
  X(Model,   StateMixer,        state_mixer, StateMixer::Mlp,      0,   0,         "what each block adds after its mixer: mlp (Y + MLP(LN2(Y))) or identity (Y + LN2(Y), no MLP: Zoology's figure-2 models)")

// Softmax attention's: how it is computed and which earlier keys each query sees.
//  kind     type               name        default                min  max        help, function
#define AG_GPT_SOFTMAX_OPTIONS(X, of) \
  X(Setting, nn::AttentionImpl, attn_impl,  kDefaultAttentionImpl, 0, 0,           "attention implementation (same function, other speed)", of) \
  X(Model,   int64_t,           attn_window, 0,                    0,   1 << 20,   "sparse attention: each query sees the last W keys (0: all earlier keys)", of) \
  X(Model,   int64_t,           attn_dilation, 1,                  1,   1 << 20,   "sparse attention: the window takes every δ-th key (needs --attn-window)", of) \
  X(Model,   int64_t,           attn_global, 0,                    0,   1 << 20,   "sparse attention: the first G positions are seen by every query (needs --attn-window)", of) \
  X(Model,   int64_t,           attn_random_blocks, 0,             0,   16,        "sparse attention: each block of 16 queries also sees R random earlier blocks of 16 keys (needs --attn-window)", of)

// Linear attention's: its feature map.
#define AG_GPT_LINEAR_OPTIONS(X, of) \
  X(Model,   FeatureMap,        feature_map, FeatureMap::Elu1,     0,   0,         "linear attention's feature map: elu1 (elu(x) + 1) or favor (FAVOR+ random features)", of) \
  X(Model,   int64_t,           n_features, 64,                    1,   1 << 16,   "FAVOR+ random features m per head (--feature-map favor)", of)

// ssd's: the convolution before it and the gate after it.
#define AG_GPT_SSD_OPTIONS(X, of) \
  X(Model,   int64_t,           ssd_conv,   4,                     0,   1024,      "ssd: width W of the causal depthwise convolution (then SiLU) over [q|k|v] (0: none)", of) \
  X(Model,   bool,              ssd_gate,   true,                  0,   0,         "ssd: the output gated by SiLU(x W_g + b_g) before W_O", of)

// s4's: the state size and the range its step sizes Δ are drawn from (S4D-Lin, nn/s4.h).
#define AG_GPT_S4_OPTIONS(X, of) \
  X(Model,   int64_t,           s4_state,   64,                    2,   1 << 12,   "s4: state size N per channel, N/2 complex modes (even); a decoder keeps N floats per channel", of) \
  X(Model,   double,            s4_dt_min,  1e-3,                  0,   kNoLimit,  "s4: the smallest step size Δ at initialisation (log Δ uniform in [log min, log max]; > 0; long memory: small Δ)", of) \
  X(Model,   double,            s4_dt_max,  1e-1,                  0,   kNoLimit,  "s4: the largest step size Δ at initialisation (>= --s4-dt-min)", of)
