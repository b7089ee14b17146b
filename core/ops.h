// The differentiable ops. Each lives in core/ops/<family>.cpp with its forward
// and its hand-derived backward side by side; docs/backprop.md has the full
// derivations. All ops take and return contiguous tensors; inputs must share a
// dtype and a device (ag::Error otherwise).
#pragma once
#include <optional>
#include <variant>
#include <vector>

#include "core/attention_math.h"
#include "core/linear_attention_math.h"
#include "core/ssd_math.h"
#include "core/tensor.h"

namespace ag::dist {
class Communicator;  // dist/communicator.h: AttentionSpec::context
}

namespace ag {

// --- elementwise (core/ops/elementwise.cpp) --------------------------------------
// Binary ops broadcast numpy-style; their backward sums over broadcast dims.
Tensor add(const Tensor& a, const Tensor& b);
Tensor sub(const Tensor& a, const Tensor& b);
Tensor mul(const Tensor& a, const Tensor& b);
Tensor div(const Tensor& a, const Tensor& b);
Tensor neg(const Tensor& x);
Tensor add(const Tensor& x, double s);  // x + s
Tensor mul(const Tensor& x, double s);  // x * s
Tensor pow(const Tensor& x, double exponent);
Tensor exp(const Tensor& x);
Tensor log(const Tensor& x);
Tensor tanh(const Tensor& x);
Tensor relu(const Tensor& x);
Tensor silu(const Tensor& x);      // x·σ(x), σ the logistic sigmoid (SiLU, "swish")
Tensor softplus(const Tensor& x);  // log(1 + eˣ), computed without overflow; its derivative is σ(x)
Tensor leaky_relu(const Tensor& x, double slope = 0.01);  // x if x > 0 else slope·x (GAT's scores: slope 0.2)
Tensor elu(const Tensor& x);                              // x if x > 0 else eˣ − 1 (α = 1: GAT's hidden layer)
enum class GeluApprox { Erf, Tanh };  // exact x*Phi(x), or GPT-2's tanh approximation
template <> struct EnumNames<GeluApprox> {
  static constexpr std::pair<GeluApprox, const char*> values[] = {{GeluApprox::Erf, "erf"}, {GeluApprox::Tanh, "tanh"}};
};
Tensor gelu(const Tensor& x, GeluApprox approx = GeluApprox::Erf);
// gelu(x + bias) in one pass, bias [C] over the rows of x [..., C] (the MLP's fc
// bias and activation); its backward is one pass too. Equals gelu(add(x, bias), approx).
Tensor bias_gelu(const Tensor& x, const Tensor& bias, GeluApprox approx = GeluApprox::Erf);

inline Tensor operator+(const Tensor& a, const Tensor& b) { return add(a, b); }
inline Tensor operator-(const Tensor& a, const Tensor& b) { return sub(a, b); }
inline Tensor operator*(const Tensor& a, const Tensor& b) { return mul(a, b); }
inline Tensor operator/(const Tensor& a, const Tensor& b) { return div(a, b); }
inline Tensor operator-(const Tensor& x) { return neg(x); }
inline Tensor operator+(const Tensor& x, double s) { return add(x, s); }
inline Tensor operator+(double s, const Tensor& x) { return add(x, s); }
inline Tensor operator-(const Tensor& x, double s) { return add(x, -s); }
inline Tensor operator-(double s, const Tensor& x) { return add(neg(x), s); }
inline Tensor operator*(const Tensor& x, double s) { return mul(x, s); }
inline Tensor operator*(double s, const Tensor& x) { return mul(x, s); }
inline Tensor operator/(const Tensor& x, double s) { return mul(x, 1.0 / s); }

// --- reductions (core/ops/reduce.cpp) ------------------------------------------------
Tensor sum(const Tensor& x);  // all elements -> shape []
Tensor sum(const Tensor& x, int64_t dim, bool keepdim = false);
Tensor mean(const Tensor& x);
Tensor mean(const Tensor& x, int64_t dim, bool keepdim = false);
Tensor max(const Tensor& x, int64_t dim, bool keepdim = false);  // values; gradient to the argmax
Tensor cumsum(const Tensor& x, int64_t dim);  // y_j = Σ_{j' ≤ j} x_j' along dim; same shape
Tensor reverse_cumsum(const Tensor& x, int64_t dim);  // y_j = Σ_{j' ≥ j} x_j' along dim; same shape
// Sums x down to `shape` (the adjoint of broadcasting `shape` up to x.shape()).
// Every broadcasting op's backward uses it.
Tensor reduce_to_shape(const Tensor& x, const Shape& shape);
// Broadcasts x up to `shape` (a copy); its adjoint is reduce_to_shape.
Tensor expand(const Tensor& x, const Shape& shape);

// --- shape (core/ops/shape.cpp); all copy, see core/tensor.h ---------------------------
Tensor transpose(const Tensor& x, int64_t dim0, int64_t dim1);
Tensor permute(const Tensor& x, const std::vector<int64_t>& order);
Tensor slice(const Tensor& x, int64_t dim, int64_t start, int64_t end);  // [start, end)
Tensor concat(const std::vector<Tensor>& xs, int64_t dim);
std::vector<Tensor> split(const Tensor& x, const std::vector<int64_t>& sizes, int64_t dim);

// --- products (core/ops/matmul.cpp) -------------------------------------------------------
// [..., M, K] x [..., K, N] -> [..., M, N]; leading batch dims broadcast. Both
// operands have at least 2 dims.
Tensor matmul(const Tensor& a, const Tensor& b);
// A Linear layer's x W + b: x [..., in], weight [in, out], bias [out] or
// undefined (no bias) -> [..., out]. The bias is folded into the GEMM. Equals
// add(matmul(x, weight), bias).
Tensor linear(const Tensor& x, const Tensor& weight, const Tensor& bias);

// A transformer block's MLP, X [..., C] -> [..., C']: gelu(X W_fc + b_fc) W_proj + b_proj,
// w_fc [C, F], b_fc [F], w_proj [F, C'], b_proj [C'] (core/ops/mlp.cpp). Equals
// linear(bias_gelu(matmul(x, w_fc), b_fc, approx), w_proj, b_proj), bit for bit on the
// CPU; on CUDA the bias and GELU ride in the GEMMs' epilogues (cuBLASLt).
Tensor mlp(const Tensor& x, const Tensor& w_fc, const Tensor& b_fc, const Tensor& w_proj, const Tensor& b_proj,
           GeluApprox approx = GeluApprox::Erf);

// --- softmax family (core/ops/softmax.cpp), over the last dim -------------------------------
Tensor softmax(const Tensor& x);
Tensor log_softmax(const Tensor& x);
// -log softmax(logits)[target] over the rows whose target is not ignore_index
// (the scored rows), averaged (Mean: NaN when every target is ignored, as
// PyTorch) or summed (Sum: what gradient accumulation needs, to divide by the
// whole step's count). logits [..., V], targets int64 [...] -> [].
enum class Reduction { Mean, Sum };
Tensor cross_entropy(const Tensor& logits, const Tensor& targets, int64_t ignore_index = -100,
                     Reduction reduction = Reduction::Mean);

// --- layer norm (core/ops/layer_norm.cpp) -------------------------------------------------
// Over the last dim C of x [..., C]; weight and bias [C].
Tensor layer_norm(const Tensor& x, const Tensor& weight, const Tensor& bias, double eps = 1e-5);
// A residual add and the layer norm after it, in one pass: sum = x + residual
// (same shapes) and normed = layer_norm(sum, weight, bias, eps). Both outputs are
// differentiable (the residual stream goes on from sum).
struct AddLayerNorm {
  Tensor sum, normed;
};
AddLayerNorm add_layer_norm(const Tensor& x, const Tensor& residual, const Tensor& weight, const Tensor& bias,
                            double eps = 1e-5);

// --- embedding (core/ops/embedding.cpp) ---------------------------------------------------
// weight [V, C], indices int64 [...] -> [..., C].
Tensor embedding(const Tensor& weight, const Tensor& indices);

// --- convolution (core/ops/conv.cpp) -----------------------------------------------------
// The causal depthwise convolution over time (ssd attention's, before its SiLU): x [B, T, C],
// weight [W, C], bias [C] or undefined -> y [B, T, C],
//   y_{b,t,c} = bias_c + Σ_{s<W} weight[s, c] · x_{b, t−W+1+s, c},   x before t = 0 being 0.
Tensor causal_conv1d(const Tensor& x, const Tensor& weight, const Tensor& bias = {});

// --- S4D, a long convolution by a generated kernel (core/ops/s4.cpp) -----------------------
// S4D (Gu et al. 2022): per channel h of H, N/2 complex modes with a fixed (content-independent)
// state matrix, so the layer is y = K * u + D·u, one causal convolution per channel. The
// parameters are real tensors (complex numbers as their (re, im) pairs; core/s4_math.h):
//   log_dt [H]        Δ = exp(log_dt)
//   log_A_re [H, N/2] Re A = −exp(log_A_re), kept negative by construction
//   A_im [H, N/2]     Im A
//   B, C [H, N/2, 2]  (re, im)
//   D [H]             the skip
struct S4dParameters {
  Tensor log_dt, log_A_re, A_im, B, C, D;
};
// S4D-Lin's initialisation: log Δ uniform in [log dt_min, log dt_max], A_n = −½ + iπn, B_n = 1,
// C_n with re and im N(0, ½), D N(0, 1). Checks N even and ≥ 2, 0 < dt_min ≤ dt_max, naming them.
S4dParameters s4d_init(int64_t H, int64_t N, double dt_min, double dt_max, DType dtype = DType::Float32,
                       Generator* gen = nullptr);
// The kernel K [H, T]: K_ℓ = 2·Re Σ_n C_n B̄_n exp(ℓ Δ A_n), B̄_n = (exp(Δ A_n) − 1)/A_n · B_n (ZOH).
// Differentiable in log_dt, log_A_re, A_im, B, C (p.D is not read).
Tensor s4d_kernel(const S4dParameters& p, int64_t T);
// The causal per-channel convolution u [B, T, H], K [H, T] -> y [B, T, H],
//   y_{b,t,h} = Σ_{j≤t} K_{h,t−j} u_{b,j,h}, by FFT in O(T log T); differentiable in u and K.
Tensor long_conv(const Tensor& u, const Tensor& K);
// The S4D layer: y = long_conv(u, s4d_kernel(p, T)) + D·u, u [B, T, H] -> y [B, T, H].
Tensor s4d(const Tensor& u, const S4dParameters& p);
// The same y by the recurrent form, one position after another, from `state` [B, H, N/2, 2]
// (zeros when undefined; left at the last position's, so a decode continues from it). Not
// differentiable (decoding): the constant-size state is what a cache keeps.
Tensor s4d_recurrent(const Tensor& u, const S4dParameters& p, Tensor& state);

// --- dropout (core/ops/dropout.cpp) -------------------------------------------------------
// Zeroes each element with probability p and scales the rest by 1/(1-p); the
// identity when !training or p == 0. Draws from `gen` (the default if null).
Tensor dropout(const Tensor& x, double p, bool training, Generator* gen = nullptr);

// --- attention (core/ops/attention.cpp, core/ops/linear_attention.cpp, core/ops/ssd.cpp) -----
// The one attention contract: every attention function a model can compute
// goes through attention(q, k, v, spec), with the same layouts, grouped kv
// heads, causal flag, KV-cache decode and inspection. Per batch entry b and
// query head h, over the keys j that query i may see:
//
//   softmax: S = scale · Q Kᵀ,  A = softmax(S + M),  Z = A V
//            M is 0 where query i may see key j and −∞ elsewhere (AttentionMask:
//            causal, sparse patterns); a query that sees no key gets Z = 0 and
//            zero gradients, never NaN. The row log-sum-exp ℓ = log Σ_j exp(S_ij + M_ij)
//            is what the flash backward saves. How it is computed: AttentionImpl.
//   linear:  softmax(QKᵀ)V ≈ φ(Q)(φ(K)ᵀV) with a feature map φ and no scale:
//            z_i = Σ_j (φ(q_i)·φ(k_j)) v_j / (Σ_j φ(q_i)·φ(k_j) + ε); φ(K)ᵀV is
//            r×d whatever T is, so time is O(T·r·d) and the decode state O(r·d).
//   ssd:     Mamba-2's selective state space (state-space duality): causal masked
//            attention without softmax, scale or normaliser, whose mask is a learned,
//            input-dependent decay instead of 0 / −∞:
//              z_i = Σ_{j≤i} exp(Σ_{r=j+1..i} λ_r) (q_i·k_j) Δ_j v_j + D·v_i,  λ_r = −exp(a_log)·Δ_r
//            per query head (Δ = dt, a_log, D = d_skip: SsdAttention, below); a head's decay
//            a_r = exp(λ_r) ∈ (0, 1] says how fast it forgets. Chunked: time O(T·(Q + d)·d),
//            the decode state S = Σ_j (decay) k_j Δ_j v_jᵀ [d, d].
//
// q [B, Hq, Tq, d] and k, v [B, Hkv, Tk, d] (layout BHTD), or q [B, Tq, Hq, d]
// and k, v [B, Tk, Hkv, d] (layout BTHD: a projection X·W_Q [B, T, C] reshaped
// to [B, T, H, d_h], read in place). Hq must be a multiple of Hkv: query head h
// reads kv head h / (Hq / Hkv) without a copy (grouped-query attention; Hkv = 1
// is multi-query). Z comes back in q's layout. Backward: docs/backprop.md,
// "Attention" and "Linear attention".
//
// A new attention function is its parameter type (one more alternative of
// AttentionParams below, holding what only it reads), its case in the one
// std::visit of attention() (core/ops/attention.cpp), its row in
// kAttentionFunctions there (what the rest of the project needs to know of it:
// its traits, its FLOP count), one more AttentionFunction (the name a model
// saves), and the file that computes it: the module, the model, the cache and
// the programs reach it through this contract alone.

// The function a model's attention computes (a model property, saved in its
// checkpoint); AttentionImpl only chooses how softmax attention is computed.
// The functions of q, k, v come first, in AttentionParams' order; after them
// the mixers that are not attention functions and have their own op instead
// (Lstm: lstm() below, nn/lstm.h; S4: s4d() above, nn/s4.h). These have a row in kAttentionFunctions
// (their traits) but no AttentionParams alternative: attention() never
// computes them and function_of() never returns them.
// A checkpoint saves the function by its name (EnumNames): append new ones, never rename.
enum class AttentionFunction { Softmax, Linear, Ssd, Lstm, S4 };
template <> struct EnumNames<AttentionFunction> {
  static constexpr std::pair<AttentionFunction, const char*> values[] = {{AttentionFunction::Softmax, "softmax"},
                                                                         {AttentionFunction::Linear, "linear"},
                                                                         {AttentionFunction::Ssd, "ssd"},
                                                                         {AttentionFunction::Lstm, "lstm"},
                                                                         {AttentionFunction::S4, "s4"}};
};
// The first value that is a mixer of its own, not an attention function of q, k, v.
inline constexpr AttentionFunction kFirstOwnMixer = AttentionFunction::Lstm;

// How softmax attention is computed; every implementation computes the same function.
enum class AttentionImpl {
  Composed,  // from the ops above (matmul, +M, softmax, matmul): the readable reference
  Dense,     // three kernels that form S and A [B, Hq, Tq, Tk] and save A; A can be inspected
  Flash,     // FlashAttention: tiles and the online softmax, saves only ℓ; memory O(T·d)
};
template <> struct EnumNames<AttentionImpl> {
  static constexpr std::pair<AttentionImpl, const char*> values[] = {
      {AttentionImpl::Composed, "composed"}, {AttentionImpl::Dense, "dense"}, {AttentionImpl::Flash, "flash"}};
};
// The implementation used where none is chosen: by the op (SoftmaxAttention), the
// module, the model and char_lm's --attn-impl. Dense is what the default model
// trains with (and what its committed results were made with); flash is the
// one to choose for long T (memory O(T·d) instead of O(T²)).
inline constexpr AttentionImpl kDefaultAttentionImpl = AttentionImpl::Dense;
enum class AttentionLayout {
  BHTD,  // [B, H, T, d]
  BTHD,  // [B, T, H, d]
};

// How a model encodes positions (a model property, its checkpoint's `position`).
// Learned positions are added to X before attention (the model's pos_emb), so
// to the op they are none; rope and alibi happen inside it.
enum class PositionEncoding {
  Learned,  // a table pos_emb [block_size, C] added to the token embeddings
  Rope,     // q and k rotated at their positions (rotary embeddings, core/attention_math.h)
  Alibi,    // the scores biased by −m_h·(i − j) (AttentionMask::alibi_slope); causal softmax attention only
  None,     // nothing: the causal mask alone carries order (NoPE)
};
template <> struct EnumNames<PositionEncoding> {
  static constexpr std::pair<PositionEncoding, const char*> values[] = {{PositionEncoding::Learned, "learned"},
                                                                         {PositionEncoding::Rope, "rope"},
                                                                         {PositionEncoding::Alibi, "alibi"},
                                                                         {PositionEncoding::None, "none"}};
};
template <> struct EnumNames<AlibiSlopes> {
  static constexpr std::pair<AlibiSlopes, const char*> values[] = {{AlibiSlopes::Reference, "reference"},
                                                                    {AlibiSlopes::Geometric, "geometric"}};
};
inline constexpr double kDefaultRopeBase = 10000;

// Positions per chunk of linear attention's and ssd's chunked sums (LinearAttention::chunk, SsdAttention::chunk).
inline constexpr int64_t kDefaultAttentionChunk = 64;

// One attention layer's generation state, carried from one decoded position
// to the next. Softmax attention keeps every position's keys and values; linear
// attention one running sum whose size does not grow with the positions. The
// op allocates what its function needs on the first call, in k's dtype and
// device, and appends each call's positions (attention() with spec.cache).
//
// A softmax cache that is full rolls when its queries see only a window and
// the global keys (a sparse pattern with a window and no random blocks; with
// ALiBi, no global keys either, whose distances would change): it drops the
// oldest window keys, keeping the first `global` rows and the newest ones, so
// its memory stays constant however long generation goes. A cache that
// cannot roll is full at `capacity`.
struct LayerKVCache {
  int64_t capacity = 0;  // positions it may hold (T_max)
  int64_t length = 0;    // positions held (rows 0 … length − 1)
  int64_t rolled = 0;    // positions dropped by rolling: the next position is length + rolled
  Tensor k = {}, v = {};  // softmax: K, V [B, T_max, Hkv, d] (BTHD), rows 0 … length − 1 written
  Tensor state = {};      // linear: Σ_j φ(k_j) [v_j, 1]ᵀ [B, Hkv, r, d + 1] (S and z = Σ_j φ(k_j) side by side);
                          // ssd: S = Σ_j exp(σ) k_j Δ_j v_jᵀ [B, Hq, d, d], decayed to the last position
  Tensor conv = {};       // ssd's module: its convolution's last W − 1 inputs [B, W − 1, C + 2·C_kv]

  int64_t bytes() const;  // what it holds now
};

// Softmax attention's score modifiers (docs/backprop.md, "Score modifiers and their
// adjoints"): functions of each score applied before the mask, with learnable
// parameters whose gradients the op returns like q's, k's and v's. Per batch entry
// b, query head h, query i at key position p = i + q_offset and key j:
//   u_ij = S_ij + rel[h, bucket(j − p)] + idx[h, index(i, j)]   the bias tables (each optional)
//   S'_ij = cap·tanh(custom(u_ij) / cap)                        soft_cap (else S' = custom(u)),
//                                                               custom the user's own (else the identity)
//   A_ij = exp(S'_ij + M_ij) / (exp(sink_h) + Σ_j' exp(S'_ij' + M_ij'))   sinks (else no exp(sink_h))
// M keeps its meaning (−∞ where hidden, ALiBi's bias where seen), after the modifiers.
// Every implementation (composed, dense, flash) computes them, CPU and CUDA; their
// tables' gradients are sums in a fixed order, so two runs give the same bits.
//
// A T5-style relative-position bias (Raffel et al. 2020): table [Hq, num_buckets],
// each (query, key) pair reading the bucket of its relative position j − p
// (relative_position_bucket, core/attention_math.h: exact below num_buckets/2 (per
// direction when bidirectional), logarithmic up to max_distance, the last bucket beyond).
struct RelativePositionBias {
  Tensor table = {};          // [Hq, num_buckets]; undefined: none
  bool bidirectional = true;  // false: keys after the query share bucket 0 (a causal decoder's)
  int64_t max_distance = 128;
};
// A bias table read through a user-given integer matrix (Graphormer's shortest-path bias, edge
// types, any pairwise category): table [Hq, n], index int64 [Tq, Tk] with entries in [0, n). Over an
// edge list (MaskMods::edges) it may be [E] instead, one entry per edge in the list's CSR order (edge
// e = col[e]'s), and a [Tq, Tk] one is read (and checked) at the edges only.
struct IndexedBias {
  Tensor table = {};  // [Hq, n]; undefined: none
  Tensor index = {};  // int64 [Tq, Tk] (or [E] over an edge list), on the table's device
};
struct ScoreMods {
  std::optional<double> soft_cap = std::nullopt;  // cap > 0 (Gemma 2: 50)
  Tensor sinks = {};                              // [Hq]: a learned logit per head in each row's denominator
  RelativePositionBias relative = {};
  IndexedBias indexed = {};
  // The user's own score function value(u, h, q, k) with its derivative (core/attention_math.h),
  // after the tables and before the cap: S' = cap·tanh(value(u)/cap). No learnable parameters; CPU only.
  ScoreFunction custom = {};

  bool any() const {
    return soft_cap || sinks.defined() || relative.table.defined() || indexed.table.defined() || custom.value;
  }
};

// Mask functions of softmax attention: which keys each query may see, beyond (ANDed with)
// causality and the sparse pattern, evaluated once per call on the host into one byte per
// (query, key) (AttentionMask::allowed, core/attention_math.h) that every implementation and
// both devices read, and into the flash loops' block map (empty tiles skipped, full tiles run
// without the byte test), both cached by the mask's contents. Positions as ScoreFunction's:
// query i sits at key position p = i + q_offset; key j at j. Several given: a key must pass all.
// A query left with no visible key gets Z = 0 and no gradient (the op's rule).
//   prefix-LM:  keys j < prefix seen by every query (both ways); after it, j ≤ p. Needs causal = false.
//   documents:  int64 [Tk] or [B, Tk], a document id per key position (packed sequences):
//               p sees j iff doc(j) = doc(p) and j ≤ p.
//   token tree: parents int64 [Tk], parent(n) < n or −1 (a root): p sees j iff j = p, j is an
//               ancestor of p, or j < tree_prefix and j ≤ p (the shared prefix, causal in itself).
//   adjacency:  [Tq, Tk] or [B, Tq, Tk] (a graph per batch entry) of any dtype, nonzero where
//               query i sees key j (graph attention).
//   custom:     the user's mask_mod(b, h, p, j) -> bool, called once per entry per call (not
//               cached); a C++ callable on the host: the CPU only.
//   edges:      a graph's edge list (EdgeList, below): query i sees the keys its edges name. The
//               op then computes over the edges alone, whatever `impl` says (edge_attention below:
//               O(E·d) per head, never O(Tq·Tk)); the only mask: no causal, pattern or other mask
//               function. AttentionInternals::probabilities then holds A per edge, [B, Hq, E].
//               Of the score modifiers only ScoreMods::indexed is taken (S_e += table[h, idx_e],
//               its index [Tq, Tk] read at the edges or [E] per edge, above); the others are refused.
// Decoding (AttentionSpec::cache), the masks see the cache's rows as key positions (Tk = the rows
// held + the new ones), so a cache under them must not roll: a token tree's nodes decoded in one
// call give parents over every row and tree_prefix = the rows cached before them (GPT::forward_tree).
using MaskFunction = std::function<bool(int64_t b, int64_t h, int64_t q, int64_t k)>;
// A graph as a CSR edge list, int64 on any device: query i's keys are col[row_ptr[i]], …,
// col[row_ptr[i + 1] − 1], increasing (each edge once). One graph for every batch entry and head.
struct EdgeList {
  Tensor row_ptr = {};  // [Tq + 1]: row_ptr[0] = 0, non-decreasing, row_ptr[Tq] = E
  Tensor col = {};      // [E]: keys in [0, Tk)
  bool defined() const { return row_ptr.defined() || col.defined(); }
};
struct MaskMods {
  std::optional<int64_t> prefix = std::nullopt;
  Tensor documents = {};
  Tensor parents = {};
  int64_t tree_prefix = 0;
  Tensor adjacency = {};
  MaskFunction custom = {};
  EdgeList edges = {};

  bool any() const {
    return prefix || documents.defined() || parents.defined() || adjacency.defined() || custom || edges.defined();
  }
};

// How softmax attention scores query i against key j (docs/backprop.md §37, "Graph attention").
// A checkpoint would save it by name: append new ones, never rename.
enum class AttentionScore {
  Dot,       // S_ij = scale · q_i·k_j: the transformer's
  Additive,  // S_ij = LeakyReLU_a(α_i + β_j), α_i = Σ_c q_ic, β_j = Σ_c k_jc: GAT's (Veličković et al. 2018)
};
template <> struct EnumNames<AttentionScore> {
  static constexpr std::pair<AttentionScore, const char*> values[] = {{AttentionScore::Dot, "dot"},
                                                                       {AttentionScore::Additive, "additive"}};
};
// GAT's score e_ij = LeakyReLU(a₁ᵀ W h_i + a₂ᵀ W h_j) is Additive with q = (XW) ∘ a₁ and
// k = (XW) ∘ a₂ per head (a₁, a₂ [d_h] broadcast over the rows) and v = XW: the sums over
// the head's d_h columns are a₁ᵀWh_i and a₂ᵀWh_j, and q, k, v keep one shape (the contract's).
// No scale (SoftmaxAttention::scale must be left unset).

// Dropout on the attention coefficients (GAT's, on A itself): Z = Ã V with
//   Ã_ij = A_ij · keep_ij / (1 − p),  keep_ij = [u(seed, offset + ((b·Hq + h)·Tq + i)·Tk + j) ≥ p]
// u the counter-based uniform of core/random.h and (seed, offset) drawn from `generator` (the
// default if null) for B·Hq·Tq·Tk counters, as ag::dropout on A [B, Hq, Tq, Tk] draws them: the
// same seed drops the same entries in every implementation that takes it (composed, dense).
// Off unless training and p > 0 (eval: Z = A V). Backward: dA = dÃ ∘ keep/(1 − p), dV = Ãᵀ dZ.
struct AttentionDropout {
  double p = 0;  // in [0, 1)
  bool training = true;
  Generator* generator = nullptr;

  bool active() const { return training && p > 0; }
};

// Each attention function's parameters: what it alone reads, as one type, so
// that a spec cannot hold another function's (AttentionParams, in
// AttentionFunction's order).
struct SoftmaxAttention {  // A = softmax(scale·QKᵀ + M), Z = A V
  AttentionImpl impl = kDefaultAttentionImpl;  // how it is computed
  // Window, dilation, global tokens and random blocks (core/attention_math.h); needs
  // `causal`. Every implementation reads it through AttentionMask.
  SparsePattern pattern = {};
  std::optional<double> scale = std::nullopt;      // default 1/√d; must be > 0
  std::optional<int64_t> q_offset = std::nullopt;  // query i sits at key position i + q_offset; default Tk − Tq (bottom-right
                                                   // aligned: one new query over a cache of Tk keys sees all of them)
  // The keys and values are the first kv_length rows of k and v along T: a KV
  // cache allocated for more positions than it holds yet, read in place (Tk =
  // kv_length; the rows after it are neither read nor given a gradient).
  // Default: all of them.
  std::optional<int64_t> kv_length = std::nullopt;
  // Applied to S before the mask (ScoreMods, above); not under context parallelism.
  ScoreMods mods = {};
  // Mask functions (MaskMods, above), ANDed with causal and the pattern; not under context parallelism.
  MaskMods masks = {};
  // The score (AttentionScore, above): dot-product, or GAT's additive score with LeakyReLU's
  // slope a = leaky_slope. Additive and dropout: composed, dense (CPU and CUDA) and over an edge
  // list (MaskMods::edges, composed of ops); flash and context parallelism refuse them.
  AttentionScore score = AttentionScore::Dot;
  double leaky_slope = 0.2;
  AttentionDropout dropout = {};  // on A (AttentionDropout, above); off by default
};
struct LinearAttention {  // Z = φ(Q)(φ(K)ᵀV), normalised; as many queries as keys (a cache for decoding)
  FeatureMap feature_map = FeatureMap::Elu1;
  Tensor omega = {};  // favor: the random features ω [m, d] as rows (favor_projection), in q's dtype and device
  int64_t chunk = kDefaultAttentionChunk;  // positions per chunk of the causal sums (any value gives the same result but for rounding)
};
struct SsdAttention {  // causal; its inputs besides q, k, v, differentiable as they are
  Tensor dt = {};      // Δ > 0 per position and query head: [B, T, Hq] (BTHD) or [B, Hq, T] (BHTD)
  Tensor a_log = {};   // [Hq]: λ_r = −exp(a_log_h)·Δ_r, the log of head h's decay at r
  Tensor d_skip = {};  // [Hq]: D_h, the skip D_h·v_i added to each output
  int64_t chunk = kDefaultAttentionChunk;  // as LinearAttention's
};
using AttentionParams = std::variant<SoftmaxAttention, LinearAttention, SsdAttention>;

// What every function shares, and the function with its parameters.
struct AttentionSpec {
  AttentionParams function = SoftmaxAttention{};
  bool causal = false;
  AttentionLayout layout = AttentionLayout::BHTD;
  // rope: q and k rotated at their positions (query i at i + SoftmaxAttention's q_offset, at i
  // for the other functions; key j at j; decoding, at the cache's positions; the cache keeps
  // the rotated keys) with frequencies rope_base^(−2i/d), d even. alibi: causal softmax
  // attention (the other functions have no scores to bias). learned, none: nothing.
  PositionEncoding position = PositionEncoding::None;
  double rope_base = kDefaultRopeBase;  // must be > 0
  AlibiSlopes alibi_slopes = AlibiSlopes::Reference;  // alibi: the slopes' rule when Hq is not a power of two
  // --- decode (every causal function) ---
  // Generation: k and v hold the new positions' keys and values only, and q
  // their queries (Tq = Tk). The op appends them to the cache, then each query
  // attends over every position the cache holds, itself included. Under
  // NoGradGuard only.
  LayerKVCache* cache = nullptr;
  // --- context parallelism (docs/attention.md, "Ring attention") ---
  // The group of processes that share one sequence: q, k and v hold this
  // process's rows of it, the zigzag split of core/context_parallel.h (chunks
  // rank and 2P − 1 − rank of 2P), and Z comes back in the same rows. Softmax:
  // ring attention (core/ops/ring_attention.cpp) passes the key/value blocks
  // round the group with the flash kernels whatever `impl` says; linear and ssd:
  // each chunk's state is gathered over the group (gather_chunks; their files).
  // Every process of the group calls attention() together, as a collective.
  // Null: the whole sequence is here.
  dist::Communicator* context = nullptr;
};

// The function a spec computes (the name a model saves in its checkpoint).
AttentionFunction function_of(const AttentionSpec& spec);

// Whether a full cache rolls under this spec (LayerKVCache), and how many
// positions a rolling cache must hold to take T_new new ones at a time: the
// global keys, the W·δ − 1 positions before a query that its window spans (its W − 1
// earlier keys reach back (W − 1)·δ: δ − 1 rows to spare, docs/backprop.md §27), and the new ones.
bool attention_cache_rolls(const AttentionSpec& spec);
int64_t rolling_cache_capacity(const SparsePattern& pattern, int64_t T_new);

// What the rest of the project needs to know of each attention function, so that
// nothing outside the contract branches on it.
struct AttentionFunctionTraits {
  bool has_scores;         // it has scores for ALiBi to bias (position alibi)
  const char* weights;     // what AttentionInternals::probabilities holds for it
  bool weights_sum_to_one; // each row of those weights is a distribution over the keys (ssd's are signed and unnormalised)
  const char* cache_holds; // what its LayerKVCache holds
};
const AttentionFunctionTraits& attention_function_traits(AttentionFunction function);

// The floating-point operations of one forward over B sequences of T positions,
// per layer with H query heads of width d (r features for linear attention:
// favor's m, elu1's d): 2·M·N·K per matrix product (docs/performance.md counts
// the training step with it).
int64_t attention_forward_flops(AttentionFunction function, FeatureMap map, int64_t features, int64_t B, int64_t H,
                                int64_t T, int64_t d);

// Results of attention() besides Z, detached, for inspection and tests.
struct AttentionInternals {
  // A [B, Hq, Tq, Tk] with Z = A V: softmax's probabilities (composed and dense;
  // flash never forms A), or the weights linear attention's output implies,
  //   A_ij = φ(q_i)·φ(k_j) / (Σ_{j' visible} φ(q_i)·φ(k_j') + ε),
  // or ssd's, A_ij = exp(σ(i, j)) (q_i·k_j) Δ_j for j ≤ i, plus D on the diagonal,
  // formed for inspection only (the T×T matrix linear attention and ssd avoid).
  Tensor probabilities;
  Tensor log_sum_exp;  // ℓ [B, Hq, Tq], float64, +inf on a row that sees no key: softmax's dense and flash
};

// Z, in q's layout. `internals`, if given, receives A and/or ℓ as noted above.
Tensor attention(const Tensor& q, const Tensor& k, const Tensor& v, const AttentionSpec& spec = {},
                 AttentionInternals* internals = nullptr);
// M [Tq, Tk]: 0 where mask.visible(h, i, j) (ALiBi's bias under mask.alibi_heads), −∞
// elsewhere (what composed adds to S), for head h = 0; with heads > 1, M [heads, Tq, Tk],
// one matrix per query head.
Tensor attention_mask(const AttentionMask& mask, int64_t Tq, int64_t Tk, DType dtype = DType::Float32,
                      Device device = Device::CPU, int64_t heads = 1);
// The same with a batch dimension: M [batches, heads, Tq, Tk], batch entry b's matrix from
// mask.at_batch(b) (a mask function's per-entry matrix; AttentionMask::allowed on the host).
Tensor attention_mask(const AttentionMask& mask, int64_t Tq, int64_t Tk, DType dtype, Device device, int64_t heads,
                      int64_t batches);
// The bytes a mask function gives (AttentionMask::allowed) on the host, for inspection and the
// bench: [Bm, Hm, Tq, Tk] (Bm = B or 1, Hm = Hq or 1: `batches`, `heads`), 1 where query i sees key j.
struct MaskBytes {
  std::vector<uint8_t> bytes;
  int64_t batches = 1, heads = 1;
};
MaskBytes evaluate_mask(const MaskMods& masks, int64_t B, int64_t Hq, int64_t Tq, int64_t Tk, int64_t q_offset,
                        const std::string& where);
// MaskMods::documents in their compact form (AttentionMask::segment_start): per key position of
// each row of ids ([Tk], or [B, Tk] one row after another), the first position of its document;
// empty when there are no documents or an id comes back after another's (not one run: the
// documents are then evaluated as bytes).
std::vector<int64_t> document_starts(const MaskMods& masks, int64_t B, int64_t Tq, int64_t Tk, int64_t q_offset,
                                     const std::string& where);
// --- attention over a graph's edges (core/ops/edge_attention.cpp; docs/backprop.md §36) ---
// An EdgeList checked against Tq queries and Tk keys (a clear error naming `where` and the
// first bad entry otherwise) and laid out for the edge kernels on `device`: the CSR, each
// edge's query, and the CSC (the edges by key) that the backward's sums over keys walk,
// in one int64 buffer (EdgeLayout, core/edge_attention_math.h). Edge e is the e-th in
// CSR order; the ops below hold one value per edge and head, [B, Hq, E].
struct EdgeGraph {
  int64_t Tq = 0, Tk = 0, E = 0;
  Tensor packed = {};  // int64 [(Tq + 1) + 3E + (Tk + 1)], on the kernels' device
  // Views of packed: int64 [E] each, edge e's query i and key j.
  Tensor rows() const;
  Tensor cols() const;
};
EdgeGraph edge_graph(const EdgeList& edges, int64_t Tq, int64_t Tk, Device device, const std::string& where = "edges");
// The same mask as a dense adjacency int64 [Tq, Tk] (1 on the edges): MaskMods::adjacency's form.
Tensor edge_adjacency(const EdgeGraph& graph);
// Softmax attention over the edges in three differentiable steps, which attention() with
// MaskMods::edges composes and a model may compose with scores of its own (any S [B, Hq, E]):
//   S_e = scale · q_i · k_j   (edge_scores: q [B, Hq, Tq, d], k [B, Hkv, ≥ Tk, d] in `layout`)
//   A = softmax of S over each query's edges   (edge_softmax; `lse`, if given: float64 [B, Hq, Tq])
//   Z_i = Σ_{e=(i,j)} A_e v_j   (edge_product: Z in q's layout, v as k)
// A query with no edge gets Z = 0, lse = +inf and no gradient.
Tensor edge_scores(const Tensor& q, const Tensor& k, const EdgeGraph& graph, double scale,
                   AttentionLayout layout = AttentionLayout::BHTD);
Tensor edge_softmax(const Tensor& S, const EdgeGraph& graph, Tensor* lse = nullptr);
Tensor edge_product(const Tensor& A, const Tensor& v, const EdgeGraph& graph, AttentionLayout layout = AttentionLayout::BHTD);
// Throws unless the pattern's numbers are in range and fit together (a window
// for global and random keys to add to); `where` names the caller.
void check_sparse_pattern(const SparsePattern& pattern, const std::string& where);
// The causal M [T, T]: 0 on and below the diagonal, −∞ above (position i sees j <= i).
Tensor causal_mask(int64_t T, DType dtype = DType::Float32, Device device = Device::CPU);

// RoPE (core/attention_math.h, RotaryShape): each row of x [B, H, T, d] (BHTD) or
// [B, T, H, d] (BTHD), d even, rotated at its position first_position + t.
// Backward: the rotation by the opposite angles (docs/backprop.md, "RoPE").
Tensor rope(const Tensor& x, AttentionLayout layout, int64_t first_position = 0, double base = kDefaultRopeBase);

// --- context parallelism (core/ops/context_parallel.cpp; the zigzag split of core/context_parallel.h) ---
// own [2, ...]: a value for each of this process's two chunks of a sequence split over `group`
// (halves 0 and 1) -> [2P, ...]: every chunk's value in sequence order, on every process of the
// group (a collective: an all-reduce of 2P slots, each filled by the process that holds its chunk).
// Every process reads every slot, so the backward sums each slot's gradient over the group and
// keeps this process's two. Linear and ssd attention gather their chunks' states with it, ssd's
// convolution the inputs before each chunk.
Tensor gather_chunks(const Tensor& own, dist::Communicator& group);

// Linear attention's feature map φ row by row over the last dim: x [..., d] ->
// [..., r] (r = d for elu1, m for favor). Backward: docs/backprop.md, "Linear attention".
Tensor attention_features(const Tensor& x, FeatureMap map, const Tensor& omega = {});
// FAVOR+'s ω [m, d], float64 on the CPU: blocks of d orthogonal directions
// (Gram-Schmidt of Gaussian rows), each row scaled by the norm of an
// independent Gaussian d-vector, so each row is marginally N(0, I_d). A pure
// function of (seed, stream): stream s draws counters from s·2⁴⁰ on (a layer
// passes its index), so every run and every device gets the same features.
Tensor favor_projection(int64_t m, int64_t d, uint64_t seed, uint64_t stream = 0);

// The LSTM (a mixer of its own, not an attention function: AttentionFunction::Lstm;
// core/ops/lstm.cpp, docs/backprop.md "The LSTM"): X [B, T, C] -> H [B, T, C],
// hidden size C, gates i, f, g, o in PyTorch's order; W_ih, W_hh [C, 4C] (stored
// [in, out] as a Linear's: PyTorch's weight_ih_l0 and weight_hh_l0 transposed),
// b_ih, b_hh [4C]. `state`, if given: the recurrence starts from its (h, c) [B, C]
// each (undefined: zeros), and they are overwritten with (h_{T−1}, c_{T−1}), as
// decoding needs; no gradient flows into or out of the state.
struct LstmState {
  Tensor h = {}, c = {};  // [B, C] each
};
Tensor lstm(const Tensor& x, const Tensor& w_ih, const Tensor& w_hh, const Tensor& b_ih, const Tensor& b_hh,
            LstmState* state = nullptr);

}  // namespace ag
