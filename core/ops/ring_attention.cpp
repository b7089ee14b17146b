// Ring attention (Liu et al. 2023): softmax attention over one sequence whose
// positions are split over the P processes of spec.context, zigzag
// (core/context_parallel.h: process r holds chunks r and 2P − 1 − r of 2P, its
// halves 0 and 1). Each process keeps its queries; its keys and values travel
// the ring r → r + 1 as one block, P − 1 hops, the next hop's transfer under way
// while the current block is computed. Derivation: docs/backprop.md, "Ring attention".
//
// Forward, for query half a (chunk c_a) of this process and key half b (chunk
// c_b) of the block at hand: flash on the pair, with the query sitting
// (c_a − c_b)·chunk keys after key 0 and key 0 at sequence position c_b·chunk
// (AttentionMask::first_key), skipped when the mask leaves nothing visible
// (under the causal mask, c_b > c_a). The parts (Z_ab, lse_ab) merge by the
// log-sum-exp rule (math::merge_softmax_parts, the attention_merge kernel) into
// each query half's (Z_a, lse_a): the attention over every key.
//
// Backward: with the merged lse and D = rowsum(dZ ∘ Z) of the merged Z, each
// pair's
//   P = exp(S − lse),  dP = dZ Vᵀ,  dS = P ∘ (dP − D)
// are exactly the entries of the whole problem's (D sums over every key, which
// no pair sees alone, so it is given to the kernel). dQ sums over the pairs
// here; the block's dK, dV are summed on each process it visits and travel the
// ring one step behind it, so that they arrive home (one more hop) summed over
// every process.
#include <algorithm>
#include <array>
#include <optional>

#include "core/context_parallel.h"
#include "core/ops/attention_functions.h"
#include "dist/communicator.h"

namespace ag::detail {

namespace {

// The dim of T in an attention operand.
int64_t positions_dim(AttentionLayout layout) { return layout == AttentionLayout::BTHD ? 1 : 2; }

// K and V of one process's two halves in one buffer, so that a ring step is one
// message (GQA's Hkv heads only): parts k₀, k₁, v₀, v₁, each [B, Hkv, chunk, d]
// (BHTD) or [B, chunk, Hkv, d] (BTHD), contiguous. Its gradients travel in a
// second block of the same shape.
struct KvBlock {
  Tensor buffer;
  Shape part_shape;

  KvBlock(const Shape& part, const Tensor& like) : buffer(empty_as({4 * numel(part)}, like)), part_shape(part) {}
  Tensor part(int64_t which) const { return buffer.view(which * numel(part_shape), part_shape); }
  Tensor k(int64_t half) const { return part(half); }
  Tensor v(int64_t half) const { return part(2 + half); }
};

// The buffers the blocks arrive in, made when first needed. The one receiving
// must differ from the one at hand, so two alternate; the first block at hand
// is this process's own (saved by the op, never overwritten), so a ring of two
// needs one.
class Arrivals {
 public:
  Arrivals(const Shape& part, const Tensor& like) : part_(part), like_(like) {}
  KvBlock& at(int64_t step) {
    std::optional<KvBlock>& buffer = buffers_[step % 2];
    if (!buffer) buffer.emplace(part_, like_);
    return *buffer;
  }

 private:
  Shape part_;
  Tensor like_;
  std::array<std::optional<KvBlock>, 2> buffers_;
};

// What every ring step needs: the group, this process's place in it, and one pair's problem.
struct Ring {
  dist::Communicator* group;
  int64_t P, rank, chunk;
  AttentionLayout layout;
  AttentionShape pair;  // one (query half, key half) pair's problem: Tq = Tk = chunk; the mask's offsets per pair

  int next() const { return static_cast<int>((rank + 1) % P); }
  int previous() const { return static_cast<int>((rank + P - 1) % P); }
  // The process whose block is here at ring step s.
  int64_t source(int64_t step) const { return (rank - step + P) % P; }
  int64_t chunk_of(int64_t process, int64_t half) const { return ZigzagSplit(2 * P * chunk, P, process).chunk_of(half); }

  // Query half a of this process against key half b of `process`'s block; none when nothing is visible.
  std::optional<AttentionShape> pair_shape(int64_t a, int64_t process, int64_t b) const {
    const int64_t query_chunk = chunk_of(rank, a), key_chunk = chunk_of(process, b);
    AttentionShape shape = pair;
    shape.mask.q_offset = (query_chunk - key_chunk) * chunk;
    shape.mask.first_key = key_chunk * chunk;
    const int64_t heads = shape.mask.pattern.per_head() ? shape.Hq : 1;
    for (int64_t h = 0; h < heads; ++h)
      if (shape.mask.tile(h, 0, chunk, 0, chunk) != TileVisibility::None) return shape;
    return std::nullopt;
  }

  // Rows [h·chunk, (h + 1)·chunk) of an operand (a copy), and where the rows of such a copy start.
  Tensor half(const Tensor& x, int64_t h) const {
    return slice(x, positions_dim(layout), h * chunk, (h + 1) * chunk);
  }
  HeadStrides half_strides(const Tensor& x) const {
    const int64_t H = heads_of(x, layout), w = x.size(3);
    return layout == AttentionLayout::BTHD ? HeadStrides{chunk * H * w, w, H * w} : HeadStrides{H * chunk * w, chunk * w, w};
  }
  KvBlock pack(const Tensor& k, const Tensor& v) const {
    KvBlock block(half(k, 0).shape(), k);
    for (int64_t h = 0; h < 2; ++h) {
      Tensor k_part = block.k(h), v_part = block.v(h);
      kernel::cast(half(k, h), k_part);
      kernel::cast(half(v, h), v_part);
    }
    return block;
  }
  // A block's k (or v) parts as one operand of this process's rows.
  Tensor unpack(const KvBlock& block, int64_t first_part) const {
    return concat({block.part(first_part), block.part(first_part + 1)}, positions_dim(layout));
  }

  // Operand x (this process's rows, laid out as head_strides(x) says) from the first row of
  // half h on: a flat view of its storage from there, which a kernel reading rows through
  // head_strides(x) takes as the half. Q, Z, dZ and dQ are read and written in place so.
  Tensor from_half(const Tensor& x, int64_t h) const {
    const int64_t offset = head_strides(x, layout).at(0, 0, h * chunk);
    return x.view(offset, {x.numel() - offset});
  }
  // The rows of x [B, Hq, 2·chunk] (lse, D) of half h: [B, Hq, chunk] (a copy).
  Tensor lse_half(const Tensor& x, int64_t h) const { return slice(x, 2, h * chunk, (h + 1) * chunk); }
};

}  // namespace

Tensor ring_attention(const Tensor& q, const Tensor& k, const Tensor& v, const AttentionShape& whole,
                      const SoftmaxAttention& softmax, const AttentionSpec& spec, AttentionInternals* internals) {
  dist::Communicator& group = *spec.context;
  const int64_t P = group.size(), rank = group.rank(), T_local = positions_of(q, spec.layout);
  AG_CHECK(!spec.cache && !softmax.q_offset && !softmax.kv_length,
           "attention: context parallel attention takes one sequence's rows, without a KV cache, q_offset or kv_length");
  AG_CHECK(positions_of(k, spec.layout) == T_local,
           "attention: context parallel attention needs this process's queries and keys at the same positions ("
               << T_local << " queries, " << positions_of(k, spec.layout) << " keys)");
  const ZigzagSplit split(T_local * P, P, rank);  // checks that the rows are two equal chunks
  const int64_t chunk = split.chunk();
  Ring ring{.group = &group, .P = P, .rank = rank, .chunk = chunk, .layout = spec.layout, .pair = whole};
  ring.pair.Tq = ring.pair.Tk = chunk;
  // Queries and outputs are read and written in place, each half from its first row (from_half,
  // with the strides describe_problem gave); each part of a block is a contiguous tensor of its own.
  ring.pair.kv = ring.half_strides(k);

  std::array<Tensor, 2> lse;
  std::optional<KvBlock> own;
  Tensor Z = Tensor::zeros(q.shape(), q.dtype(), q.device());
  {
    const NoGradGuard no_grad;  // the pieces are the op's own: one autograd node below
    own = ring.pack(k, v);
    for (int64_t a = 0; a < 2; ++a)
      lse[a] = Tensor::full({whole.B, whole.Hq, chunk}, math::kInf<double>, DType::Float64, q.device());  // no key yet
    Arrivals arriving(own->part_shape, k);
    const Tensor part = empty_like(q);  // one pair's Z, at its half's rows
    const KvBlock* block = &*own;
    for (int64_t step = 0; step < P; ++step) {
      dist::Exchange transfer;
      if (step + 1 < P)
        transfer = group.start_exchange(block->buffer, ring.next(), arriving.at(step).buffer, ring.previous());
      for (int64_t a = 0; a < 2; ++a)
        for (int64_t b = 0; b < 2; ++b)
          if (const std::optional<AttentionShape> shape = ring.pair_shape(a, ring.source(step), b)) {
            Tensor Z_part = ring.from_half(part, a), lse_part = empty_like(lse[a]), Z_half = ring.from_half(Z, a);
            kernel::flash_attention(ring.from_half(q, a), block->k(b), block->v(b), *shape, Z_part, lse_part);
            kernel::attention_merge(Z_half, lse[a], Z_part, lse_part, *shape);
          }
      transfer.wait();
      block = &arriving.at(step);
    }
    if (internals) internals->log_sum_exp = concat({lse[0], lse[1]}, 2);
  }

  // The group must outlive the backward (it runs the ring again).
  return record("attention", {q, k, v}, Z, [ring, Q = q.detach(), lse, own = *own, Z](const Tensor& dZ) -> Gradients {
    dist::Communicator& group = *ring.group;
    // D = rowsum(dZ ∘ Z) [B, Hq, 2·chunk], then its halves
    Tensor D = sum(mul(dZ, Z), 3);
    if (ring.layout == AttentionLayout::BTHD) D = transpose(D, 1, 2);
    const std::array<Tensor, 2> D_half{ring.lse_half(D, 0), ring.lse_half(D, 1)};
    Tensor dQ = Tensor::zeros(Q.shape(), Q.dtype(), Q.device());
    // The gradient of the block at hand, summed here and on the processes before, and the sum
    // arriving from them for the next block. One of each: a block's sum is sent, and its
    // transfer waited for, before the next block's starts (memory over overlap: the sum's hop
    // is one of the ring's K, V blocks, short beside a step's compute).
    KvBlock arriving_sum(own.part_shape, own.buffer);
    {
      Arrivals arriving(own.part_shape, own.buffer);
      KvBlock summed(own.part_shape, own.buffer);
      const KvBlock* block = &own;
      dist::Exchange sum_transfer;
      for (int64_t step = 0; step < ring.P; ++step) {
        dist::Exchange transfer;
        if (step + 1 < ring.P)
          transfer = group.start_exchange(block->buffer, ring.next(), arriving.at(step).buffer, ring.previous());
        sum_transfer.wait();
        if (step == 0)
          kernel::fill(summed.buffer, 0.0);
        else  // what the processes before this one summed for this block
          kernel::cast(arriving_sum.buffer, summed.buffer);
        for (int64_t a = 0; a < 2; ++a)
          for (int64_t b = 0; b < 2; ++b)
            if (const std::optional<AttentionShape> shape = ring.pair_shape(a, ring.source(step), b)) {
              Tensor dQ_half = ring.from_half(dQ, a), dK_sum = summed.k(b), dV_sum = summed.v(b), no_tables;
              kernel::flash_attention_backward(ring.from_half(Q, a), block->k(b), block->v(b), lse[a],
                                               ring.from_half(dZ, a), D_half[a], *shape, true, dQ_half, dK_sum,
                                               dV_sum, no_tables);
            }
        sum_transfer = group.start_exchange(summed.buffer, ring.next(), arriving_sum.buffer, ring.previous());
        transfer.wait();
        block = &arriving.at(step);
      }
      sum_transfer.wait();  // the last hop: this process's own block, summed over the ring
    }
    return {dQ, ring.unpack(arriving_sum, 0), ring.unpack(arriving_sum, 2)};
  });
}

Tensor rope_at_context_positions(const Tensor& x, const AttentionSpec& spec) {
  dist::Communicator& group = *spec.context;
  const int64_t dim = positions_dim(spec.layout), T_local = positions_of(x, spec.layout);
  const ZigzagSplit split(T_local * group.size(), group.size(), group.rank());
  std::vector<Tensor> halves;
  for (int64_t h = 0; h < 2; ++h)
    halves.push_back(rope(slice(x, dim, h * split.chunk(), (h + 1) * split.chunk()), spec.layout,
                          split.chunk_of(h) * split.chunk(), spec.rope_base));
  return concat(halves, dim);
}

}  // namespace ag::detail
