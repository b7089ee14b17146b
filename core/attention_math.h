// The geometry and scalar formulas of attention, written once for the CPU loops
// (core/cpu/attention.cpp) and the CUDA kernels (cuda/attention.cu): which key a
// query sees (causal, and the sparse patterns), how a (query tile, key tile)
// pair is classified for the flash loops, where each head's rows sit in memory,
// and the online softmax's two guarded formulas. The derivations are in
// docs/backprop.md, "FlashAttention" and "Sparse attention".
#pragma once
#include <cmath>
#include <cstdint>
#include <functional>
#include <limits>

#include "core/random.h"  // AG_HOST_DEVICE

namespace ag {

// --- sparse patterns (docs/backprop.md, "Sparse attention") ----------------------------
// A causal model may restrict each query to some of its earlier keys. With p
// the query's key position, key j ≤ p is visible if any of these holds:
//   window W, dilation δ:  p − j < W·δ and (p − j) mod δ = 0   (W = 0: every j ≤ p)
//   global G:              j < G
//   random R:              j's block of kSparseBlock keys is one of the R blocks
//                          drawn for p's block among the blocks below it (BigBird)
// A query always sees itself (p − j = 0 is in every window). Blocks are counted
// in key positions, so a query decoded one at a time over a cache sees what it
// saw in training.

inline constexpr int64_t kSparseBlock = 16;       // keys per random block, and queries per query block
inline constexpr int64_t kMaxRandomBlocks = 16;  // R's upper bound: the draws live in a fixed array

struct SparsePattern {
  int64_t window = 0;         // W; 0 = no limit (full causal: global and random add nothing)
  int64_t dilation = 1;       // δ ≥ 1
  int64_t global = 0;         // G
  int64_t random_blocks = 0;  // R ≤ kMaxRandomBlocks
  uint64_t seed = 0;          // the model's attn_seed
  int64_t layer = 0;          // the draws depend on (seed, layer, head)

  AG_HOST_DEVICE bool limited() const { return window > 0; }
  AG_HOST_DEVICE bool per_head() const { return limited() && random_blocks > 0; }  // the draws differ by head
};

// The key blocks that query block `query_block` of head h sees at random: R
// distinct blocks of [0, query_block), all of them when there are no more than
// R, by Floyd's algorithm (a uniform R-subset from R draws). Number t of the
// draw comes from the counter-based generator (core/random.h), keyed by
// (seed, layer, head, query block): the same blocks on every device, in the
// forward and the backward, and after a reload.
struct RandomBlocks {
  int64_t count = 0;
  int64_t block[kMaxRandomBlocks] = {};

  AG_HOST_DEVICE RandomBlocks(const SparsePattern& pattern, int64_t head, int64_t query_block) {
    const int64_t n = query_block, R = pattern.random_blocks;
    if (!pattern.per_head()) return;  // no random blocks (without a window they would add nothing)
    if (n <= R) {
      for (int64_t b = 0; b < n; ++b) block[count++] = b;
      return;
    }
    const uint64_t stream = random_bits(
        random_bits(random_bits(pattern.seed, static_cast<uint64_t>(pattern.layer)), static_cast<uint64_t>(head)),
        static_cast<uint64_t>(query_block));
    for (int64_t t = n - R; t < n; ++t) {
      const int64_t x = static_cast<int64_t>(random_bits(stream, static_cast<uint64_t>(t)) % static_cast<uint64_t>(t + 1));
      block[count++] = contains(x) ? t : x;
    }
  }
  AG_HOST_DEVICE bool contains(int64_t b) const {
    for (int64_t k = 0; k < count; ++k)
      if (block[k] == b) return true;
    return false;
  }
};

// How many of a (query tile, key tile) pair's entries are visible: the flash
// loops skip None, mask element by element only in Partial, and run All plain.
enum class TileVisibility { None, Partial, All };

// ALiBi's slopes for a head count H that is not a power of two (AttentionMask::alibi_slope;
// the model option alibi_slopes). Both rules agree when H is a power of two.
enum class AlibiSlopes {
  Reference,  // Press et al.'s get_slopes (and BLOOM's)
  Geometric,  // 2^(−8(h+1)/H) for every H: attograd's models saved before the option existed
};

// Which keys each query sees, and ALiBi's bias on what it sees. Query i
// (0 ≤ i < Tq) sits at key position p = i + q_offset; with `causal` it sees the
// keys j ≤ p allowed by `pattern`, without it every key (a pattern needs
// `causal`). Every implementation and both devices read this one definition;
// h is the query head.
struct AttentionMask {
  static constexpr int64_t kAllKeys = int64_t{1} << 62;  // without `causal` a query sits after every key
  bool causal = false;
  int64_t q_offset = 0;
  SparsePattern pattern;
  // The sequence position of key 0: a ring block's first key under context
  // parallelism (core/ops/ring_attention.cpp), else 0. The causal distances
  // p − j need only q_offset; the global keys and the random blocks are fixed
  // positions of the sequence, found at j + first_key (and p + first_key).
  int64_t first_key = 0;
  // ALiBi (Press et al. 2021; docs/backprop.md, "ALiBi"): the score of query i
  // with key j gets −m_h·(p − j) before the mask, m_h the slope of head h of
  // H = alibi_heads query heads (alibi_slope); 0: no bias. A constant: dS passes through it.
  int64_t alibi_heads = 0;
  AlibiSlopes alibi_slopes = AlibiSlopes::Reference;
  // Mask functions (MaskMods, core/ops.h: prefix-LM, documents, a token tree, an adjacency, the
  // user's own), evaluated once on the host into bytes: byte i·allowed_row + j of the matrix of
  // query head h of batch entry b is 1 where query i may see key j, 0 where it may not, whatever
  // the rest allows (the two are ANDed). The matrix lives on the kernels' device. The strides are
  // in bytes, 0 where every batch entry or head shares one matrix; kernels that loop over batch
  // entries take their entry's mask with at_batch(b). Null: no mask function (today's patterns alone).
  const uint8_t* allowed = nullptr;
  int64_t allowed_batch = 0, allowed_head = 0, allowed_row = 0;
  uint64_t allowed_id = 0;  // names the mask functions' contents for the block map's cache; 0: not cached
  // Packed documents in their compact form (MaskMods::documents whose ids each form one run of
  // positions): segment_start[t] is the first position of t's document, and the query at p sees
  // keys [segment_start[p], p] only, an interval per row, so that neither the kernels nor the
  // block map test a byte per entry. On the kernels' device; segment_batch: elements between
  // batch entries' rows (0: shared). Null: none.
  const int64_t* segment_start = nullptr;
  int64_t segment_batch = 0;

  // The mask of batch entry b, for kernels that index queries within one entry.
  AG_HOST_DEVICE AttentionMask at_batch(int64_t b) const {
    AttentionMask m = *this;
    if (m.allowed) m.allowed += b * allowed_batch;
    if (m.segment_start) m.segment_start += b * segment_batch;
    return m;
  }
  AG_HOST_DEVICE bool per_head() const { return pattern.per_head() || (allowed && allowed_head != 0); }
  AG_HOST_DEVICE bool by_batch() const {
    return (allowed && allowed_batch != 0) || (segment_start && segment_batch != 0);
  }
  AG_HOST_DEVICE bool has_mask_function() const { return allowed || segment_start; }
  // Whether a visibility test per element is needed beyond causality (a pattern or a mask function).
  AG_HOST_DEVICE bool elementwise() const { return pattern.limited() || has_mask_function(); }

  // m_h. For H a power of two, 2^(−8(h+1)/H) under either rule. Otherwise the
  // reference rule (Press et al.'s get_slopes, BLOOM's) takes the c = 2^⌊log2 H⌋
  // slopes of c heads, then every other slope of 2c heads, 2^(−8(2(h−c)+1)/(2c)),
  // for the H − c heads left; geometric keeps 2^(−8(h+1)/H) (attograd's rule before it).
  AG_HOST_DEVICE double alibi_slope(int64_t h) const {
    if (alibi_heads <= 0) return 0.0;
    if (alibi_slopes == AlibiSlopes::Geometric) return exp2(-8.0 * static_cast<double>(h + 1) / static_cast<double>(alibi_heads));
    int64_t c = 1;
    while (2 * c <= alibi_heads) c *= 2;
    if (h < c) return exp2(-8.0 * static_cast<double>(h + 1) / static_cast<double>(c));
    return exp2(-8.0 * static_cast<double>(2 * (h - c) + 1) / static_cast<double>(2 * c));
  }
  // The bias on query i's score with key j, from the head's slope (alibi_slope, in T):
  // −slope·(p − j), exactly 0 (a score unchanged) when slope is 0.
  template <class T> AG_HOST_DEVICE T bias(T slope, int64_t i, int64_t j) const {
    return -slope * static_cast<T>(i + q_offset - j);
  }

  // One query's row of the mask, with its random blocks drawn once.
  struct Row {
    const SparsePattern& pattern;
    int64_t p;          // the query's key position
    int64_t first_key;  // key 0's sequence position (AttentionMask::first_key)
    RandomBlocks random;
    const uint8_t* allowed = nullptr;  // this query's row of AttentionMask::allowed, or null
    int64_t lowest = -kAllKeys, highest = kAllKeys;  // its document's keys [lowest, highest] (segment_start)

    AG_HOST_DEVICE bool visible(int64_t j) const {
      if (allowed && !allowed[j]) return false;
      if (j < lowest || j > highest) return false;
      if (j > p) return false;
      if (!pattern.limited() || in_window(j) || j + first_key < pattern.global) return true;
      const int64_t key_block = (j + first_key) / kSparseBlock;
      return key_block < (p + first_key) / kSparseBlock && random.contains(key_block);
    }
    AG_HOST_DEVICE bool in_window(int64_t j) const {
      const int64_t distance = p - j;
      return distance >= 0 && distance < pattern.window * pattern.dilation && distance % pattern.dilation == 0;
    }
    // #{j ∈ [a, b) : in_window(j)}: the distances p − j form [p − b + 1, p − a], cut to
    // [0, W·δ); count the multiples of δ there.
    AG_HOST_DEVICE int64_t window_count(int64_t a, int64_t b) const {
      const int64_t lo = p - b + 1 < 0 ? 0 : p - b + 1;
      const int64_t span = pattern.window * pattern.dilation;
      const int64_t hi = p - a < span - 1 ? p - a : span - 1;
      if (hi < lo) return 0;
      const int64_t d = pattern.dilation;
      return hi / d - (lo + d - 1) / d + 1;
    }
    // #{j ∈ [j0, j1) : visible(j)}: the window's multiples of δ, plus the global
    // prefix and the random blocks (disjoint intervals once the blocks are cut
    // at G), less the window's keys inside those intervals.
    AG_HOST_DEVICE int64_t count(int64_t j0, int64_t j1) const {
      if (j0 < lowest) j0 = lowest;  // its document's keys only
      if (j1 > highest + 1) j1 = highest + 1;
      const int64_t end = j1 < p + 1 ? j1 : p + 1;
      if (end <= j0) return 0;
      if (allowed) {  // a mask function: key by key
        int64_t shown = 0;
        for (int64_t j = j0; j < end; ++j) shown += visible(j) ? 1 : 0;
        return shown;
      }
      if (!pattern.limited()) return end - j0;
      int64_t visible_count = window_count(j0, end);
      const auto add_interval = [&](int64_t a, int64_t b) {
        a = a > j0 ? a : j0;
        b = b < end ? b : end;
        if (a < b) visible_count += (b - a) - window_count(a, b);
      };
      // The global keys and the random blocks at their sequence positions, as key indices.
      const int64_t global_end = pattern.global - first_key;
      add_interval(-first_key, global_end);
      for (int64_t k = 0; k < random.count; ++k) {
        const int64_t start = random.block[k] * kSparseBlock - first_key;
        add_interval(start > global_end ? start : global_end, start + kSparseBlock);
      }
      return visible_count;
    }
  };

  // A Row refers to this mask's pattern, so a temporary's (mask.at_batch(b).row(h, i)) would
  // dangle: only a mask that outlives the row gives one.
  AG_HOST_DEVICE Row row(int64_t h, int64_t i) const&& = delete;
  AG_HOST_DEVICE Row row(int64_t h, int64_t i) const& {
    const int64_t p = causal ? i + q_offset : kAllKeys;
    // p < 0 sees no key: no blocks below it
    return {pattern, p, first_key, RandomBlocks(pattern, h, causal ? (p + first_key) / kSparseBlock : 0),
            allowed ? allowed + h * allowed_head + i * allowed_row : nullptr,
            segment_start ? segment_start[i + q_offset] : -kAllKeys, segment_start ? i + q_offset : kAllKeys};
  }
  AG_HOST_DEVICE bool visible(int64_t h, int64_t i, int64_t j) const { return row(h, i).visible(j); }

  // Queries [i0, i1) of head h against keys [j0, j1), both non-empty; exact:
  // None iff no entry is visible, All iff every entry is.
  AG_HOST_DEVICE TileVisibility tile(int64_t h, int64_t i0, int64_t i1, int64_t j0, int64_t j1) const {
    bool count = false;
    const TileVisibility quick = tile_without_count(h, i0, i1, j0, j1, count);
    if (!count) return quick;
    int64_t shown = 0;
    for (int64_t i = i0; i < i1; ++i) shown += row(h, i).count(j0, j1);
    if (shown == 0) return TileVisibility::None;
    return shown == (i1 - i0) * (j1 - j0) ? TileVisibility::All : TileVisibility::Partial;
  }
  // tile()'s answer where its cheap tests give it; else `count` is set, and the answer
  // comes from counting each query row's visible keys, row(h, i).count(j0, j1): None if
  // no row sees one, All if every row sees all j1 − j0, else Partial. (cuda/attention_tiles.cuh
  // splits that count over a thread block.)
  AG_HOST_DEVICE TileVisibility tile_without_count(int64_t h, int64_t i0, int64_t i1, int64_t j0, int64_t j1,
                                                   bool& count) const {
    count = false;
    if (has_mask_function()) {  // counted row by row (the block map does it once per mask)
      if (causal && j0 > i1 - 1 + q_offset) return TileVisibility::None;
      // Document starts never decrease along the sequence: keys before the first query's start are hidden from all.
      if (segment_start && j1 - 1 < segment_start[i0 + q_offset]) return TileVisibility::None;
      count = true;
      return TileVisibility::Partial;
    }
    if (!causal) return TileVisibility::All;
    if (j0 > i1 - 1 + q_offset) return TileVisibility::None;  // even the last query sees none of them
    if (!pattern.limited()) {
      if (j1 - 1 <= i0 + q_offset) return TileVisibility::All;  // even the first query sees all of them
      return TileVisibility::Partial;
    }
    if (!may_see(h, i0, i1, j0, j1)) return TileVisibility::None;
    count = true;
    return TileVisibility::Partial;
  }

 private:

  // A cheap test before counting row by row: false only if no query of the
  // tile can see a key of it through the window, the global keys or a random
  // block drawn for one of the tile's query blocks.
  AG_HOST_DEVICE bool may_see(int64_t h, int64_t i0, int64_t i1, int64_t j0, int64_t j1) const {
    const int64_t nearest = i0 + q_offset - (j1 - 1);  // the smallest distance p − j in the tile
    if (nearest < pattern.window * pattern.dilation || j0 + first_key < pattern.global) return true;
    if (pattern.random_blocks == 0) return false;
    const int64_t first = (i0 + q_offset + first_key) / kSparseBlock, last = (i1 - 1 + q_offset + first_key) / kSparseBlock;
    for (int64_t query_block = first; query_block <= last; ++query_block) {
      const RandomBlocks random(pattern, h, query_block);
      for (int64_t k = 0; k < random.count; ++k)
        if (random.block[k] * kSparseBlock < j1 + first_key && (random.block[k] + 1) * kSparseBlock > j0 + first_key)
          return true;
    }
    return false;
  }
};

// --- score modifiers (docs/backprop.md, "Score modifiers and their adjoints") -----------------
// T5's bucket (Raffel et al. 2020) of the relative position r = j − p of key j from
// the query at key position p. n = p − j counts back in time. Bidirectional: half
// the buckets for each direction, keys after the query (n < 0) in the upper half,
// n = |n|; else keys after the query are n = 0. Of the nb buckets left, the first
// nb/2 hold n exactly; from there on the bucket grows with log n, reaching the last
// one, nb − 1, at max_distance:
//   bucket(n) = n                                                          n < nb/2
//             = min(nb − 1, nb/2 + ⌊log(n / (nb/2)) / log(max_distance / (nb/2)) · (nb − nb/2)⌋)   else
// Formed in float64 (T5's code forms the logarithm in float32; they agree unless a
// value falls within a float32 rounding of an integer: tests/test_score_mods.cpp
// compares every bucket of its cases with PyTorch's).
AG_HOST_DEVICE inline int64_t relative_position_bucket(int64_t relative, bool bidirectional, int64_t num_buckets,
                                                       int64_t max_distance) {
  int64_t bucket = 0, n = -relative;
  if (bidirectional) {
    num_buckets /= 2;
    if (n < 0) bucket = num_buckets, n = -n;
  } else if (n < 0) {
    n = 0;
  }
  const int64_t max_exact = num_buckets / 2;
  if (n < max_exact) return bucket + n;
  const int64_t large =
      max_exact + static_cast<int64_t>(std::log(static_cast<double>(n) / static_cast<double>(max_exact)) /
                                       std::log(static_cast<double>(max_distance) / static_cast<double>(max_exact)) *
                                       static_cast<double>(num_buckets - max_exact));
  return bucket + (large < num_buckets - 1 ? large : num_buckets - 1);
}

// A score modifier of the user's own (ScoreMods::custom, core/ops.h): S' = value(u, h, q, k)
// for query head h, the query at key position q (i + q_offset) and key k, with its derivative
// ∂value/∂u, between the bias tables and the cap. Host code only: the CPU's kernels call it
// per score in float64 (CUDA's refuse it). No learnable parameters. Both must be finite
// for every finite u: they are called at hidden pairs too (whose scores the mask then drops).
struct ScoreFunction {
  std::function<double(double u, int64_t h, int64_t q, int64_t k)> value, derivative;
};

// The score modifiers as the kernels see them (ScoreMods in core/ops.h holds the
// tensors; these are their data, in the scores' dtype T, on the scores' device).
// With u = S + the tables' biases and S' = cap·tanh(u/cap) (S' = u without a cap),
// the softmax is taken over S' + M and, with sinks, one more logit sink_h in each row's
// denominator. Every implementation and both devices form S' with modify(), so the
// forward's and the backward's S' are the same bits.
struct ScoreModifiers {
  double soft_cap = 0;             // > 0: S' = cap·tanh(u/cap); 0: S' = u
  const void* sinks = nullptr;     // [Hq], or null
  const void* relative = nullptr;  // [Hq, relative_buckets], or null
  int64_t relative_buckets = 0, max_distance = 0;
  bool bidirectional = true;
  const void* indexed = nullptr;  // [Hq, indexed_entries], or null
  int64_t indexed_entries = 0;
  const int64_t* index = nullptr;  // [Tq, Tk], entries in [0, indexed_entries)
  int64_t index_row = 0;           // Tk: the index's row stride
  const ScoreFunction* custom = nullptr;  // the user's own, or null; CPU only (host_modify below)

  AG_HOST_DEVICE bool any() const { return changes_scores() || sinks; }
  AG_HOST_DEVICE bool has_tables() const { return relative || indexed; }
  AG_HOST_DEVICE bool changes_scores() const { return has_chain() || has_tables(); }  // S' ≠ S
  // ∂S'/∂u ≠ 1: the backward needs each score's chain factor (the cap's, the custom function's).
  AG_HOST_DEVICE bool has_chain() const { return soft_cap > 0 || custom; }
  // A table gradient's entries per head: the relative table's, then the indexed table's
  // (dBias [.., Hq, bias_entries()] in the kernels).
  AG_HOST_DEVICE int64_t bias_entries() const { return (relative ? relative_buckets : 0) + (indexed ? indexed_entries : 0); }
  // The entry of the relative table (its column) that query i at position p reads for key j.
  AG_HOST_DEVICE int64_t bucket(int64_t p, int64_t j) const {
    return relative_position_bucket(j - p, bidirectional, relative_buckets, max_distance);
  }
  // u = s + rel[h, bucket] + idx[h, index(i, j)]: S's biases for query i of head h and key j, the
  // relative table's bucket given (bucket(p, j), which a caller may form once per distance p − j).
  template <class T> AG_HOST_DEVICE T biased_at(T s, int64_t h, int64_t bucket, int64_t i, int64_t j) const {
    if (relative) s += static_cast<const T*>(relative)[h * relative_buckets + bucket];
    if (indexed) s += static_cast<const T*>(indexed)[h * indexed_entries + index[i * index_row + j]];
    return s;
  }
  template <class T> AG_HOST_DEVICE T biased(T s, int64_t h, int64_t p, int64_t i, int64_t j) const {
    return biased_at(s, h, relative ? bucket(p, j) : 0, i, j);
  }
  template <class T> AG_HOST_DEVICE T capped(T u) const {
    const T cap = static_cast<T>(soft_cap);
    return soft_cap > 0 ? cap * std::tanh(u / cap) : u;
  }
  // S' from S: the biases, then the cap (without a custom function: host_modify has it).
  template <class T> AG_HOST_DEVICE T modify(T s, int64_t h, int64_t p, int64_t i, int64_t j) const {
    return capped(biased(s, h, p, i, j));
  }
  // S' from S with every modifier, the custom function too, on the host (the bucket given, as
  // biased_at); factor (if not null) receives ∂S'/∂u = (1 − (S'/cap)²) · ∂value/∂u. Equals modify().
  template <class T>
  T host_modify(T s, int64_t h, int64_t p, int64_t bucket, int64_t i, int64_t j, T* factor) const {
    const T u = biased_at(s, h, bucket, i, j);
    const T out = custom ? capped(static_cast<T>(custom->value(static_cast<double>(u), h, p, j))) : capped(u);
    if (factor)
      *factor = custom ? cap_derivative(out) * static_cast<T>(custom->derivative(static_cast<double>(u), h, p, j))
                       : cap_derivative(out);
    return out;
  }
  // ∂S'/∂u from S' itself: 1 − tanh² = 1 − (S'/cap)² (1 without a cap).
  template <class T> AG_HOST_DEVICE T cap_derivative(T s_mod) const {
    if (!(soft_cap > 0)) return T(1);
    const T t = s_mod / static_cast<T>(soft_cap);
    return T(1) - t * t;
  }
  // dBias[e] += du for the entries u_ij read (dBias: one head's bias_entries() sums; the bucket as biased_at's).
  template <class T> AG_HOST_DEVICE void add_bias_gradient(T du, int64_t bucket, int64_t i, int64_t j, T* dbias) const {
    if (relative) dbias[bucket] += du;
    if (indexed) dbias[(relative ? relative_buckets : 0) + index[i * index_row + j]] += du;
  }
  // The distances n = p − j whose relative bucket is e (e < relative_buckets): [lo, hi], empty
  // when lo > hi. The bucket grows with n in each direction, so each bucket is one interval; a
  // loop over pairs tests n against it instead of taking a logarithm per pair (CUDA's sums).
  struct Distances {
    int64_t lo, hi;
  };
  AG_HOST_DEVICE Distances distances_of(int64_t e) const {
    constexpr int64_t kFar = int64_t{1} << 62;
    const int64_t per_direction = bidirectional ? relative_buckets / 2 : relative_buckets;
    const int64_t e_dir = e < per_direction ? e : e - per_direction;  // the bucket within its direction
    if (e_dir >= per_direction) return {1, 0};  // an odd count's last bucket, which bidirectional never reads
    // [lo, hi] of m ≥ 0 with bucket_in_direction(m) = e_dir: the first m reaching e_dir, to the first reaching e_dir + 1
    const auto first_reaching = [&](int64_t target) {  // bucket_in_direction is non-decreasing
      int64_t lo = 0, hi = max_distance;                // bucket_in_direction(max_distance) = per_direction − 1
      while (lo < hi) {
        const int64_t mid = lo + (hi - lo) / 2;
        if (relative_position_bucket(-mid, false, per_direction, max_distance) >= target) hi = mid;
        else lo = mid + 1;
      }
      return lo;
    };
    const int64_t m_lo = first_reaching(e_dir), m_hi = e_dir + 1 < per_direction ? first_reaching(e_dir + 1) - 1 : kFar;
    if (!bidirectional) return e == 0 ? Distances{-kFar, m_hi} : Distances{m_lo, m_hi};  // keys after the query: bucket 0
    if (e < per_direction) return {m_lo, m_hi};                                          // keys before (n ≥ 0)
    return {-m_hi, -(m_lo > 1 ? m_lo : 1)};                                              // keys after (n ≤ −1)
  }
  // Whether the pair (i at p, j) reads entry e of the tables' joint row (add_bias_gradient's
  // columns); `relative_distances` = distances_of(e) when e is a relative bucket.
  AG_HOST_DEVICE bool reads(int64_t e, const Distances& relative_distances, int64_t p, int64_t i, int64_t j) const {
    const int64_t first_indexed = relative ? relative_buckets : 0;
    if (e < first_indexed) return relative_distances.lo <= p - j && p - j <= relative_distances.hi;
    return indexed && index[i * index_row + j] == e - first_indexed;
  }
  // sink_h, or −∞ (no sink: exp(−∞) = 0 adds nothing to the denominator).
  template <class T> AG_HOST_DEVICE T sink(int64_t h) const {
    return sinks ? static_cast<const T*>(sinks)[h] : -std::numeric_limits<T>::infinity();
  }
};

// Where row t of head h of batch entry b starts in an attention operand, in
// elements; the row's d entries follow contiguously.
//   [B, H, T, d]:  {H·T·d, T·d, d}        [B, T, H, d]:  {T·H·d, d, H·d}
struct HeadStrides {
  int64_t batch, head, row;
  AG_HOST_DEVICE int64_t at(int64_t b, int64_t h, int64_t t) const { return b * batch + h * head + t * row; }
};

// One attention problem, as the kernels see it: B batch entries, Hq query
// heads over Hkv key/value heads (query head h reads kv head h / (Hq / Hkv):
// grouped-query attention without a copy), Tq queries and Tk keys of width d,
//   S = scale · Q Kᵀ,  A = softmax(S + M),  Z = A V,  lse = log Σ_j exp(S_ij + M_ij).
// Q, Z, dQ, dZ are laid out by `q`; K, V, dK, dV by `kv`; lse [B, Hq, Tq] is contiguous.
struct AttentionShape {
  int64_t B, Hq, Hkv, Tq, Tk, d;
  double scale;
  AttentionMask mask;
  HeadStrides q, kv;
  ScoreModifiers mods = {};  // S' = mods(S) before the mask; none by default

  AG_HOST_DEVICE int64_t group() const { return Hq / Hkv; }  // query heads per kv head
  AG_HOST_DEVICE int64_t lse_at(int64_t b, int64_t h, int64_t i) const { return (b * Hq + h) * Tq + i; }
};

// --- rotary position embedding (docs/backprop.md, "RoPE") -----------------------------------
// RoPE (Su et al. 2021) in the GPT-NeoX / LLaMA "rotate_half" convention: a
// row x of even width d at position p, split in halves x = [x₁, x₂], becomes
//   x' = [x₁ ∘ c − x₂ ∘ s,  x₂ ∘ c + x₁ ∘ s],   c_i = cos(p·f_i), s_i = sin(p·f_i),
//   f_i = base^(−2i/d), i < d/2,
// a rotation of each pair (x₁ᵢ, x₂ᵢ) by p·f_i: q'(p)·k'(p') depends on p − p' only.
// Its adjoint (the backward) is the rotation by −p·f_i. The angle is formed in
// float64 on both devices, so that far positions keep their precision.
struct RotaryShape {
  int64_t B, H, T, d;      // rows of width d, at b, h, t
  HeadStrides at;          // where each row starts (input and output alike)
  int64_t first_position;  // row t sits at position first_position + t
  double base;             // > 0
  double direction;        // +1: the rotation; −1: its inverse (the backward)

  AG_HOST_DEVICE int64_t rows() const { return B * H * T; }
  // Row `row` (b, h, t in that order of significance): where it starts, and its position.
  AG_HOST_DEVICE int64_t row_at(int64_t row) const { return at.at(row / (H * T), row / T % H, row % T); }
  AG_HOST_DEVICE int64_t position(int64_t row) const { return first_position + row % T; }
  AG_HOST_DEVICE double frequency(int64_t i) const {  // f_i
    return pow(base, -2.0 * static_cast<double>(i) / static_cast<double>(d));
  }
  // The angle of pair i at `position`, from f_i (a loop over positions forms each f_i once).
  AG_HOST_DEVICE double angle(int64_t position, double frequency_i) const {
    return direction * static_cast<double>(position) * frequency_i;
  }
};

// Pair i of one row: (x₁ᵢ, x₂ᵢ) = (x[i], x[i + d/2]) rotated into y by the angle whose
// cosine and sine (rounded to T from float64) are c and s; y may be x.
template <class T> AG_HOST_DEVICE inline void rotate_pair(const T* x, T* y, int64_t half, int64_t i, T c, T s) {
  const T x1 = x[i], x2 = x[i + half];
  y[i] = x1 * c - x2 * s;
  y[i + half] = x2 * c + x1 * s;
}

namespace math {

template <class T> constexpr T kInf = std::numeric_limits<T>::infinity();

// The online softmax keeps a running max m per row and rescales by
// exp(m_old − m_new). Until the row has seen a visible key m is −∞, and
// exp(−∞ − (−∞)) would be NaN: measure against 0 instead (every term is then
// exp(−∞) = 0, and the sum stays 0).
template <class T> AG_HOST_DEVICE inline T softmax_reference(T running_max) {
  return running_max == -kInf<T> ? T(0) : running_max;
}

// lse = m + log l from the row max m and the sum l = Σ_j exp(S_ij − m). A row
// that sees no key has l = 0 and gets lse = +∞, so that the backward's
// P = exp(S − lse) is exactly 0 there (and Z = 0: no probability mass).
template <class T> AG_HOST_DEVICE inline T log_sum_exp(T row_max, T row_sum) {
  return row_sum == T(0) ? kInf<T> : row_max + std::log(row_sum);
}

// The flash backward's P = exp(S − lse) in T: lse = hi + lo in T (lo = 0 for
// float64), so that S − lse is formed as (S − hi) − lo with one rounding where
// it matters: near a row's max, S and hi are close and S − hi is exact. lse
// itself is float64 (core/kernels.inc, flash_attention). +∞ (a row that sees no
// key) gives hi = +∞, lo = 0, and P = 0.
template <class T> AG_HOST_DEVICE inline void split_lse(double lse, T& hi, T& lo) {
  hi = static_cast<T>(lse);
  lo = std::isinf(lse) ? T(0) : static_cast<T>(lse - static_cast<double>(hi));
}

// Two softmax attentions of one query over disjoint sets of keys, (Z₁, lse₁) and
// (Z₂, lse₂), merge into the attention over their union (ring attention's blocks;
// docs/backprop.md, "Ring attention"):
//   lse = log(e^lse₁ + e^lse₂) = max(lse₁, lse₂) + log1p(e^(−|lse₁ − lse₂|)),
//   Z = e^(lse₁ − lse) Z₁ + e^(lse₂ − lse) Z₂,
// every exponent ≤ 0, so nothing overflows. lse = +∞ marks a part that saw no
// key (log_sum_exp above): it gets weight 0 and the other part is kept as it is.
struct SoftmaxMerge {
  double log_sum_exp, weight_1, weight_2;
};
AG_HOST_DEVICE inline SoftmaxMerge merge_softmax_parts(double lse_1, double lse_2) {
  if (lse_2 == kInf<double>) return {lse_1, 1.0, 0.0};
  if (lse_1 == kInf<double>) return {lse_2, 0.0, 1.0};
  const double lse = (lse_1 > lse_2 ? lse_1 : lse_2) + log1p(exp(-fabs(lse_1 - lse_2)));
  return {lse, exp(lse_1 - lse), exp(lse_2 - lse)};
}

}  // namespace math
}  // namespace ag
