// Is attention an explanation? Each method scores the earlier positions of one
// prediction; erasing a position and watching the logit says what it did
// (Jain & Wallace 2019; Abnar & Zuidema 2020; Kobayashi et al. 2020). The
// methods, for F = logit[t, c] of the model's top character c after position t,
// scored for each position j ≤ t:
//   attention   the last layer's A[t, j], mean over the heads that are on;
//   rollout     R[t, j] (attention_rollout);
//   flow        the max-flow from t to j (attention_flow);
//   flow÷uniform flow[t, j] divided by the flow to j of the same stack with every layer's
//               attention uniform over its mask: flow's position bias taken out;
//   grad×input  Σ_c E_jc ∂F/∂E_jc at the input (E the token embeddings);
//   IG          integrated gradients (analysis.h);
//   ‖αvW_O‖     ‖Σ_h g_h A^h[t, j] v^h_j W_O^h‖ in the last layer: what j's value
//               actually adds to t's residual stream, not only its weight;
//   uniform flow the content-free control: the flow of that uniform stack, which
//               sees no token, so ranks the positions by where they are alone.
// The ground truth: d_j = F(x) − F(x with E_j replaced by the baseline 0, its
// position kept), all j in one batched forward. Beside ρ with erasure, each method's ρ with the
// position j, the partial ρ with erasure given the position, and paired tests of two methods'
// ρ (Wilcoxon's signed-rank test over the prompts' windows). The derivations:
// docs/interpretability.md, "Is attention an explanation?".
#pragma once
#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "nn/gpt.h"

namespace ag::interp {

// Each value's rank from 1 (smallest); tied values share the mean of their ranks.
std::vector<double> average_ranks(const std::vector<double>& x);
// Spearman's ρ: Pearson's correlation of the average ranks. NaN where x or y is
// constant (no ranking to compare).
double spearman(const std::vector<double>& x, const std::vector<double>& y);
// Spearman's partial ρ of x and y given z: the correlation of their ranks once each rank's linear
// dependence on z's ranks is taken out,
//   ρ_xy·z = (ρ_xy − ρ_xz ρ_yz) / √((1 − ρ_xz²)(1 − ρ_yz²)).
// NaN where any of the three is, or where x or y ranks exactly as z does (|ρ| = 1: nothing is left).
double partial_correlation(double r_xy, double r_xz, double r_yz);
double partial_spearman(const std::vector<double>& x, const std::vector<double>& y, const std::vector<double>& z);
// Positions by decreasing score (ties: the earlier first).
std::vector<int64_t> order_by_score(const std::vector<double>& scores);

// The model's top character after ids[position] and its logit F.
struct Prediction {
  int64_t position = 0, target = 0;
  double logit = 0;
};
// `exact`: a float64 copy (float64_copy) for all the functions below.
Prediction predict(nn::GPT& exact, const std::vector<int64_t>& ids, int64_t position);

// F(x) − F(x with the token embeddings of `erased[s]` set to 0, positions kept) for each set s, one
// batched forward of erased.size() sequences.
std::vector<double> logit_drops(nn::GPT& exact, const std::vector<int64_t>& ids, const Prediction& p,
                                const std::vector<std::vector<int64_t>>& erased);
// d_j of each single position j = 0 … p.position.
std::vector<double> erasure_effects(nn::GPT& exact, const std::vector<int64_t>& ids, const Prediction& p);
// Deletion curves: for each order, the drop once its first k positions are erased together,
// k = 1 … K ([orders][K], one batched forward).
std::vector<std::vector<double>> deletion_curves(nn::GPT& exact, const std::vector<int64_t>& ids, const Prediction& p,
                                                 const std::vector<std::vector<int64_t>>& orders, int64_t K);

// Σ_c E_jc ∂F/∂E_jc for j = 0 … p.position, from one backward.
std::vector<double> gradient_times_input(nn::GPT& exact, const std::vector<int64_t>& ids, const Prediction& p);
// ‖Σ_h g_h A^h[t, j] v^h_j W_O^h‖ of the last layer for j = 0 … t (t = position).
std::vector<double> attention_value_norms(nn::GPT& exact, const std::vector<int64_t>& ids, int64_t position);

// The content-free control: the same stack of layers ([H, T, T] each) with every head's A uniform over
// the layer's mask, A[i, j] = 1 / |S_i| for j in S_i = the keys some head of the layer weights (not 0):
// for a causal model S_i = {0 … i}. residual_mixed of it, with the model's gates, is Ã on the same mask.
std::vector<Tensor> uniform_attention_like(const std::vector<Tensor>& maps);

// The methods in table order; scores[m][j] for j = 0 … position.
struct Explanations {
  Prediction prediction;
  std::vector<std::string> methods;
  std::vector<std::vector<double>> scores;
};
// Every method's scores for one prediction (IG with `steps` trapezoid intervals). Refuses a model whose
// attention weights are not distributions over the keys (ssd): rollout and flow route a distribution.
Explanations explain_all(nn::GPT& exact, const std::vector<int64_t>& ids, int64_t position, int64_t steps);

inline constexpr int64_t kDeletionSteps = 8;  // the deletion curves' k = 1 … 8

// The mean, the standard deviation (n − 1) and the count of the values that are not NaN.
double defined_mean(const std::vector<double>& values);
double defined_sd(const std::vector<double>& values);
int64_t defined_count(const std::vector<double>& values);

// Over many predictions: per method (and the two references, erasure itself and a random order) the
// Spearman ρ of its scores with the erasure effects, with the positions 0 … t, the partial ρ with erasure
// given the position, and the mean deletion curve.
struct MethodSummary {
  std::string method;
  std::vector<double> rho;           // one per prediction (NaN where the method's scores were constant)
  std::vector<double> rho_position;  // ρ(scores, j): > 0 ranks the recent positions first, < 0 the distant
  std::vector<double> rho_partial;   // partial ρ(scores, erasure | j)
  std::vector<double> deletion;      // [kDeletionSteps]: mean drop of F after erasing its top k
  double mean_rho() const;           // over the defined ρ
  double spread_rho() const;         // their standard deviation
  int64_t defined() const;           // how many ρ are defined
};
struct Faithfulness {
  std::vector<MethodSummary> methods;  // explain_all's order, then "random", then "erasure"
  int64_t predictions = 0;
  std::vector<int64_t> windows;  // [predictions]: the prompt each came from (its cluster in the paired tests)
};
// Each prompt (a sequence of ids) explained at each of its `positions[p]` (each ≥ kDeletionSteps:
// every curve has 8 positions to erase). The random order is drawn from `seed`.
Faithfulness measure_faithfulness(const nn::GPT& model, const std::vector<std::vector<int64_t>>& prompts,
                                  const std::vector<std::vector<int64_t>>& positions, int64_t steps, uint64_t seed);

// Wilcoxon's signed-rank test of "the differences d are symmetric about 0", two-sided. Zeros are dropped
// (Wilcoxon's rule), the n others ranked by |d| with average ranks for ties, W+ = the sum of the ranks of
// the positive d. Under the hypothesis each rank's sign is a fair coin, so
//   E[W+] = n(n+1)/4,   Var[W+] = n(n+1)(2n+1)/24 − Σ_g (t_g³ − t_g)/48   (t_g: the size of tie group g).
// Exact when n <= 50 and no |d| ties: P(W+ = w) = c_n(w) / 2^n, c_n(w) the subsets of the ranks {1 … n}
// with sum w, from c_k(w) = c_{k−1}(w) + c_{k−1}(w − k); p = min(1, 2 min(P(W+ <= w), P(W+ >= w))).
// Otherwise the normal approximation without continuity correction: z = (W+ − E[W+]) / √Var[W+],
// p = erfc(|z| / √2). n = 0 gives p = 1.
struct SignedRankTest {
  int64_t n = 0;  // the nonzero differences
  double w_plus = 0, z = 0, p = 1;
  bool exact = false;
};
SignedRankTest wilcoxon_signed_rank(const std::vector<double>& differences);

// Is method a's ρ with erasure higher than b's? The 4 predictions of one window share its text, so they are
// not independent: the per-prediction differences ρ_a − ρ_b are averaged within each window (over the
// predictions where both ρ are defined) and the test runs over the windows.
struct MethodComparison {
  std::string a, b;
  double mean_difference = 0;  // the mean over the windows of their mean ρ_a − ρ_b
  SignedRankTest test;         // test.n: the windows with a nonzero mean difference
  int64_t windows = 0;         // the windows with a defined difference
};
MethodComparison compare_methods(const Faithfulness& f, const std::string& a, const std::string& b);
// The comparisons docs/interpretability.md draws conclusions from; `faithfulness` and the report print them.
inline const std::vector<std::pair<std::string, std::string>> kComparisons = {
    {"rollout", "attention"}, {"‖αvW_O‖", "attention"}, {"grad×input", "IG"},     {"rollout", "grad×input"},
    {"flow", "random"},       {"flow", "uniform flow"},  {"flow÷uniform", "flow"}, {"flow÷uniform", "rollout"}};

}  // namespace ag::interp
