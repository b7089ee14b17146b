#include "examples/interp/analysis.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <numeric>
#include <tuple>

// GCC 12 at -O2 reports Boost.Graph's edge iterators as maybe uninitialized inside these headers (a false
// positive of its inlined optional<>); the warning is silenced for them alone (clang has no such group).
#pragma GCC diagnostic push
#ifndef __clang__
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#endif
#include <boost/graph/adjacency_list.hpp>
#include <boost/graph/boykov_kolmogorov_max_flow.hpp>
#pragma GCC diagnostic pop

#include "core/autograd.h"
#include "core/ops.h"

namespace ag::interp {

namespace {
Device device_of(nn::GPT& model) { return model.parameters().at(0).device(); }
DType dtype_of(nn::GPT& model) { return model.parameters().at(0).dtype(); }
}  // namespace

std::vector<nn::MixerRecord> forward_recording(nn::GPT& model, const std::vector<int64_t>& ids) {
  const int64_t T = static_cast<int64_t>(ids.size()), N = model.config().n_layer;
  NoGradGuard no_grad;
  model.eval();
  std::vector<nn::MixerRecord> records(static_cast<size_t>(N));
  for (int64_t l = 0; l < N; ++l)
    model.block(l).attn().set_probe([&records, l](const nn::MixerRecord& r) { records[static_cast<size_t>(l)] = r; });
  model.forward(Tensor::from_indices(ids, {1, T}).to(device_of(model)));
  for (int64_t l = 0; l < N; ++l) model.block(l).attn().set_probe({});
  const AttentionFunction function = model.config().attention;
  for (const nn::MixerRecord& record : records)  // the LSTM's record is empty (nn/mixer.h)
    AG_CHECK(record.weights.defined(), "--attention " << name_of(function) << " has no attention weights to look at ("
                                                      << attention_function_traits(function).weights << ")");
  return records;
}

std::vector<Tensor> attention_maps(nn::GPT& model, const std::vector<int64_t>& ids,
                                   std::vector<std::vector<double>>* mean_decays) {
  const int64_t T = static_cast<int64_t>(ids.size()), N = model.config().n_layer;
  const std::vector<nn::MixerRecord> records = forward_recording(model, ids);
  std::vector<Tensor> maps;
  for (int64_t l = 0; l < N; ++l) {
    const nn::MixerRecord& record = records[static_cast<size_t>(l)];
    const Tensor& A = record.weights;  // [1, H, T, T]
    maps.push_back(A.to(Device::CPU).to(DType::Float64).reshape({A.size(1), T, T}).clone());
    if (mean_decays && record.decays.defined()) {
      const std::vector<double> a = record.decays.to(Device::CPU).to(DType::Float64).to_vector();  // [1, T, H]
      const int64_t H = A.size(1);
      std::vector<double> mean(H, 0.0);
      for (size_t i = 0; i < a.size(); ++i) mean[i % H] += a[i] / static_cast<double>(T);
      mean_decays->push_back(mean);
    }
  }
  return maps;
}

std::vector<ScoreParts> score_decomposition(nn::GPT& model, const std::vector<int64_t>& ids) {
  const nn::GPTConfig& config = model.config();
  AG_CHECK(config.attention == AttentionFunction::Softmax && config.position != PositionEncoding::Rope,
           "attention --decompose splits softmax's scores q·k; this model's attention is "
               << name_of(config.attention) << " with " << name_of(config.position)
               << " positions (rope rotates q and k inside the op; linear and ssd have no softmax scores)");
  const int64_t T = static_cast<int64_t>(ids.size()), N = config.n_layer, H = config.n_head;
  const std::vector<nn::MixerRecord> records = forward_recording(model, ids);
  std::vector<ScoreParts> parts;
  for (int64_t l = 0; l < N; ++l) {
    const nn::MixerRecord& record = records[static_cast<size_t>(l)];
    const std::vector<double> q = record.queries.to(Device::CPU).to_vector(), k = record.keys.to(Device::CPU).to_vector();
    const int64_t H_kv = record.keys.size(2), d_h = record.keys.size(3);
    std::vector<double> norm(H * T * T, 0.0), cosine(H * T * T, 0.0);
    for (int64_t h = 0; h < H; ++h) {
      const int64_t kv = h / (H / H_kv);
      for (int64_t i = 0; i < T; ++i)
        for (int64_t j = 0; j <= i; ++j) {
          const double* qi = &q[(i * H + h) * d_h];
          const double* kj = &k[(j * H_kv + kv) * d_h];
          const double dot = std::inner_product(qi, qi + d_h, kj, 0.0);
          const double lengths = std::sqrt(std::inner_product(qi, qi + d_h, qi, 0.0) * std::inner_product(kj, kj + d_h, kj, 0.0));
          norm[(h * T + i) * T + j] = lengths / std::sqrt(static_cast<double>(d_h));
          cosine[(h * T + i) * T + j] = lengths > 0 ? dot / lengths : 0.0;
        }
    }
    parts.push_back({Tensor::from_vector(norm, {H, T, T}, DType::Float64), Tensor::from_vector(cosine, {H, T, T}, DType::Float64)});
  }
  return parts;
}

double pearson(const std::vector<double>& x, const std::vector<double>& y) {
  AG_CHECK(x.size() == y.size() && x.size() >= 2,
           "correlation: needs two series of the same length >= 2, got " << x.size() << " and " << y.size());
  const double n = static_cast<double>(x.size());
  const double mx = std::accumulate(x.begin(), x.end(), 0.0) / n, my = std::accumulate(y.begin(), y.end(), 0.0) / n;
  double sxy = 0, sxx = 0, syy = 0;
  for (size_t i = 0; i < x.size(); ++i) {
    sxy += (x[i] - mx) * (y[i] - my);
    sxx += (x[i] - mx) * (x[i] - mx);
    syy += (y[i] - my) * (y[i] - my);
  }
  if (sxx == 0 || syy == 0) return std::numeric_limits<double>::quiet_NaN();
  return sxy / std::sqrt(sxx * syy);
}

std::vector<Selection> head_selection(const ScoreParts& parts) {
  const int64_t H = parts.norm.size(0), T = parts.norm.size(1);
  const std::vector<double> norm = parts.norm.to_vector(), cosine = parts.cosine.to_vector();
  std::vector<Selection> heads(H);
  for (int64_t h = 0; h < H; ++h) {
    double angle_sum = 0, norm_sum = 0;
    int64_t angle_rows = 0, norm_rows = 0;
    for (int64_t i = 2; i < T; ++i) {  // keys 0 … i
      const auto row = [&](const std::vector<double>& v) {
        return std::vector<double>(v.begin() + (h * T + i) * T, v.begin() + (h * T + i) * T + i + 1);
      };
      const std::vector<double> n = row(norm), c = row(cosine);
      std::vector<double> score(i + 1);
      for (int64_t j = 0; j <= i; ++j) score[j] = n[j] * c[j];
      if (const double r = pearson(score, c); !std::isnan(r)) angle_sum += r, ++angle_rows;
      if (const double r = pearson(score, n); !std::isnan(r)) norm_sum += r, ++norm_rows;
    }
    const double nan = std::numeric_limits<double>::quiet_NaN();
    heads[h] = {angle_rows ? angle_sum / static_cast<double>(angle_rows) : nan, norm_rows ? norm_sum / static_cast<double>(norm_rows) : nan};
  }
  return heads;
}

std::vector<std::vector<double>> residual_mixed(const std::vector<Tensor>& maps,
                                                const std::vector<std::vector<double>>& gates) {
  AG_CHECK(!maps.empty(), "attention rollout and flow: no layers");
  AG_CHECK(gates.empty() || gates.size() == maps.size(), "attention rollout and flow: gates for " << gates.size()
                                                                                                << " layers, maps of " << maps.size());
  const int64_t T = maps[0].size(1);
  std::vector<std::vector<double>> layers;
  for (size_t l = 0; l < maps.size(); ++l) {
    const Tensor& A = maps[l];
    AG_CHECK(A.dim() == 3 && A.size(1) == T && A.size(2) == T, "attention rollout and flow: a map is " << describe(A)
                                                                                                     << ", not [H, T, T]");
    const int64_t H = A.size(0);
    const std::vector<double> a = A.to_vector();
    const std::vector<double> on = gates.empty() ? std::vector<double>(H, 1.0) : gates[l];
    const double heads_on = std::accumulate(on.begin(), on.end(), 0.0);
    std::vector<double> mixed(T * T);
    for (int64_t i = 0; i < T; ++i)
      for (int64_t j = 0; j < T; ++j) {
        double mean = 0;
        for (int64_t h = 0; h < H; ++h) mean += on[h] * a[(h * T + i) * T + j];
        mixed[i * T + j] = heads_on > 0 ? 0.5 * mean / heads_on + (i == j ? 0.5 : 0.0) : (i == j ? 1.0 : 0.0);
      }
    layers.push_back(std::move(mixed));
  }
  return layers;
}

Tensor attention_rollout(const std::vector<Tensor>& maps, const std::vector<std::vector<double>>& gates) {
  const std::vector<std::vector<double>> layers = residual_mixed(maps, gates);
  const int64_t T = maps[0].size(1);
  std::vector<double> R(T * T, 0.0);  // starts as I: each position is itself
  for (int64_t i = 0; i < T; ++i) R[i * T + i] = 1.0;
  for (const std::vector<double>& mixed : layers) {
    std::vector<double> next(T * T, 0.0);  // R ← Ã R: this layer reads the positions as the layers below left them
    for (int64_t i = 0; i < T; ++i)
      for (int64_t k = 0; k < T; ++k)
        for (int64_t j = 0; j < T; ++j) next[i * T + j] += mixed[i * T + k] * R[k * T + j];
    R = std::move(next);
  }
  return Tensor::from_vector(R, {T, T}, DType::Float64);
}

namespace {
// Boost.Graph's max-flow wants each edge's residual capacity and its reverse edge (of capacity 0) as properties.
using FlowTraits = boost::adjacency_list_traits<boost::vecS, boost::vecS, boost::directedS>;
using FlowGraph = boost::adjacency_list<
    boost::vecS, boost::vecS, boost::directedS,
    boost::property<boost::vertex_index_t, int64_t,
                    boost::property<boost::vertex_color_t, boost::default_color_type,
                                    boost::property<boost::vertex_distance_t, int64_t,
                                                    boost::property<boost::vertex_predecessor_t, FlowTraits::edge_descriptor>>>>,
    boost::property<boost::edge_capacity_t, double,
                    boost::property<boost::edge_residual_capacity_t, double,
                                    boost::property<boost::edge_reverse_t, FlowTraits::edge_descriptor>>>>;
}  // namespace

std::vector<double> max_flows_from(const std::vector<std::vector<double>>& capacities, int64_t T, int64_t output) {
  const int64_t N = static_cast<int64_t>(capacities.size());
  AG_CHECK(N >= 1 && T >= 1, "attention flow: " << N << " layers of " << T << " positions");
  AG_CHECK(output >= 0 && output < T, "attention flow: output position " << output << " is outside [0, " << T << ")");
  FlowGraph graph((N + 1) * T);
  const auto node = [T](int64_t l, int64_t i) { return static_cast<size_t>(l * T + i); };
  auto capacity = boost::get(boost::edge_capacity, graph);
  auto reverse = boost::get(boost::edge_reverse, graph);
  for (int64_t l = 0; l < N; ++l) {
    AG_CHECK(static_cast<int64_t>(capacities[l].size()) == T * T,
             "attention flow: layer " << l << " has " << capacities[l].size() << " capacities, not " << T * T);
    for (int64_t i = 0; i < T; ++i)
      for (int64_t j = 0; j < T; ++j) {
        const double c = capacities[l][i * T + j];
        AG_CHECK(c >= 0, "attention flow: capacity " << c << " < 0 at layer " << l << " (" << i << ", " << j << ")");
        if (c == 0) continue;  // the mask's zeros: no edge
        const auto forward_edge = boost::add_edge(node(l + 1, i), node(l, j), graph).first;
        const auto backward_edge = boost::add_edge(node(l, j), node(l + 1, i), graph).first;
        capacity[forward_edge] = c;
        capacity[backward_edge] = 0;
        reverse[forward_edge] = backward_edge;
        reverse[backward_edge] = forward_edge;
      }
  }
  std::vector<double> flows(T, 0.0);
  for (int64_t j = 0; j < T; ++j)  // the algorithm resets the residual capacities on each call
    flows[j] = boost::boykov_kolmogorov_max_flow(graph, node(N, output), node(0, j));
  return flows;
}

Tensor attention_flow(const std::vector<Tensor>& maps, const std::vector<std::vector<double>>& gates) {
  const std::vector<std::vector<double>> layers = residual_mixed(maps, gates);
  const int64_t T = maps[0].size(1);
  std::vector<double> F(T * T);
  for (int64_t i = 0; i < T; ++i) {
    const std::vector<double> row = max_flows_from(layers, T, i);
    std::copy(row.begin(), row.end(), F.begin() + i * T);
  }
  return Tensor::from_vector(F, {T, T}, DType::Float64);
}

std::unique_ptr<nn::GPT> float64_copy(const nn::GPT& model) {
  Generator unused(0);  // the weights are copied in
  auto copy = std::make_unique<nn::GPT>(model.config(), unused);
  copy->to(DType::Float64);
  std::vector<NamedTensor> weights;
  for (const NamedTensor& p : model.state()) weights.push_back({p.name, p.tensor.to(Device::CPU).to(DType::Float64)});
  copy->load_state(weights);
  copy->eval();
  copy->set_activation_hook(model.activation_hook());  // it computes the model's function: whatever watches one watches both
  return copy;
}

double Attribution::residual() const { return std::fabs(sum - (f_input - f_baseline)); }

Attribution integrated_gradients(const nn::GPT& model, const std::vector<int64_t>& ids, int64_t position,
                                 int64_t steps) {
  const int64_t T = static_cast<int64_t>(ids.size()), C = model.config().n_embd, V = model.config().vocab_size;
  AG_CHECK(position >= 0 && position < T, "integrated_gradients: position " << position << " is outside [0, " << T << ")");
  AG_CHECK(steps >= 1, "integrated_gradients: steps " << steps << " < 1");
  const std::unique_ptr<nn::GPT> exact = float64_copy(model);
  nn::GPT& copy = *exact;

  // The path x' + α (x − x') = α E for α_k = k / steps, k = 0 … steps: one batch of steps + 1 sequences.
  const std::vector<double> E = copy.token_embeddings(Tensor::from_indices(ids, {1, T})).to_vector();  // [T, C]
  const int64_t S = steps + 1;
  std::vector<double> path(S * T * C);
  for (int64_t k = 0; k < S; ++k)
    for (int64_t i = 0; i < T * C; ++i) path[k * T * C + i] = static_cast<double>(k) / steps * E[i];
  Tensor X = Tensor::from_vector(path, {S, T, C}, DType::Float64);
  X.requires_grad_();
  const Tensor logits = copy.forward_embedded(X).reshape({S, T * V});  // [S, T·V]

  Attribution a;
  a.position = position;
  const std::vector<double> at_input = slice(logits, 0, S - 1, S).to_vector();  // α = 1: the model's own logits
  a.target = std::max_element(at_input.begin() + position * V, at_input.begin() + (position + 1) * V) -
             (at_input.begin() + position * V);
  const Tensor F = slice(logits, 1, position * V + a.target, position * V + a.target + 1);  // [S, 1]
  sum(F).backward();  // row k's gradient is ∂F(α_k E)/∂(α_k E): the rows do not mix
  const std::vector<double> f = F.to_vector(), grad = X.grad().to_vector();
  a.f_baseline = f.front();
  a.f_input = f.back();
  // IG_{t,c} = E_{t,c} · ∫₀¹ ∂F/∂x_{t,c}(α E) dα ≈ E_{t,c} · Σ_k w_k g_k, trapezoid weights w = 1/steps, halved at the ends.
  a.per_position.assign(T, 0.0);
  for (int64_t k = 0; k < S; ++k) {
    const double w = (k == 0 || k == steps ? 0.5 : 1.0) / static_cast<double>(steps);
    for (int64_t t = 0; t < T; ++t)
      for (int64_t c = 0; c < C; ++c) a.per_position[t] += w * E[t * C + c] * grad[(k * T + t) * C + c];
  }
  a.sum = std::accumulate(a.per_position.begin(), a.per_position.end(), 0.0);
  return a;
}

double mean_loss(nn::GPT& model, const std::vector<TokenBatch>& batches) {
  AG_CHECK(!batches.empty(), "mean_loss: no batches");
  NoGradGuard no_grad;
  model.eval();
  double total = 0;
  for (const TokenBatch& b : batches)
    total += model.loss(b.x.to(device_of(model)), b.y.to(device_of(model))).item();
  return total / static_cast<double>(batches.size());
}

std::vector<std::vector<double>> head_importance(nn::GPT& model, const std::vector<TokenBatch>& batches) {
  AG_CHECK(!batches.empty(), "head_importance: no batches");
  const int64_t N = model.config().n_layer, H = model.config().n_head;
  const std::vector<std::vector<double>> on = model.config().head_gates();
  std::vector<Tensor> kept(N), gates(N);
  for (int64_t l = 0; l < N; ++l) {
    kept[l] = model.block(l).attn().head_gates();
    gates[l] = Tensor::from_vector(on[l], {H}, dtype_of(model)).to(device_of(model));
    gates[l].requires_grad_();
    model.block(l).attn().set_head_gates(gates[l]);
  }
  model.eval();
  std::vector<std::vector<double>> importance(N, std::vector<double>(H, 0.0));
  for (const TokenBatch& b : batches) {
    for (Tensor& g : gates) g.zero_grad();
    model.loss(b.x.to(device_of(model)), b.y.to(device_of(model))).backward();
    for (int64_t l = 0; l < N; ++l) {
      const std::vector<double> dg = gates[l].grad().to_vector();  // ∂L/∂g_h
      for (int64_t h = 0; h < H; ++h) importance[l][h] += std::fabs(dg[h]) / static_cast<double>(batches.size());
    }
  }
  model.zero_grad();
  for (int64_t l = 0; l < N; ++l) model.block(l).attn().set_head_gates(kept[l]);
  return importance;
}

std::vector<Head> heads_by_importance(const std::vector<std::vector<double>>& importance,
                                      const std::vector<std::vector<double>>& gates) {
  std::vector<std::pair<double, Head>> on;
  for (size_t l = 0; l < gates.size(); ++l)
    for (size_t h = 0; h < gates[l].size(); ++h)
      if (gates[l][h] != 0.0) on.push_back({importance.at(l).at(h), {static_cast<int64_t>(l), static_cast<int64_t>(h)}});
  std::stable_sort(on.begin(), on.end(), [](const auto& a, const auto& b) { return a.first < b.first; });
  std::vector<Head> order;
  for (const auto& entry : on) order.push_back(entry.second);
  return order;
}

std::vector<std::vector<double>> prune_least_important(const std::vector<std::vector<double>>& importance,
                                                       const std::vector<std::vector<double>>& gates, int64_t K) {
  const std::vector<Head> order = heads_by_importance(importance, gates);
  AG_CHECK(K >= 0 && K <= static_cast<int64_t>(order.size()), "prune: K = " << K << " but " << order.size() << " heads are on");
  std::vector<std::vector<double>> pruned = gates;
  for (int64_t k = 0; k < K; ++k) pruned[order[k].layer][order[k].head] = 0.0;
  return pruned;
}

std::vector<double> pruning_curve(nn::GPT& model, const std::vector<TokenBatch>& batches, const std::vector<Head>& order) {
  const std::string kept = model.config().head_mask;
  std::vector<std::vector<double>> gates = model.config().head_gates();
  std::vector<double> losses = {mean_loss(model, batches)};
  for (const Head& head : order) {
    gates.at(head.layer).at(head.head) = 0.0;
    model.set_head_mask(nn::head_mask_text(gates));
    losses.push_back(mean_loss(model, batches));
  }
  model.set_head_mask(kept);
  return losses;
}

}  // namespace ag::interp
