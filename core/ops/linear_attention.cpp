// Linear attention, one of the functions behind attention() (core/ops.h): the
// feature maps φ as one op, and the normalised causal (or full) product as
// another, each with its backward. Per batch entry and query head, with
// a_ij = φ(q_i)·φ(k_j) over the visible j:
//   z_i = Σ_j a_ij v_j / den_i,     den_i = Σ_j a_ij + ε
//
// Backward (docs/backprop.md, "Linear attention"). With g_i = dz_i / den_i,
//   ∂L/∂a_ij = g_i·v_j − g_i·z_i = g'_i·v'_j,   v'_j = [v_j, 1],  g'_i = [g_i, −g_i·z_i]
// so every gradient is again a sum of the product's shape, Σ_j (A_i·B_j) C_j:
//   dφ(q_i) = Σ_{j≤i} (g'_i·v'_j) φ(k_j)      forward prefix sums
//   dφ(k_j) = Σ_{i≥j} (v'_j·g'_i) φ(q_i)      reverse suffix sums
//   dv_j    = Σ_{i≥j} (φ(k_j)·φ(q_i)) g_i     reverse suffix sums
// and the forward is one too: [num_i, den_i − ε] = Σ_{j≤i} (φ(q_i)·φ(k_j)) v'_j.
// With grouped kv heads a query head reads its kv head's φ(k), v' in place, and
// a kv head's dφ(k), dv sum over the query heads that read it (the kernel's
// head mapping, PrefixProduct). One kernel (linear_attention_product, chunked:
// core/cpu/linear_attention.cpp, cuda/linear_attention.cu) computes all four
// in either layout, in place; the backward recomputes its running states
// instead of saving one per chunk. Saved: φ(Q), φ(K), V', Z and den.
//
// Context parallelism (spec.context; docs/backprop.md, "Ring attention"): each
// process holds two chunks of the sequence (the zigzag split), and a query
// reads, besides its own chunk's causal product, the state of every earlier
// chunk, S_c = Σ_{j ∈ c} φ(k_j) v'_jᵀ: the chunks' states are summed over the
// group once (gather_chunks), and the rest is the one-process formulas as ops.
#include <cmath>
#include <vector>

#include "core/context_parallel.h"
#include "core/ops/attention_functions.h"
#include "core/random.h"
#include "dist/communicator.h"

namespace ag {

namespace {

using detail::head_strides;
using detail::heads_first;
using detail::heads_of;
using detail::positions_of;

// Out_i = Σ_{j visible from i} (A_i·B_j) C_j per batch entry and head of A (Out: A's heads, C's width).
Tensor prefix_product(const Tensor& a, const Tensor& b, const Tensor& c, PrefixDirection direction, int64_t chunk,
                      AttentionLayout layout) {
  Shape shape = a.shape();
  shape[3] = c.size(3);
  Tensor out = detail::empty_as(shape, c);
  kernel::linear_attention_product(a, b, c,
                                   {.direction = direction, .chunk = chunk, .batch = a.size(0),
                                    .T = positions_of(a, layout), .r = a.size(3), .e = c.size(3),
                                    .out_heads = heads_of(a, layout), .in_heads = heads_of(b, layout),
                                    .a = head_strides(a, layout), .b = head_strides(b, layout),
                                    .c = head_strides(c, layout), .out = head_strides(out, layout)},
                                   out);
  return out;
}

// [.., w] -> [.., w + 1] with `last` as the extra column.
Tensor append_column(const Tensor& x, const Tensor& last) { return concat({x, last}, 3); }
Tensor append_ones(const Tensor& x) {
  Shape shape = x.shape();
  shape[3] = 1;
  return append_column(x, Tensor::ones(shape, x.dtype(), x.device()));
}

// z = num / den from U = [num, den − ε] (the product against v' = [v, 1]), and den.
struct Normalized {
  Tensor Z, den;
};
Normalized normalize(const Tensor& U) {
  const int64_t d = U.size(3) - 1;
  const Tensor den = slice(U, 3, d, d + 1) + math::kLinearAttentionEps;
  return {slice(U, 3, 0, d) / den, den};
}

// ∂L/∂U = [dU_num, dU_den] for U = [num_i, den_i − ε] = Σ_{j visible} (φ(q_i)·φ(k_j)) v'_j: the
// gradients of φ(Q), φ(K) and V, each a product of U's shape (the top of the file).
Gradients product_gradients(const Tensor& Pq, const Tensor& Pk, const Tensor& v_ones, const Tensor& dU,
                            PrefixDirection forward, PrefixDirection reverse, int64_t chunk, AttentionLayout layout) {
  const int64_t d = v_ones.size(3) - 1;
  const Tensor dPq = prefix_product(dU, v_ones, Pk, forward, chunk, layout);  // Σ_{j≤i} (dU_i·v'_j) φ(k_j)
  const Tensor dPk = prefix_product(v_ones, dU, Pq, reverse, chunk, layout);  // Σ_{i≥j} (v'_j·dU_i) φ(q_i)
  // num_i = Σ_j a_ij v_j  →  dv_j = Σ_{i≥j} a_ij dU_num_i (v's column of ones has no gradient)
  const Tensor dV = prefix_product(Pk, Pq, slice(dU, 3, 0, d), reverse, chunk, layout);
  return {dPq, dPk, dV};
}

// Z in q's layout from φ(Q) [.., Hq, r], φ(K) [.., Hkv, r] and V [.., Hkv, d].
Tensor normalized_product(const Tensor& phi_q, const Tensor& phi_k, const Tensor& v, const LinearAttention& linear,
                          const AttentionSpec& spec) {
  const PrefixDirection forward = spec.causal ? PrefixDirection::Causal : PrefixDirection::All;
  const PrefixDirection reverse = spec.causal ? PrefixDirection::Anticausal : PrefixDirection::All;
  const AttentionLayout layout = spec.layout;
  const int64_t chunk = linear.chunk;
  const Tensor Pq = phi_q.detach(), Pk = phi_k.detach();
  Tensor v_ones;
  Normalized out;
  {
    NoGradGuard no_grad;  // the pieces below are this op's forward, not ops of the graph
    v_ones = append_ones(v.detach());
    out = normalize(prefix_product(Pq, Pk, v_ones, forward, chunk, layout));  // [num_i, den_i − ε] = Σ_j a_ij v'_j
  }
  return record("linear_attention", {phi_q, phi_k, v}, out.Z,
                [Pq, Pk, v_ones, den = out.den, Z = out.Z.detach(), forward, reverse, chunk,
                 layout](const Tensor& dZ) -> Gradients {
                  // z_i = num_i / den_i  →  g_i = dz_i / den_i,  and ∂L/∂den_i = −g_i·z_i
                  const Tensor g = dZ / den;
                  const Tensor g_ones = append_column(g, -sum(g * Z, 3, true));  // g'_i = [g_i, −g_i·z_i]
                  // a_ij = φ(q_i)·φ(k_j)  →  ∂L/∂a_ij = g'_i·v'_j
                  return product_gradients(Pq, Pk, v_ones, g_ones, forward, reverse, chunk, layout);
                });
}

// U = [num_i, den_i − ε] = Σ_{j ≤ i} (φ(q_i)·φ(k_j)) v'_j within one chunk of positions, as an op.
Tensor causal_product(const Tensor& phi_q, const Tensor& phi_k, const Tensor& v, int64_t chunk, AttentionLayout layout) {
  const Tensor Pq = phi_q.detach(), Pk = phi_k.detach();
  Tensor v_ones, U;
  {
    NoGradGuard no_grad;
    v_ones = append_ones(v.detach());
    U = prefix_product(Pq, Pk, v_ones, PrefixDirection::Causal, chunk, layout);
  }
  return record("linear_attention", {phi_q, phi_k, v}, U, [Pq, Pk, v_ones, chunk, layout](const Tensor& dU) -> Gradients {
    return product_gradients(Pq, Pk, v_ones, dU, PrefixDirection::Causal, PrefixDirection::Anticausal, chunk, layout);
  });
}

// φ(q_i)ᵀ S for every query of x [.., Hq, r] from its kv head's state S [B, Hkv, r, w]: the query heads
// grouped by kv head, [B, Hkv, group·T, r] · [B, Hkv, r, w], back in x's layout.
Tensor read_state(const Tensor& phi_q, const Tensor& state, AttentionLayout layout) {
  const int64_t B = phi_q.size(0), Hq = heads_of(phi_q, layout), T = positions_of(phi_q, layout);
  const int64_t Hkv = state.size(1), r = phi_q.size(3), w = state.size(3);
  return heads_first(
      matmul(heads_first(phi_q, layout).reshape({B, Hkv, (Hq / Hkv) * T, r}), state).reshape({B, Hq, T, w}), layout);
}

// Z in q's layout for this process's rows of a sequence split over spec.context: per half (one chunk
// of positions), the causal product within the chunk plus each query's read of the earlier chunks'
// states (without `causal`: of every chunk's, and nothing within), normalised as one process does.
Tensor context_parallel_product(const Tensor& phi_q, const Tensor& phi_k, const Tensor& v, const LinearAttention& linear,
                                const AttentionSpec& spec) {
  dist::Communicator& group = *spec.context;
  const AttentionLayout layout = spec.layout;
  const int64_t dim = layout == AttentionLayout::BTHD ? 1 : 2, T_local = positions_of(phi_q, layout);
  AG_CHECK(positions_of(phi_k, layout) == T_local, "attention (linear): context parallel attention needs this process's "
                                                   "queries and keys at the same positions");
  const ZigzagSplit split(T_local * group.size(), group.size(), group.rank());
  const int64_t c = split.chunk();
  const auto half = [&](const Tensor& x, int64_t h) { return slice(x, dim, h * c, (h + 1) * c); };
  std::vector<Tensor> states;
  for (int64_t h = 0; h < 2; ++h) {  // S = Σ_j φ(k_j) v'_jᵀ [B, Hkv, r, d + 1] of the half's chunk
    const Tensor S = matmul(transpose(heads_first(half(phi_k, h), layout), 2, 3), heads_first(append_ones(half(v, h)), layout));
    Shape one{1};
    for (int64_t size : S.shape()) one.push_back(size);
    states.push_back(S.reshape(one));
  }
  const Tensor all = gather_chunks(concat(states, 0), group);  // [2P, B, Hkv, r, d + 1]
  std::vector<Tensor> Z;
  for (int64_t h = 0; h < 2; ++h) {
    const int64_t read = spec.causal ? split.chunk_of(h) : 2 * split.P;  // the chunks before it (or all of them)
    Tensor U = read == 0 ? Tensor() : read_state(half(phi_q, h), sum(slice(all, 0, 0, read), 0), layout);
    if (spec.causal) {
      const Tensor own = causal_product(half(phi_q, h), half(phi_k, h), half(v, h), linear.chunk, layout);
      U = U.defined() ? U + own : own;
    }
    Z.push_back(normalize(U).Z);
  }
  return concat(Z, dim);
}

// A [B, Hq, T, T] with Z = A V: a_ij / Σ_{j' visible} a_ij', for inspection.
Tensor implied_weights(const Tensor& phi_q, const Tensor& phi_k, const AttentionSpec& spec) {
  NoGradGuard no_grad;
  const Tensor Pq = heads_first(phi_q, spec.layout);
  const Tensor Pk = detail::repeat_kv_heads(heads_first(phi_k, spec.layout), Pq.size(1));
  Tensor scores = matmul(Pq, transpose(Pk, 2, 3));  // φ(q_i)·φ(k_j)
  if (spec.causal)  // e^M: 1 where j ≤ i, 0 above (e^−∞ = 0)
    scores = scores * exp(causal_mask(Pq.size(2), scores.dtype(), scores.device()));
  return scores / (sum(scores, 3, true) + math::kLinearAttentionEps);
}

// Decode: the cache's state Σ_j φ(k_j) v'_jᵀ [B, Hkv, r, d + 1] holds every
// position before these; each new query reads it (its kv head's), adds the new
// positions up to itself (the causal product among them), and the new
// positions join the state.
Tensor decode(const Tensor& phi_q, const Tensor& phi_k, const Tensor& v, const LinearAttention& linear,
              const AttentionSpec& spec, LayerKVCache& cache) {
  const AttentionLayout layout = spec.layout;
  const int64_t B = v.size(0), Hq = heads_of(phi_q, layout), Hkv = heads_of(v, layout), r = phi_k.size(3);
  const int64_t T_new = positions_of(v, layout), d = v.size(3), group = Hq / Hkv;
  const Shape state_shape{B, Hkv, r, d + 1};
  if (!cache.state.defined()) cache.state = Tensor::zeros(state_shape, v.dtype(), v.device());
  AG_CHECK(cache.state.shape() == state_shape && cache.state.dtype() == v.dtype() && cache.state.device() == v.device(),
           "attention: the cache's linear state " << describe(cache.state) << " is not " << to_string(state_shape)
                                                  << " in the new keys' dtype and device");
  const Tensor v_ones = append_ones(v);
  // φ(q_i)ᵀ state: query heads grouped by kv head, [B, Hkv, group·T_new, r] · [B, Hkv, r, d + 1]
  const Tensor earlier = heads_first(
      matmul(heads_first(phi_q, layout).reshape({B, Hkv, group * T_new, r}), cache.state).reshape({B, Hq, T_new, d + 1}),
      layout);
  const Tensor U = earlier + prefix_product(phi_q, phi_k, v_ones, PrefixDirection::Causal, linear.chunk, layout);
  cache.state = cache.state + matmul(transpose(heads_first(phi_k, layout), 2, 3), heads_first(v_ones, layout));
  return normalize(U).Z;
}

void check_omega(const char* op, const Tensor& x, FeatureMap map, const Tensor& omega) {
  if (map == FeatureMap::Elu1) return;
  AG_CHECK(omega.defined() && omega.dim() == 2 && omega.size(1) == x.size(-1) && omega.size(0) > 0,
           op << ": favor needs omega [m, " << x.size(-1) << "], got "
              << (omega.defined() ? to_string(omega.shape()) : std::string("none")));
  detail::check_compatible(op, {&x, &omega});
}

}  // namespace

Tensor attention_features(const Tensor& x, FeatureMap map, const Tensor& omega) {
  detail::check_floating("attention_features", x);
  AG_CHECK(x.dim() >= 1 && x.size(-1) > 0, "attention_features: x " << describe(x) << " has no feature dim");
  check_omega("attention_features", x, map, omega);
  Shape shape = x.shape();
  shape.back() = map == FeatureMap::Elu1 ? x.size(-1) : omega.size(0);
  Tensor phi = detail::empty_as(shape, x);
  kernel::attention_features(x, omega, map, phi);
  // elu1: φ(x) = elu(x) + 1   →  dx = dφ · (1 if x > 0 else eˣ)
  // favor: φ_r = exp(ω_r·x' − |x'|²/2)/√m, x' = s·x  →  dx = s · Σ_r dφ_r φ_r (ω_r − x')
  return record("attention_features", {x}, phi,
                [X = x.detach(), omega, map, Phi = phi.detach()](const Tensor& dPhi) -> Gradients {
                  Tensor dX = detail::empty_like(X);
                  kernel::attention_features_backward(X, omega, map, Phi, dPhi, dX);
                  return {dX};
                });
}

namespace detail {

Tensor linear_attention(const Tensor& q, const Tensor& k, const Tensor& v, const LinearAttention& linear,
                        const AttentionSpec& spec, AttentionInternals* internals) {
  const auto where = [&] {
    return "attention (linear): q " + to_string(q.shape()) + ", k " + to_string(k.shape());
  };
  AG_CHECK(spec.cache || positions_of(q, spec.layout) == positions_of(k, spec.layout),
           where() << ": linear attention needs as many queries as keys (a cache for decoding)");
  AG_CHECK(linear.chunk >= 1, where() << ": chunk " << linear.chunk << " must be positive");
  const Tensor phi_q = attention_features(q, linear.feature_map, linear.omega);
  const Tensor phi_k = attention_features(k, linear.feature_map, linear.omega);
  if (spec.cache) return decode(phi_q, phi_k, v, linear, spec, *spec.cache);
  if (spec.context) return context_parallel_product(phi_q, phi_k, v, linear, spec);  // its weights would be T×T across processes
  if (internals) internals->probabilities = implied_weights(phi_q, phi_k, spec);
  return normalized_product(phi_q, phi_k, v, linear, spec);
}

}  // namespace detail

Tensor favor_projection(int64_t m, int64_t d, uint64_t seed, uint64_t stream) {
  AG_CHECK(m > 0 && d > 0, "favor_projection: m = " << m << " and d = " << d << " must be positive");
  Generator gen;
  gen.set_state(seed, stream << 40);
  std::vector<double> omega(m * d);
  std::vector<double> block(d * d);
  for (int64_t first = 0; first < m; first += d) {
    for (double& x : block) x = gen.normal();
    // Gram-Schmidt (modified) over the block's rows: d orthonormal directions.
    for (int64_t i = 0; i < d; ++i) {
      double* row = block.data() + i * d;
      for (int64_t j = 0; j < i; ++j) {
        const double* prev = block.data() + j * d;
        double dot = 0;
        for (int64_t c = 0; c < d; ++c) dot += row[c] * prev[c];
        for (int64_t c = 0; c < d; ++c) row[c] -= dot * prev[c];
      }
      double norm = 0;
      for (int64_t c = 0; c < d; ++c) norm += row[c] * row[c];
      norm = std::sqrt(norm);
      for (int64_t c = 0; c < d; ++c) row[c] /= norm;
    }
    // Each direction gets the length of a Gaussian d-vector (chi with d degrees of freedom).
    for (int64_t i = 0; i < d && first + i < m; ++i) {
      double length = 0;
      for (int64_t c = 0; c < d; ++c) {
        const double g = gen.normal();
        length += g * g;
      }
      length = std::sqrt(length);
      for (int64_t c = 0; c < d; ++c) omega[(first + i) * d + c] = length * block[i * d + c];
    }
  }
  return Tensor::from_vector(omega, {m, d}, DType::Float64);
}

}  // namespace ag
