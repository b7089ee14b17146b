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

double partial_correlation(double r_xy, double r_xz, double r_yz) {
  const double rest = (1 - r_xz * r_xz) * (1 - r_yz * r_yz);  // NaN propagates; 0 where x or y is z's ranking
  if (std::isnan(rest) || rest <= 0) return std::numeric_limits<double>::quiet_NaN();
  return (r_xy - r_xz * r_yz) / std::sqrt(rest);
}

double partial_spearman(const std::vector<double>& x, const std::vector<double>& y, const std::vector<double>& z) {
  return partial_correlation(spearman(x, y), spearman(x, z), spearman(y, z));
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

std::vector<Tensor> uniform_attention_like(const std::vector<Tensor>& maps) {
  std::vector<Tensor> uniform;
  for (const Tensor& A : maps) {
    AG_CHECK(A.dim() == 3 && A.size(1) == A.size(2), "uniform attention: a map is " << describe(A) << ", not [H, T, T]");
    const int64_t H = A.size(0), T = A.size(1);
    const std::vector<double> a = A.to_vector();
    std::vector<double> u(H * T * T, 0.0);
    for (int64_t i = 0; i < T; ++i) {
      std::vector<bool> mask(T, false);  // S_i: the keys some head weights
      for (int64_t h = 0; h < H; ++h)
        for (int64_t j = 0; j < T; ++j) mask[j] = mask[j] || a[(h * T + i) * T + j] != 0.0;
      const auto keys = static_cast<double>(std::count(mask.begin(), mask.end(), true));
      for (int64_t h = 0; h < H; ++h)
        for (int64_t j = 0; j < T; ++j) u[(h * T + i) * T + j] = mask[j] ? 1.0 / keys : 0.0;
    }
    uniform.push_back(Tensor::from_vector(u, {H, T, T}, DType::Float64));
  }
  return uniform;
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
  // Flow's paths from t to j stay within positions j … t, more of them the farther j is: even with no content
  // the max-flow grows with t − j (docs/interpretability.md). The uniform stack on the same mask measures that
  // part alone; the ratio keeps what the weights add to it. (Both are 0 only where no path reaches j.)
  const std::vector<double> flow = max_flows_from(residual_mixed(maps, gates), T, t);
  const std::vector<double> uniform = max_flows_from(residual_mixed(uniform_attention_like(maps), gates), T, t);
  std::vector<double> debiased(T);
  for (int64_t j = 0; j < T; ++j) debiased[j] = uniform[j] > 0 ? flow[j] / uniform[j] : 0.0;

  ex.methods = {"attention", "rollout", "flow", "flow÷uniform", "grad×input", "IG", "‖αvW_O‖", "uniform flow"};
  ex.scores = {raw,
               {rollout.begin() + t * T, rollout.end()},
               flow,
               debiased,
               gradient_times_input(exact, prefix, ex.prediction),
               ig.per_position,
               attention_value_norms(exact, prefix, t),
               uniform};
  return ex;
}

double defined_mean(const std::vector<double>& values) {
  double total = 0;
  for (const double v : values) total += std::isnan(v) ? 0.0 : v;
  return total / static_cast<double>(defined_count(values));
}

double defined_sd(const std::vector<double>& values) {
  const double mean = defined_mean(values);
  const int64_t n = defined_count(values);
  double squares = 0;
  for (const double v : values) squares += std::isnan(v) ? 0.0 : (v - mean) * (v - mean);
  return n > 1 ? std::sqrt(squares / static_cast<double>(n - 1)) : 0.0;
}

int64_t defined_count(const std::vector<double>& values) {
  return std::count_if(values.begin(), values.end(), [](double v) { return !std::isnan(v); });
}

double MethodSummary::mean_rho() const { return defined_mean(rho); }
double MethodSummary::spread_rho() const { return defined_sd(rho); }
int64_t MethodSummary::defined() const { return defined_count(rho); }

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
      std::vector<double> position(t + 1);  // ρ with j: how much of a ranking is where the positions are
      std::iota(position.begin(), position.end(), 0.0);
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
        for (const std::string& name : ex.methods) {
          MethodSummary summary;
          summary.method = name;
          summary.deletion.assign(kDeletionSteps, 0.0);
          result.methods.push_back(summary);
        }
      const double erasure_by_position = spearman(erasure, position);
      for (size_t m = 0; m < ex.methods.size(); ++m) {
        MethodSummary& summary = result.methods[m];
        summary.rho.push_back(spearman(ex.scores[m], erasure));
        summary.rho_position.push_back(spearman(ex.scores[m], position));
        summary.rho_partial.push_back(partial_correlation(summary.rho.back(), summary.rho_position.back(), erasure_by_position));
        for (int64_t k = 0; k < kDeletionSteps; ++k) summary.deletion[k] += curves[m][k];
      }
      result.windows.push_back(static_cast<int64_t>(p));
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

SignedRankTest wilcoxon_signed_rank(const std::vector<double>& differences) {
  std::vector<double> d;
  for (const double x : differences) {
    AG_CHECK(!std::isnan(x), "signed-rank test: a difference is NaN");
    if (x != 0) d.push_back(x);
  }
  SignedRankTest test;
  test.n = static_cast<int64_t>(d.size());
  if (test.n == 0) return test;
  std::vector<double> magnitude(d.size());
  for (size_t i = 0; i < d.size(); ++i) magnitude[i] = std::fabs(d[i]);
  const std::vector<double> ranks = average_ranks(magnitude);
  for (size_t i = 0; i < d.size(); ++i) test.w_plus += d[i] > 0 ? ranks[i] : 0.0;

  std::sort(magnitude.begin(), magnitude.end());
  double ties = 0;  // Σ_g (t_g³ − t_g)
  for (size_t first = 0; first < magnitude.size();) {
    size_t last = first;
    while (last + 1 < magnitude.size() && magnitude[last + 1] == magnitude[first]) ++last;
    const auto size = static_cast<double>(last - first + 1);
    ties += size * size * size - size;
    first = last + 1;
  }
  const auto n = static_cast<double>(test.n);
  const double mean = n * (n + 1) / 4, variance = n * (n + 1) * (2 * n + 1) / 24 - ties / 48;
  test.z = variance > 0 ? (test.w_plus - mean) / std::sqrt(variance) : 0.0;
  if (test.n <= 50 && ties == 0) {
    // Without ties W+ is an integer in [0, n(n+1)/2]; count the sign patterns giving each value.
    const int64_t top = test.n * (test.n + 1) / 2;
    std::vector<uint64_t> count(top + 1, 0);  // c_k(w); at most 2^50, exact in 64 bits
    count[0] = 1;
    for (int64_t k = 1; k <= test.n; ++k)
      for (int64_t w = top; w >= k; --w) count[w] += count[w - k];
    const auto w = static_cast<int64_t>(std::llround(test.w_plus));
    uint64_t below = 0, above = 0;  // #{W+ <= w}, #{W+ >= w}
    for (int64_t v = 0; v <= top; ++v) (v <= w ? below : above) += count[v];
    above += count[w];
    const double all = std::ldexp(1.0, static_cast<int>(test.n));
    test.p = std::min(1.0, 2 * static_cast<double>(std::min(below, above)) / all);
    test.exact = true;
  } else {
    test.p = std::erfc(std::fabs(test.z) / std::sqrt(2.0));
  }
  return test;
}

namespace {
const MethodSummary& summary_of(const Faithfulness& f, const std::string& method) {
  const auto found = std::find_if(f.methods.begin(), f.methods.end(), [&method](const MethodSummary& m) { return m.method == method; });
  AG_CHECK(found != f.methods.end(), "compare methods: no method '" << method << "' in the table");
  return *found;
}
}  // namespace

MethodComparison compare_methods(const Faithfulness& f, const std::string& a, const std::string& b) {
  const MethodSummary &first = summary_of(f, a), &second = summary_of(f, b);
  AG_CHECK(f.windows.size() == first.rho.size() && f.windows.size() == second.rho.size(),
           "compare methods: " << f.windows.size() << " windows for " << first.rho.size() << " predictions");
  std::vector<double> total, count;  // per window: Σ (ρ_a − ρ_b) and how many
  for (size_t i = 0; i < f.windows.size(); ++i) {
    const auto w = static_cast<size_t>(f.windows[i]);
    if (w >= total.size()) total.resize(w + 1, 0.0), count.resize(w + 1, 0.0);
    if (std::isnan(first.rho[i]) || std::isnan(second.rho[i])) continue;
    total[w] += first.rho[i] - second.rho[i];
    count[w] += 1;
  }
  std::vector<double> means;
  for (size_t w = 0; w < total.size(); ++w)
    if (count[w] > 0) means.push_back(total[w] / count[w]);
  MethodComparison c{a, b, 0, wilcoxon_signed_rank(means), static_cast<int64_t>(means.size())};
  c.mean_difference = means.empty() ? 0.0 : std::accumulate(means.begin(), means.end(), 0.0) / static_cast<double>(means.size());
  return c;
}

}  // namespace ag::interp
