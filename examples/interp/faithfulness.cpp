#include "examples/interp/faithfulness.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <numeric>

#include "core/autograd.h"
#include "core/caching_allocator.h"
#include "core/ops.h"
#include "examples/interp/analysis.h"

namespace ag::interp {

std::vector<double> average_ranks(const std::vector<double>& x) {
  std::vector<size_t> order(x.size());
  std::iota(order.begin(), order.end(), 0);
  std::stable_sort(order.begin(), order.end(), [&x](size_t a, size_t b) { return x[a] < x[b]; });
  std::vector<double> ranks(x.size());
  for (size_t first = 0; first < order.size();) {
    size_t last = first;  // [first, last] hold one value: each gets the mean of ranks first+1 … last+1
    while (last + 1 < order.size() && x[order[last + 1]] == x[order[first]]) ++last;
    for (size_t k = first; k <= last; ++k) ranks[order[k]] = 0.5 * static_cast<double>(first + last) + 1.0;
    first = last + 1;
  }
  return ranks;
}

double spearman(const std::vector<double>& x, const std::vector<double>& y) {
  AG_CHECK(x.size() == y.size() && x.size() >= 2,
           "spearman: needs two rankings of the same length >= 2, got " << x.size() << " and " << y.size());
  return pearson(average_ranks(x), average_ranks(y));
}

std::vector<int64_t> order_by_score(const std::vector<double>& scores) {
  std::vector<int64_t> order(scores.size());
  std::iota(order.begin(), order.end(), 0);
  std::stable_sort(order.begin(), order.end(), [&scores](int64_t a, int64_t b) { return scores[a] > scores[b]; });
  return order;
}

namespace {
void check_position(const std::vector<int64_t>& ids, int64_t position, const char* what) {
  AG_CHECK(position >= 0 && position < static_cast<int64_t>(ids.size()),
           what << ": position " << position << " is outside the prompt's [0, " << ids.size() << ")");
}
}  // namespace

Prediction predict(nn::GPT& exact, const std::vector<int64_t>& ids, int64_t position) {
  check_position(ids, position, "predict");
  NoGradGuard no_grad;
  const int64_t T = static_cast<int64_t>(ids.size()), V = exact.config().vocab_size;
  const std::vector<double> logits = exact.forward(Tensor::from_indices(ids, {1, T})).to_vector();  // [1, T, V]
  const auto row = logits.begin() + position * V;
  Prediction p;
  p.position = position;
  p.target = std::max_element(row, row + V) - row;
  p.logit = row[p.target];
  return p;
}

std::vector<double> logit_drops(nn::GPT& exact, const std::vector<int64_t>& ids, const Prediction& p,
                                const std::vector<std::vector<int64_t>>& erased) {
  check_position(ids, p.position, "logit_drops");
  const int64_t T = static_cast<int64_t>(ids.size()), C = exact.config().n_embd, V = exact.config().vocab_size;
  NoGradGuard no_grad;
  const std::vector<double> E = exact.token_embeddings(Tensor::from_indices(ids, {1, T})).to_vector();  // [T, C]
  const int64_t S = static_cast<int64_t>(erased.size()) + 1;  // row 0: the input itself
  std::vector<double> batch(S * T * C);
  for (int64_t s = 0; s < S; ++s) std::copy(E.begin(), E.end(), batch.begin() + s * T * C);
  for (int64_t s = 1; s < S; ++s)
    for (const int64_t j : erased[s - 1]) {
      AG_CHECK(j >= 0 && j < T, "logit_drops: erased position " << j << " is outside the prompt's [0, " << T << ")");
      std::fill_n(batch.begin() + (s * T + j) * C, C, 0.0);  // the baseline's token embedding; forward_embedded adds j's position
    }
  const std::vector<double> logits =
      exact.forward_embedded(Tensor::from_vector(batch, {S, T, C}, DType::Float64)).to_vector();  // [S, T, V]
  const auto F = [&](int64_t s) { return logits[(s * T + p.position) * V + p.target]; };
  std::vector<double> drops;
  for (int64_t s = 1; s < S; ++s) drops.push_back(F(0) - F(s));
  return drops;
}

std::vector<double> erasure_effects(nn::GPT& exact, const std::vector<int64_t>& ids, const Prediction& p) {
  std::vector<std::vector<int64_t>> single;
  for (int64_t j = 0; j <= p.position; ++j) single.push_back({j});
  return logit_drops(exact, ids, p, single);
}

std::vector<std::vector<double>> deletion_curves(nn::GPT& exact, const std::vector<int64_t>& ids, const Prediction& p,
                                                 const std::vector<std::vector<int64_t>>& orders, int64_t K) {
  std::vector<std::vector<int64_t>> prefixes;
  for (const std::vector<int64_t>& order : orders) {
    AG_CHECK(K >= 1 && K <= static_cast<int64_t>(order.size()),
             "deletion curve: k = 1 … " << K << " but the order ranks " << order.size() << " positions");
    for (int64_t k = 1; k <= K; ++k) prefixes.emplace_back(order.begin(), order.begin() + k);
  }
  const std::vector<double> drops = logit_drops(exact, ids, p, prefixes);
  std::vector<std::vector<double>> curves;
  for (size_t o = 0; o < orders.size(); ++o) curves.emplace_back(drops.begin() + o * K, drops.begin() + (o + 1) * K);
  return curves;
}

std::vector<double> gradient_times_input(nn::GPT& exact, const std::vector<int64_t>& ids, const Prediction& p) {
  check_position(ids, p.position, "gradient_times_input");
  const int64_t T = static_cast<int64_t>(ids.size()), C = exact.config().n_embd, V = exact.config().vocab_size;
  Tensor E = exact.token_embeddings(Tensor::from_indices(ids, {1, T})).detach();  // [1, T, C]
  E.requires_grad_();
  const Tensor logits = exact.forward_embedded(E).reshape({1, T * V});
  sum(slice(logits, 1, p.position * V + p.target, p.position * V + p.target + 1)).backward();
  const std::vector<double> e = E.to_vector(), g = E.grad().to_vector();
  exact.zero_grad();
  std::vector<double> scores(p.position + 1, 0.0);
  for (int64_t j = 0; j <= p.position; ++j)
    for (int64_t c = 0; c < C; ++c) scores[j] += e[j * C + c] * g[j * C + c];
  return scores;
}

std::vector<double> attention_value_norms(nn::GPT& exact, const std::vector<int64_t>& ids, int64_t t) {
  check_position(ids, t, "attention_value_norms");
  const nn::GPTConfig& config = exact.config();
  const int64_t T = static_cast<int64_t>(ids.size()), C = config.n_embd, H = config.n_head, d_h = C / H;
  const nn::AttentionMixer& last = exact.block(config.n_layer - 1).attn_as<nn::AttentionMixer>();
  const nn::MixerRecord record = forward_recording(exact, ids).back();
  const std::vector<double> A = record.weights.to_vector();  // [1, H, T, T]
  const Tensor& values = record.values;                     // [1, T, H_kv, d_h]
  const int64_t H_kv = values.size(2);
  const std::vector<double> v = values.to_vector(), W_O = last.w_o().weight().to_vector();  // W_O [C, C] (in, out)
  const std::vector<double> gates = config.head_gates().back();
  std::vector<double> norms(t + 1);
  for (int64_t j = 0; j <= t; ++j) {
    std::vector<double> added(C, 0.0);  // Σ_h g_h A^h[t, j] v^h_j W_O^h: j's share of t's attention output
    for (int64_t h = 0; h < H; ++h) {
      const double weight = gates[h] * A[(h * T + t) * T + j];
      const int64_t kv = h / (H / H_kv);
      for (int64_t d = 0; d < d_h; ++d) {
        const double wv = weight * v[(j * H_kv + kv) * d_h + d];
        for (int64_t c = 0; c < C; ++c) added[c] += wv * W_O[(h * d_h + d) * C + c];
      }
    }
    norms[j] = std::sqrt(std::inner_product(added.begin(), added.end(), added.begin(), 0.0));
  }
  return norms;
}

Explanations explain_all(nn::GPT& exact, const std::vector<int64_t>& ids, int64_t position, int64_t steps) {
  check_position(ids, position, "explain");
  AG_CHECK(attention_function_traits(exact.config().attention).weights_sum_to_one,
           "faithfulness: --attention " << name_of(exact.config().attention)
                                        << " forms signed, unnormalised weights, not a distribution over the keys: rollout and "
                                           "flow route a distribution, so its attention methods are not defined");
  // A causal model's logit at t reads positions 0 … t only: every method runs on that prefix.
  const std::vector<int64_t> prefix(ids.begin(), ids.begin() + position + 1);
  const int64_t t = position, T = t + 1;
  Explanations ex;
  ex.prediction = predict(exact, prefix, t);
  const std::vector<Tensor> maps = attention_maps(exact, prefix);
  const std::vector<std::vector<double>> gates = exact.config().head_gates();

  const std::vector<double> last = maps.back().to_vector();  // [H, T, T]
  const std::vector<double>& on = gates.back();
  const double heads_on = std::accumulate(on.begin(), on.end(), 0.0);
  std::vector<double> raw(T, 0.0);
  for (size_t h = 0; h < on.size(); ++h)
    for (int64_t j = 0; j < T; ++j) raw[j] += heads_on > 0 ? on[h] * last[(h * T + t) * T + j] / heads_on : 0.0;
  const std::vector<double> rollout = attention_rollout(maps, gates).to_vector();  // [T, T]: row t

  const Attribution ig = integrated_gradients(exact, prefix, t, steps);
  AG_CHECK(ig.target == ex.prediction.target, "explain: integrated gradients explain character " << ig.target
                                                                                             << ", the prediction is " << ex.prediction.target);
  ex.methods = {"attention", "rollout", "flow", "grad×input", "IG", "‖αvW_O‖"};
  ex.scores = {raw,
               {rollout.begin() + t * T, rollout.end()},
               max_flows_from(residual_mixed(maps, gates), T, t),
               gradient_times_input(exact, prefix, ex.prediction),
               ig.per_position,
               attention_value_norms(exact, prefix, t)};
  return ex;
}

double MethodSummary::mean_rho() const {
  double total = 0;
  for (const double r : rho) total += std::isnan(r) ? 0.0 : r;
  return total / static_cast<double>(defined());
}

double MethodSummary::spread_rho() const {
  const double mean = mean_rho();
  double squares = 0;
  for (const double r : rho) squares += std::isnan(r) ? 0.0 : (r - mean) * (r - mean);
  return defined() > 1 ? std::sqrt(squares / static_cast<double>(defined() - 1)) : 0.0;
}

int64_t MethodSummary::defined() const {
  return std::count_if(rho.begin(), rho.end(), [](double r) { return !std::isnan(r); });
}

Faithfulness measure_faithfulness(const nn::GPT& model, const std::vector<std::vector<int64_t>>& prompts,
                                  const std::vector<std::vector<int64_t>>& positions, int64_t steps, uint64_t seed) {
  AG_CHECK(!prompts.empty(), "faithfulness: no prompts (N = 0)");
  AG_CHECK(positions.size() == prompts.size(), "faithfulness: positions for " << positions.size() << " prompts, not "
                                                                              << prompts.size());
  const std::unique_ptr<nn::GPT> exact = float64_copy(model);
  Generator gen(seed);
  Faithfulness result;
  for (size_t p = 0; p < prompts.size(); ++p)
    for (const int64_t t : positions[p]) {
      AG_CHECK(t >= kDeletionSteps, "faithfulness: position " << t << " has fewer than " << kDeletionSteps + 1
                                                              << " positions to erase (a deletion curve erases up to "
                                                              << kDeletionSteps << ")");
      Explanations ex = explain_all(*exact, prompts[p], t, steps);
      const std::vector<int64_t> prefix(prompts[p].begin(), prompts[p].begin() + t + 1);
      const std::vector<double> erasure = erasure_effects(*exact, prefix, ex.prediction);
      std::vector<double> random(t + 1);
      for (double& r : random) r = gen.uniform();
      ex.methods.insert(ex.methods.end(), {"random", "erasure"});
      ex.scores.insert(ex.scores.end(), {random, erasure});
      std::vector<std::vector<int64_t>> orders;
      for (const std::vector<double>& scores : ex.scores) orders.push_back(order_by_score(scores));
      const std::vector<std::vector<double>> curves = deletion_curves(*exact, prefix, ex.prediction, orders, kDeletionSteps);
      if (result.methods.empty())
        for (const std::string& name : ex.methods) result.methods.push_back({name, {}, std::vector<double>(kDeletionSteps, 0.0)});
      for (size_t m = 0; m < ex.methods.size(); ++m) {
        result.methods[m].rho.push_back(spearman(ex.scores[m], erasure));
        for (int64_t k = 0; k < kDeletionSteps; ++k) result.methods[m].deletion[k] += curves[m][k];
      }
      ++result.predictions;
      // Each prediction's prefix has a length of its own, so its buffers are sizes the next one will not ask for:
      // the caching allocator would keep them all (6.5 GB over 128 predictions of the default model).
      host_empty_cache();
    }
  AG_CHECK(result.predictions > 0, "faithfulness: no positions to explain");
  for (MethodSummary& m : result.methods)
    for (double& d : m.deletion) d /= static_cast<double>(result.predictions);
  return result;
}

}  // namespace ag::interp
