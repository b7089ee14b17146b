// Is attention an explanation? Each method scores the earlier positions of one
// prediction; erasing a position and watching the logit says what it did
// (Jain & Wallace 2019; Abnar & Zuidema 2020; Kobayashi et al. 2020). The
// methods, for F = logit[t, c] of the model's top character c after position t,
// scored for each position j ≤ t:
//   attention   the last layer's A[t, j], mean over the heads that are on;
//   rollout     R[t, j] (attention_rollout);
//   flow        the max-flow from t to j (attention_flow);
//   grad×input  Σ_c E_jc ∂F/∂E_jc at the input (E the token embeddings);
//   IG          integrated gradients (analysis.h);
//   ‖αvW_O‖     ‖Σ_h g_h A^h[t, j] v^h_j W_O^h‖ in the last layer: what j's value
//               actually adds to t's residual stream, not only its weight.
// The ground truth: d_j = F(x) − F(x with E_j replaced by the baseline 0, its
// position kept), all j in one batched forward. The derivations:
// docs/interpretability.md.
#pragma once
#include <cstdint>
#include <string>
#include <vector>

#include "nn/gpt.h"

namespace ag::interp {

// Each value's rank from 1 (smallest); tied values share the mean of their ranks.
std::vector<double> average_ranks(const std::vector<double>& x);
// Spearman's ρ: Pearson's correlation of the average ranks. NaN where x or y is
// constant (no ranking to compare).
double spearman(const std::vector<double>& x, const std::vector<double>& y);
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

// Over many predictions: per method (and the two references, erasure itself and a random order) the
// Spearman ρ of its scores with the erasure effects, and the mean deletion curve.
struct MethodSummary {
  std::string method;
  std::vector<double> rho;       // one per prediction (NaN where the method's scores were constant)
  std::vector<double> deletion;  // [kDeletionSteps]: mean drop of F after erasing its top k
  double mean_rho() const;       // over the defined ρ
  double spread_rho() const;     // their standard deviation
  int64_t defined() const;       // how many ρ are defined
};
struct Faithfulness {
  std::vector<MethodSummary> methods;  // explain_all's order, then "random", then "erasure"
  int64_t predictions = 0;
};
// Each prompt (a sequence of ids) explained at each of its `positions[p]` (each ≥ kDeletionSteps:
// every curve has 8 positions to erase). The random order is drawn from `seed`.
Faithfulness measure_faithfulness(const nn::GPT& model, const std::vector<std::vector<int64_t>>& prompts,
                                  const std::vector<std::vector<int64_t>>& positions, int64_t steps, uint64_t seed);

}  // namespace ag::interp
