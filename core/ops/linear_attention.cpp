// Linear attention (core/ops.h): the feature maps φ as one op, and the
// normalised causal (or full) product as another, each with its backward.
// Per batch entry and head, with a_ij = φ(q_i)·φ(k_j) over the visible j:
//   o_i = Σ_j a_ij v_j / den_i,     den_i = Σ_j a_ij + ε
//
// Backward (docs/backprop.md, "Linear attention"). With g_i = do_i / den_i,
//   ∂L/∂a_ij = g_i·v_j − g_i·o_i = g'_i·v'_j,   v'_j = [v_j, 1],  g'_i = [g_i, −g_i·o_i]
// so every gradient is again a sum of the product's shape, Σ_j (A_i·B_j) C_j:
//   dφ(q_i) = Σ_{j≤i} (g'_i·v'_j) φ(k_j)      forward prefix sums
//   dφ(k_j) = Σ_{i≥j} (v'_j·g'_i) φ(q_i)      reverse suffix sums
//   dv_j    = Σ_{i≥j} (φ(k_j)·φ(q_i)) g_i     reverse suffix sums
// and the forward is one too: [num_i, den_i − ε] = Σ_{j≤i} (φ(q_i)·φ(k_j)) v'_j.
// One kernel (linear_attention_product, chunked: core/cpu/linear_attention.cpp,
// cuda/linear_attention.cu) computes all four; the backward recomputes its
// running states instead of saving one per chunk. Saved: φ(Q), φ(K), V, Z and den.
#include <cmath>
#include <vector>

#include "core/ops/common.h"
#include "core/random.h"

namespace ag {

namespace {

// Out [N, T, e] = Σ_{j visible from i} (A_i·B_j) C_j over A, B [N, T, r], C [N, T, e].
Tensor prefix_product(const Tensor& a, const Tensor& b, const Tensor& c, PrefixDirection direction, int64_t chunk) {
  Tensor out = detail::empty_as({c.size(0), c.size(1), c.size(2)}, c);
  kernel::linear_attention_product(a, b, c, {.direction = direction, .chunk = chunk}, out);
  return out;
}

// [N, T, d] -> [N, T, d + 1] with `last` as the extra column.
Tensor append_column(const Tensor& x, const Tensor& last) { return concat({x, last}, 2); }

// Z [B, H, T, d] from φ(Q), φ(K) [B, H, T, r] and V [B, H, T, d].
Tensor normalized_product(const Tensor& phi_q, const Tensor& phi_k, const Tensor& v, const LinearAttentionSpec& spec) {
  const int64_t B = v.size(0), H = v.size(1), T = v.size(2), d = v.size(3), r = phi_q.size(3), N = B * H;
  const PrefixDirection forward = spec.causal ? PrefixDirection::Causal : PrefixDirection::All;
  const PrefixDirection reverse = spec.causal ? PrefixDirection::Anticausal : PrefixDirection::All;
  const Tensor Pq = phi_q.detach().reshape({N, T, r}), Pk = phi_k.detach().reshape({N, T, r});
  Tensor Z, den, v_ones;
  {
    NoGradGuard no_grad;  // the pieces below are this op's forward, not ops of the graph
    v_ones = append_column(v.detach().reshape({N, T, d}), Tensor::ones({N, T, 1}, v.dtype(), v.device()));
    // [num_i, den_i − ε] = Σ_j a_ij v'_j
    const Tensor U = prefix_product(Pq, Pk, v_ones, forward, spec.chunk);
    den = slice(U, 2, d, d + 1) + math::kLinearAttentionEps;  // [N, T, 1]
    Z = (slice(U, 2, 0, d) / den).reshape({B, H, T, d});      // o_i = num_i / den_i
  }
  return record("linear_attention", {phi_q, phi_k, v}, Z,
                [Pq, Pk, v_ones, den,
                 Z = Z.detach().reshape({N, T, d}), shape = v.shape(), phi_shape = phi_q.shape(), forward, reverse,
                 chunk = spec.chunk](const Tensor& dZ) -> Gradients {
                  // o_i = num_i / den_i  →  g_i = do_i / den_i,  and ∂L/∂den_i = −g_i·o_i
                  const Tensor g = dZ.reshape(Z.shape()) / den;             // [N, T, d]
                  const Tensor g_ones = append_column(g, -sum(g * Z, 2, true));  // g'_i = [g_i, −g_i·o_i]
                  // a_ij = φ(q_i)·φ(k_j)  →  ∂L/∂a_ij = g'_i·v'_j
                  const Tensor dPq = prefix_product(g_ones, v_ones, Pk, forward, chunk);  // Σ_{j≤i} (g'_i·v'_j) φ(k_j)
                  const Tensor dPk = prefix_product(v_ones, g_ones, Pq, reverse, chunk);  // Σ_{i≥j} (v'_j·g'_i) φ(q_i)
                  // num_i = Σ_j a_ij v_j  →  dv_j = Σ_{i≥j} a_ij g_i
                  const Tensor dV = prefix_product(Pk, Pq, g, reverse, chunk);
                  return {dPq.reshape(phi_shape), dPk.reshape(phi_shape), dV.reshape(shape)};
                });
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

Tensor linear_attention(const Tensor& q, const Tensor& k, const Tensor& v, const LinearAttentionSpec& spec) {
  detail::check_compatible("linear_attention", {&q, &k, &v});
  AG_CHECK(q.dim() == 4 && q.shape() == k.shape() && q.shape() == v.shape() && q.size(3) > 0,
           "linear_attention: q " << to_string(q.shape()) << ", k " << to_string(k.shape()) << ", v "
                                  << to_string(v.shape()) << ": expected q, k, v [B, H, T, d] of one shape");
  AG_CHECK(spec.chunk >= 1, "linear_attention: chunk " << spec.chunk << " must be positive");
  return normalized_product(attention_features(q, spec.feature_map, spec.omega),
                            attention_features(k, spec.feature_map, spec.omega), v, spec);
}

Tensor linear_attention_weights(const Tensor& q, const Tensor& k, const LinearAttentionSpec& spec) {
  AG_CHECK(q.dim() == 4 && q.shape() == k.shape() && q.size(3) > 0,
           "linear_attention_weights: q " << to_string(q.shape()) << ", k " << to_string(k.shape())
                                          << ": expected q, k [B, H, T, d] of one shape");
  Tensor scores = matmul(attention_features(q, spec.feature_map, spec.omega),
                         transpose(attention_features(k, spec.feature_map, spec.omega), 2, 3));  // φ(q_i)·φ(k_j)
  if (spec.causal)  // e^M: 1 where j ≤ i, 0 above (e^−∞ = 0)
    scores = scores * exp(causal_mask(q.size(2), scores.dtype(), scores.device()));
  return scores / (sum(scores, 3, true) + math::kLinearAttentionEps);
}

Tensor linear_attention_step(const Tensor& q, const Tensor& k, const Tensor& v, const LinearAttentionSpec& spec,
                             LinearAttentionState& state) {
  AG_CHECK(spec.causal, "linear_attention_step: only causal attention runs as a recurrence");
  AG_CHECK(q.dim() == 4 && q.size(2) == 1 && q.shape() == k.shape() && q.shape() == v.shape(),
           "linear_attention_step: q " << to_string(q.shape()) << ", k " << to_string(k.shape()) << ", v "
                                       << to_string(v.shape()) << ": expected q, k, v [B, H, 1, d]");
  const Tensor phi_q = attention_features(q, spec.feature_map, spec.omega);  // [B, H, 1, r]
  const Tensor phi_k = attention_features(k, spec.feature_map, spec.omega);
  const Tensor S_new = matmul(transpose(phi_k, 2, 3), v);  // φ(k_t) v_tᵀ [B, H, r, d]
  state.S = state.S.defined() ? state.S + S_new : S_new;
  state.z = state.z.defined() ? state.z + phi_k : phi_k;
  // o_t = φ(q_t)ᵀ S / (φ(q_t)·z + ε)
  const Tensor den = sum(phi_q * state.z, 3, true) + math::kLinearAttentionEps;  // [B, H, 1, 1]
  return matmul(phi_q, state.S) / den;
}

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
