// State-space attention (Mamba-2's SSD), one of the functions behind
// attention() (core/ops.h). Per batch entry and query head, with Δ the step
// (SsdAttention::dt), λ_r = −exp(a_log)·Δ_r the log decay and L_ij = exp(σ(i, j)),
// σ(i, j) = Σ_{r=j+1..i} λ_r:
//   y_i = Σ_{j≤i} L_ij (q_i·k_j) Δ_j v_j,      z_i = y_i + D·v_i
// y is one op (the decayed product, chunked: core/cpu/ssd.cpp, cuda/ssd.cu);
// λ and the skip are ops around it, whose own backward gives a_log's and D's
// gradients and the skip's share of dv.
//
// Backward of y (docs/backprop.md, "State-space attention"). With G_ij = dy_i·v_j,
//   dq_i = Σ_{j≤i} L_ij Δ_j G_ij k_j                      causal, like the forward
//   U_j  = Σ_{i≥j} L_ij (k_j·q_i) dy_i,   dv_j = Δ_j U_j   anticausal
//   W_j  = Σ_{i≥j} L_ij (v_j·dy_i) q_i,   dk_j = Δ_j W_j   anticausal
//   dΔ_j = Σ_{i≥j} L_ij (q_i·k_j) G_ij = v_j·U_j           (through Δ_j's factor)
//   dλ_r = Σ_{t≥r} (dy_t·y_t − Δ_t dΔ_t)                    (through L: ∂L_ij/∂λ_r = L_ij for j < r ≤ i)
// so the backward is three more decayed products and one suffix sum; the
// products recompute their chunk states instead of saving them. With grouped
// kv heads a query head reads its kv head in place, and a kv head's dk, dv sum
// the group's Δ_j W_j, Δ_j U_j. Saved: q, k, v, Δ, λ and y.
#include <vector>

#include "core/context_parallel.h"
#include "core/ops/attention_functions.h"
#include "dist/communicator.h"

namespace ag {

namespace {

using detail::head_strides;
using detail::heads_first;
using detail::heads_of;
using detail::positions_of;

// Δ and λ, [B, T, H] (BTHD) or [B, H, T] (BHTD), as rows of width 1.
HeadStrides decay_strides(const Tensor& t, AttentionLayout layout) {
  return layout == AttentionLayout::BTHD ? HeadStrides{t.size(1) * t.size(2), 1, t.size(2)}
                                         : HeadStrides{t.size(1) * t.size(2), t.size(2), 1};
}

// A per-head vector [H] shaped to broadcast over Δ's layout, or over a [.., H, .., w] operand's.
Tensor per_decay_head(const Tensor& x, AttentionLayout layout) {
  return x.reshape(layout == AttentionLayout::BTHD ? Shape{1, 1, x.size(0)} : Shape{1, x.size(0), 1});
}
Tensor per_head(const Tensor& x, AttentionLayout layout) {
  return x.reshape(layout == AttentionLayout::BTHD ? Shape{1, 1, x.size(0), 1} : Shape{1, x.size(0), 1, 1});
}
// Δ [.., H] as [.., H, 1], to scale each row of an operand.
Tensor per_row(const Tensor& dt) { return dt.reshape({dt.size(0), dt.size(1), dt.size(2), 1}); }

// Each kv head repeated for the H query heads that read it (a copy; its backward sums the group).
Tensor query_heads(const Tensor& t, int64_t H, AttentionLayout layout) {
  if (layout == AttentionLayout::BHTD) return detail::repeat_kv_heads(t, H);
  const int64_t B = t.size(0), T = t.size(1), Hkv = t.size(2), w = t.size(3);
  return Hkv == H ? t : expand(t.reshape({B, T, Hkv, 1, w}), {B, T, Hkv, H / Hkv, w}).reshape({B, T, H, w});
}
// A kv head's share of per-query-head rows: the sum over its group.
Tensor kv_head_sum(const Tensor& t, int64_t Hkv, AttentionLayout layout) {
  const int64_t B = t.size(0), H = heads_of(t, layout), T = positions_of(t, layout), w = t.size(3);
  if (H == Hkv) return t;
  return layout == AttentionLayout::BTHD ? sum(t.reshape({B, T, Hkv, H / Hkv, w}), 3)
                                         : sum(t.reshape({B, Hkv, H / Hkv, T, w}), 2);
}

struct ProductOptions {
  PrefixDirection direction;
  bool weighted;
  int64_t chunk;
  AttentionLayout layout;
};

// Out_i = Σ_{j visible} exp(σ(i, j)) (A_i·B_j) [Δ_j] C_j with Δ's heads (DecayedProduct); `out` given
// (its layout and strides its own) or allocated in the operands' layout.
DecayedProduct describe_product(const Tensor& a, const Tensor& b, const Tensor& c, const Tensor& dt,
                                const ProductOptions& options) {
  const AttentionLayout layout = options.layout;
  const int64_t H = layout == AttentionLayout::BTHD ? dt.size(2) : dt.size(1);
  return {.direction = options.direction, .weighted = options.weighted, .chunk = options.chunk,
          .batch = a.size(0), .T = positions_of(a, layout), .r = a.size(3), .e = c.size(3), .heads = H,
          .a_heads = heads_of(a, layout), .b_heads = heads_of(b, layout), .c_heads = heads_of(c, layout),
          .a = head_strides(a, layout), .b = head_strides(b, layout), .c = head_strides(c, layout),
          .out = {}, .decay = decay_strides(dt, layout)};
}

Tensor decayed_product(const Tensor& a, const Tensor& b, const Tensor& c, const Tensor& dt, const Tensor& log_a,
                       const ProductOptions& options, Tensor* state = nullptr) {
  DecayedProduct how = describe_product(a, b, c, dt, options);
  const Shape shape = options.layout == AttentionLayout::BTHD ? Shape{how.batch, how.T, how.heads, how.e}
                                                              : Shape{how.batch, how.heads, how.T, how.e};
  Tensor out = detail::empty_as(shape, c);
  how.out = head_strides(out, options.layout);
  kernel::ssd_product(a, b, c, dt, log_a, how, out, state);
  return out;
}

// y = Σ_{j≤i} L_ij (q_i·k_j) Δ_j v_j as one op of the graph, with its backward (above).
Tensor decayed_attention(const Tensor& q, const Tensor& k, const Tensor& v, const Tensor& dt, const Tensor& log_a,
                         const SsdAttention& ssd, const AttentionSpec& spec) {
  const ProductOptions forward{PrefixDirection::Causal, true, ssd.chunk, spec.layout};
  Tensor Y;
  {
    NoGradGuard no_grad;  // the kernel is this op's forward, not an op of the graph
    Y = decayed_product(q.detach(), k.detach(), v.detach(), dt.detach(), log_a.detach(), forward);
  }
  return record("ssd_attention", {q, k, v, dt, log_a}, Y,
                [Q = q.detach(), K = k.detach(), V = v.detach(), Dt = dt.detach(), La = log_a.detach(),
                 Y = Y.detach(), forward](const Tensor& dY) -> Gradients {
                  const AttentionLayout layout = forward.layout;
                  const ProductOptions reverse{PrefixDirection::Anticausal, false, forward.chunk, layout};
                  const int64_t H = heads_of(Q, layout), Hkv = heads_of(K, layout);
                  const Tensor dQ = decayed_product(dY, V, K, Dt, La, forward);  // Σ_{j≤i} L_ij Δ_j (dy_i·v_j) k_j
                  const Tensor U = decayed_product(K, Q, dY, Dt, La, reverse);    // Σ_{i≥j} L_ij (k_j·q_i) dy_i
                  const Tensor W = decayed_product(V, dY, Q, Dt, La, reverse);    // Σ_{i≥j} L_ij (v_j·dy_i) q_i
                  const Tensor dDt = sum(query_heads(V, H, layout) * U, 3);      // v_j·U_j
                  Tensor dLa = detail::empty_like(La);
                  DecayedProduct how = describe_product(Q, K, V, Dt, forward);
                  how.out = head_strides(Y, layout);
                  kernel::ssd_decay_gradient(dY, Y, Dt, dDt, how, dLa);
                  return {dQ, kv_head_sum(W * per_row(Dt), Hkv, layout), kv_head_sum(U * per_row(Dt), Hkv, layout),
                          dDt, dLa};
                });
}

// y for this process's rows of a sequence split over spec.context (the zigzag split, chunks of C
// positions; docs/backprop.md, "Ring attention"). For query i of chunk c, which starts at s:
//   y_i = Σ_{s≤j≤i} L_ij (q_i·k_j) Δ_j v_j  +  exp(Σ_{r=s..i} λ_r) q_iᵀ E_c
// the chunk's own decayed product, plus its read of E_c, every earlier position's state decayed to
// s − 1. With each chunk's own state S_c = Σ_{j∈c} exp(Σ_{r=j+1..e} λ_r) Δ_j k_j v_jᵀ (e its last
// position, [B, H, d, d_v] per query head) and its decay Λ_c = exp(Σ_{r∈c} λ_r), E runs
// E_0 = 0, E_{c+1} = Λ_c E_c + S_c over the 2P chunks' (S_c, log Λ_c), gathered once. All ops:
// autograd gives the backward, the gathered states' gradients summed over the group.
// Key j's exponent ρ_j = Σ_{r=j+1..e} λ_r is a reverse running sum of its own terms, not the
// difference ℓ_e − ℓ_j of prefix sums ℓ_i = Σ_{r=s..i} λ_r: over thousands of positions |ℓ_e| reaches
// hundreds, and the difference carries its rounding, 2^-24·|ℓ_e| in float32, into the exponents near 0
// that matter (issue 47; docs/backprop.md, "State-space attention split the same way"). Backward, by
// autograd through the ops: reverse_cumsum's adjoint is cumsum, dλ_r += Σ_{j<r} dρ_j; cumsum's is
// reverse_cumsum, dλ_r += Σ_{i≥r} dℓ_i.
Tensor context_parallel_product(const Tensor& q, const Tensor& k, const Tensor& v, const Tensor& dt,
                                const Tensor& log_a, const SsdAttention& ssd, const AttentionSpec& spec) {
  dist::Communicator& group = *spec.context;
  const AttentionLayout layout = spec.layout;
  const int64_t dim = layout == AttentionLayout::BTHD ? 1 : 2;  // positions, in q, k, v and in Δ, λ
  const int64_t B = q.size(0), H = heads_of(q, layout);
  const ZigzagSplit split(positions_of(q, layout) * group.size(), group.size(), group.rank());
  const int64_t C = split.chunk();
  const auto half = [&](const Tensor& x, int64_t h) { return slice(x, dim, h * C, (h + 1) * C); };
  std::vector<Tensor> own, states, log_decays, rising;
  for (int64_t h = 0; h < 2; ++h) {
    own.push_back(decayed_attention(half(q, h), half(k, h), half(v, h), half(dt, h), half(log_a, h), ssd, spec));
    const Tensor lambda = half(log_a, h);
    const Tensor cum = cumsum(lambda, dim);          // Σ_{r=s..i} λ_r
    const Tensor total = slice(cum, dim, C - 1, C);  // log Λ_c
    rising.push_back(exp(cum));
    // Σ_{r=j+1..e} λ_r: the running sum from the back of λ_{s+1..e}, and 0 for j = e.
    const Tensor to_end = concat({reverse_cumsum(slice(lambda, dim, 1, C), dim), slice(lambda, dim, 0, 1) * 0.0}, dim);
    const Tensor weighted_k = query_heads(half(k, h), H, layout) * per_row(exp(to_end) * half(dt, h));
    const Tensor S = matmul(transpose(heads_first(weighted_k, layout), 2, 3),
                            heads_first(query_heads(half(v, h), H, layout), layout));  // [B, H, d, d_v]
    states.push_back(S.reshape({1, B, H, S.size(2), S.size(3)}));
    log_decays.push_back(total.reshape({1, B, H, 1, 1}));
  }
  const Tensor all_states = gather_chunks(concat(states, 0), group);
  const Tensor all_decays = exp(gather_chunks(concat(log_decays, 0), group));
  const auto chunk = [](const Tensor& all, int64_t c) { return slice(all, 0, c, c + 1).reshape(Shape(all.shape().begin() + 1, all.shape().end())); };
  std::vector<Tensor> y;
  for (int64_t h = 0; h < 2; ++h) {
    const int64_t c = split.chunk_of(h);
    if (c == 0) {
      y.push_back(own[h]);
      continue;
    }
    Tensor E = chunk(all_states, 0);
    for (int64_t before = 1; before < c; ++before) E = E * chunk(all_decays, before) + chunk(all_states, before);
    const Tensor read = heads_first(matmul(heads_first(half(q, h), layout), E), layout);  // q_iᵀ E_c
    y.push_back(own[h] + read * per_row(rising[h]));
  }
  return concat(y, dim);
}

// A [B, Hq, T, T] with Z = A V, for inspection: the decayed product against the identity gives
// row i's L_ij (q_i·k_j) Δ_j in column j; D joins on the diagonal.
Tensor implied_weights(const Tensor& q, const Tensor& k, const Tensor& dt, const Tensor& log_a, const Tensor& d_skip,
                       const SsdAttention& ssd, const AttentionSpec& spec) {
  NoGradGuard no_grad;
  const AttentionLayout layout = spec.layout;
  const int64_t B = q.size(0), H = heads_of(q, layout), T = positions_of(q, layout);
  std::vector<double> identity(T * T, 0.0);
  for (int64_t t = 0; t < T; ++t) identity[t * T + t] = 1;
  const Tensor eye = Tensor::from_vector(identity, {T, T}, q.dtype()).to(q.device());
  DecayedProduct how = describe_product(q, k, eye.reshape({1, T, 1, T}), dt,
                                        {PrefixDirection::Causal, true, ssd.chunk, layout});
  how.c = {0, 0, T};  // every batch entry and head reads the one identity
  how.c_heads = 1;
  Tensor A = detail::empty_as({B, H, T, T}, q);
  how.out = head_strides(A, AttentionLayout::BHTD);
  kernel::ssd_product(q, k, eye, dt, log_a, how, A, nullptr);
  return A + eye * per_head(d_skip, AttentionLayout::BHTD);
}

void check_parameters(const Tensor& q, const Tensor& k, const SsdAttention& ssd, const AttentionSpec& spec) {
  const auto where = [&] { return "attention (ssd): q " + to_string(q.shape()) + ", k " + to_string(k.shape()); };
  AG_CHECK(spec.causal, where() << ": ssd attention is causal (its state runs forward in time); it cannot be non-causal");
  AG_CHECK(spec.cache || positions_of(q, spec.layout) == positions_of(k, spec.layout),
           where() << ": ssd attention needs as many queries as keys (a cache for decoding)");
  AG_CHECK(ssd.chunk >= 1, where() << ": chunk " << ssd.chunk << " must be positive");
  const int64_t B = q.size(0), H = heads_of(q, spec.layout), T = positions_of(q, spec.layout);
  const Shape dt_shape = spec.layout == AttentionLayout::BTHD ? Shape{B, T, H} : Shape{B, H, T};
  AG_CHECK(ssd.dt.defined(), where() << ": dt (Δ " << to_string(dt_shape) << ") is missing");
  AG_CHECK(ssd.a_log.defined(), where() << ": a_log [" << H << "] is missing");
  AG_CHECK(ssd.d_skip.defined(), where() << ": d_skip [" << H << "] is missing");
  AG_CHECK(ssd.dt.shape() == dt_shape, where() << ": dt " << describe(ssd.dt) << " is not " << to_string(dt_shape));
  AG_CHECK(ssd.a_log.shape() == Shape{H}, where() << ": a_log " << describe(ssd.a_log) << " is not [" << H << "]");
  AG_CHECK(ssd.d_skip.shape() == Shape{H}, where() << ": d_skip " << describe(ssd.d_skip) << " is not [" << H << "]");
  detail::check_compatible("attention (ssd)", {&q, &ssd.dt, &ssd.a_log, &ssd.d_skip});
}

}  // namespace

namespace detail {

Tensor ssd_attention(const Tensor& q, const Tensor& k, const Tensor& v, const SsdAttention& ssd, const AttentionSpec& spec,
                     AttentionInternals* internals) {
  check_parameters(q, k, ssd, spec);
  const AttentionLayout layout = spec.layout;
  const int64_t H = heads_of(q, layout);
  const Tensor log_a = -(exp(per_decay_head(ssd.a_log, layout)) * ssd.dt);  // λ = −exp(a_log)·Δ
  const Tensor skip = query_heads(v, H, layout) * per_head(ssd.d_skip, layout);  // D·v_i
  if (spec.cache) {
    // Decode: the state holds every earlier position, decayed to the last; the new ones join it.
    LayerKVCache& cache = *spec.cache;
    const int64_t B = q.size(0), d = q.size(3);
    const Shape state_shape{B, H, d, v.size(3)};
    if (!cache.state.defined()) cache.state = Tensor::zeros(state_shape, v.dtype(), v.device());
    AG_CHECK(cache.state.shape() == state_shape && cache.state.dtype() == v.dtype() && cache.state.device() == v.device(),
             "attention (ssd): the cache's state " << describe(cache.state) << " is not " << to_string(state_shape)
                                                   << " in the new keys' dtype and device");
    return decayed_product(q, k, v, ssd.dt, log_a, {PrefixDirection::Causal, true, ssd.chunk, layout},
                           &cache.state) +
           skip;
  }
  if (spec.context) return context_parallel_product(q, k, v, ssd.dt, log_a, ssd, spec) + skip;  // its weights would be T×T across processes
  if (internals) internals->probabilities = implied_weights(q, k, ssd.dt, log_a, ssd.d_skip, ssd, spec);
  return decayed_attention(q, k, v, ssd.dt, log_a, ssd, spec) + skip;
}

}  // namespace detail

}  // namespace ag
