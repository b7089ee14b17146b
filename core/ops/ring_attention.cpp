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
// (under the causal mask, c_b > c_a). The parts (Z_ab, L_ab) merge by the
// log-sum-exp rule (math::merge_softmax_parts, the attention_merge kernel) into
// each query half's (Z_a, L_a): the attention over every key.
//
// Backward: with the merged L and D = rowsum(dZ ∘ Z) of the merged Z, each
// pair's
//   P = exp(S − L),  dP = dZ Vᵀ,  dS = P ∘ (dP − D)
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

// A copy of what one collective's process group shares of the problem.
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
};

// D = rowsum(dZ ∘ Z) [B, Hq, chunk] of one query half.
Tensor row_dot(const Tensor& dZ, const Tensor& Z, AttentionLayout layout) {
  const Tensor D = sum(mul(dZ, Z), 3);
  return layout == AttentionLayout::BTHD ? transpose(D, 1, 2) : D;
}

}  // namespace

Tensor ring_attention(const Tensor& q, const Tensor& k, const Tensor& v, const AttentionShape& whole,
                      const AttentionSpec& spec, AttentionInternals* internals) {
  dist::Communicator& group = *spec.context;
  const int64_t P = group.size(), rank = group.rank(), T_local = positions_of(q, spec.layout);
  AG_CHECK(!spec.cache && !spec.q_offset && !spec.kv_length,
           "attention: context parallel attention takes one sequence's rows, without a KV cache, q_offset or kv_length");
  AG_CHECK(positions_of(k, spec.layout) == T_local,
           "attention: context parallel attention needs this process's queries and keys at the same positions ("
               << T_local << " queries, " << positions_of(k, spec.layout) << " keys)");
  const ZigzagSplit split(T_local * P, P, rank);  // checks that the rows are two equal chunks
  const int64_t chunk = split.chunk();
  Ring ring{.group = &group, .P = P, .rank = rank, .chunk = chunk, .layout = spec.layout, .pair = whole};
  ring.pair.Tq = ring.pair.Tk = chunk;
  // Each half and each block part is its own contiguous tensor: strides for chunk rows.
  ring.pair.q = ring.half_strides(q);
  ring.pair.kv = ring.half_strides(k);

  std::array<Tensor, 2> Q, Z, L;
  std::optional<KvBlock> own;
  {
    const NoGradGuard no_grad;  // the pieces are the op's own: one autograd node below
    Q = {ring.half(q, 0), ring.half(q, 1)};
    own = ring.pack(k, v);
    const Shape lse_shape{whole.B, whole.Hq, chunk};
    for (int64_t a = 0; a < 2; ++a) {
      Z[a] = Tensor::zeros(Q[a].shape(), q.dtype(), q.device());
      L[a] = Tensor::full(lse_shape, math::kInf<double>, DType::Float64, q.device());  // no key yet
    }
    // `own` is saved for the backward: the ring alternates between two other buffers.
    std::array<KvBlock, 2> arriving{KvBlock(own->part_shape, k), KvBlock(own->part_shape, k)};
    const KvBlock* block = &*own;
    for (int64_t step = 0; step < P; ++step) {
      dist::Exchange transfer;
      if (step + 1 < P)
        transfer = group.start_exchange(block->buffer, ring.next(), arriving[step % 2].buffer, ring.previous());
      for (int64_t a = 0; a < 2; ++a)
        for (int64_t b = 0; b < 2; ++b)
          if (const std::optional<AttentionShape> shape = ring.pair_shape(a, ring.source(step), b)) {
            Tensor Z_part = empty_like(Q[a]), L_part = empty_like(L[a]);
            kernel::flash_attention(Q[a], block->k(b), block->v(b), *shape, Z_part, L_part);
            kernel::attention_merge(Z[a], L[a], Z_part, L_part, *shape);
          }
      transfer.wait();
      block = &arriving[step % 2];
    }
  }
  Tensor out;
  {
    const NoGradGuard no_grad;
    out = concat({Z[0], Z[1]}, positions_dim(spec.layout));
    if (internals) internals->log_sum_exp = concat({L[0], L[1]}, 2);
  }

  // The group must outlive the backward (it runs the ring again).
  return record("attention", {q, k, v}, out, [ring, Q, Z, L, own = *own](const Tensor& dZ) -> Gradients {
    dist::Communicator& group = *ring.group;
    std::array<Tensor, 2> dZ_half, D, dQ;
    for (int64_t a = 0; a < 2; ++a) {
      dZ_half[a] = ring.half(dZ, a);
      D[a] = row_dot(dZ_half[a], Z[a], ring.layout);
      dQ[a] = Tensor::zeros(Q[a].shape(), Q[a].dtype(), Q[a].device());
    }
    std::array<KvBlock, 2> arriving{KvBlock(own.part_shape, own.buffer), KvBlock(own.part_shape, own.buffer)};
    // The gradient of the block at hand (summed here and before), and the one arriving for the next.
    std::array<KvBlock, 2> summed{KvBlock(own.part_shape, own.buffer), KvBlock(own.part_shape, own.buffer)};
    KvBlock arriving_gradient(own.part_shape, own.buffer);
    const KvBlock* block = &own;
    dist::Exchange gradient_transfer;
    for (int64_t step = 0; step < ring.P; ++step) {
      dist::Exchange transfer;
      if (step + 1 < ring.P)
        transfer = group.start_exchange(block->buffer, ring.next(), arriving[step % 2].buffer, ring.previous());
      KvBlock& gradient = summed[step % 2];  // its send, two steps ago, was waited for a step ago
      kernel::fill(gradient.buffer, 0.0);
      for (int64_t a = 0; a < 2; ++a)
        for (int64_t b = 0; b < 2; ++b)
          if (const std::optional<AttentionShape> shape = ring.pair_shape(a, ring.source(step), b)) {
            Tensor dQ_part = empty_like(Q[a]), dK_part = empty_like(block->k(b)), dV_part = empty_like(block->v(b));
            kernel::flash_attention_backward(Q[a], block->k(b), block->v(b), L[a], dZ_half[a], D[a], *shape, dQ_part,
                                             dK_part, dV_part);
            Tensor dK_sum = gradient.k(b), dV_sum = gradient.v(b);
            kernel::binary(kernel::BinaryOp::Add, dQ[a], dQ_part, dQ[a]);
            kernel::binary(kernel::BinaryOp::Add, dK_sum, dK_part, dK_sum);
            kernel::binary(kernel::BinaryOp::Add, dV_sum, dV_part, dV_sum);
          }
      if (step > 0) {  // what the processes before this one summed for this block
        gradient_transfer.wait();
        kernel::binary(kernel::BinaryOp::Add, gradient.buffer, arriving_gradient.buffer, gradient.buffer);
      }
      gradient_transfer = group.start_exchange(gradient.buffer, ring.next(), arriving_gradient.buffer, ring.previous());
      transfer.wait();
      block = &arriving[step % 2];
    }
    gradient_transfer.wait();  // the last hop: this process's own block, summed over the ring
    return {concat({dQ[0], dQ[1]}, positions_dim(ring.layout)), ring.unpack(arriving_gradient, 0),
            ring.unpack(arriving_gradient, 2)};
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
