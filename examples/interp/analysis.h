// What a trained GPT does, measured with its own forward and backward:
//   attention_maps      A of every layer and head for one sequence (the dense
//                       implementation keeps it; a linear-attention layer, the
//                       weights its output implies);
//   attention_rollout   Abnar & Zuidema (2020): which earlier positions each
//                       position draws on through all the layers;
//   attention_flow      the same graph read as a flow network: the most weight
//                       that can pass from an output position to an input one;
//   integrated_gradients Sundararajan et al. (2017): each input position's share
//                       of one logit;
//   head_importance     Michel et al. (2019): mean |∂L/∂g_h| of each head's gate.
// The derivations: docs/backprop.md, "Integrated gradients, head gates and rollout".
#pragma once
#include <cstdint>
#include <memory>
#include <vector>

#include "core/tensor.h"
#include "nn/gpt.h"

namespace ag::interp {

// One forward of a sequence of token ids in eval mode, without a graph, with a probe on every layer's
// mixer (nn/mixer.h): each layer's record of it (A, Q, K, V, and an ssd layer's decays), in layer order.
std::vector<nn::MixerRecord> forward_recording(nn::GPT& model, const std::vector<int64_t>& ids);

// For a sequence of T token ids (T <= block_size): A [H, T, T] of each of the N
// layers (float64, on the CPU), from one forward in eval mode. An ssd model's
// layers also give each head's decay a_t averaged over the positions, if
// `mean_decays` is given ([N][H]; left empty for the other functions).
std::vector<Tensor> attention_maps(nn::GPT& model, const std::vector<int64_t>& ids,
                                   std::vector<std::vector<double>>* mean_decays = nullptr);

// The geometric view of each head's score, S_ij = q_i·k_j / √d_h = (‖q_i‖‖k_j‖ / √d_h) · cos θ_ij:
// its norm part and its angle part, [H, T, T] each per layer (float64; 0 where j > i), from one
// forward in eval mode. Softmax attention with learned, alibi or no positions only (alibi's bias
// is not part of q·k; rope rotates q and k inside the op, so the kept ones are not what it compares).
struct ScoreParts {
  Tensor norm, cosine;
};
std::vector<ScoreParts> score_decomposition(nn::GPT& model, const std::vector<int64_t>& ids);

// How a head picks among a query's keys: along row i, ‖q_i‖ is fixed, so the score varies with ‖k_j‖ and
// cos θ_ij alone. The mean over the rows with 3 or more keys of the Pearson correlation of S_i· with its
// angle part and with its norm part; a row where a part is constant leaves that part's mean (NaN if every row does).
struct Selection {
  double by_angle = 0, by_norm = 0;
};
std::vector<Selection> head_selection(const ScoreParts& parts);  // [H]

// Pearson's correlation of x and y (the same length, >= 2); NaN where either is constant.
double pearson(const std::vector<double>& x, const std::vector<double>& y);

// R = Ã_N ··· Ã_2 Ã_1 with Ã_l = ½ (mean over heads of A_l) + ½ I: the residual
// stream carries half of each position's own state past every layer. Each Ã_l is
// row-stochastic, so each row of R [T, T] sums to 1. With `gates` ([N][H], a
// pruned model's), the mean is over the heads that are on.
Tensor attention_rollout(const std::vector<Tensor>& maps, const std::vector<std::vector<double>>& gates = {});

// Ã_l = ½ (mean over the heads that are on of A_l) + ½ I of each layer, [N][T·T] row-major
// (a layer with every head off: Ã = I): what rollout multiplies and flow routes through.
std::vector<std::vector<double>> residual_mixed(const std::vector<Tensor>& maps,
                                                const std::vector<std::vector<double>>& gates = {});

// Abnar & Zuidema's attention flow through layered capacities: the graph has a node
// (l, i) for each layer boundary l = 0 … N and position i, and an edge from (l+1, i)
// down to (l, j) of capacity capacities[l][i·T + j]. Returns flow[j], the maximum flow
// from (N, output) to (0, j), for j = 0 … T−1 (Boost.Graph's Boykov-Kolmogorov max-flow).
std::vector<double> max_flows_from(const std::vector<std::vector<double>>& capacities, int64_t T, int64_t output);

// F [T, T]: row i the flows from output position i to every input position j, through
// the residual-mixed layers Ã_l. Each row's flows lie in [0, 1] (Ã's rows sum to 1),
// and F_ij = 0 for j > i under a causal mask.
Tensor attention_flow(const std::vector<Tensor>& maps, const std::vector<std::vector<double>>& gates = {});

// A float64 copy of the model's weights on the CPU, in eval mode: what the attributions differentiate.
std::unique_ptr<nn::GPT> float64_copy(const nn::GPT& model);

struct Attribution {
  int64_t position = 0;  // the prediction made at this input position (of the character after it)
  int64_t target = 0;    // the character whose logit is explained: the model's top prediction there
  std::vector<double> per_position;  // [T]: Σ over C of IG for each position's token embedding
  double sum = 0;                    // Σ per_position
  double f_input = 0, f_baseline = 0;  // the logit at the input, and with every token embedding zero
  double residual() const;           // |sum − (f_input − f_baseline)|, completeness' gap
};

// Integrated gradients of F = logit[position, target] with respect to the token
// embeddings E [T, C] (baseline E' = 0; positions kept), the path integral by the
// trapezoid rule with `steps` intervals: steps + 1 gradients, from one batched
// forward and backward. Computed in float64 on a copy of the model's weights.
Attribution integrated_gradients(const nn::GPT& model, const std::vector<int64_t>& ids, int64_t position,
                                 int64_t steps = 64);

struct TokenBatch {
  Tensor x, y;  // int64 [B, T]: inputs and next-token targets
};

// Michel et al.'s importance of every head: I_h = mean over the batches of
// |∂L/∂g_h| at g = the model's gates (1 for a head that is on), L the mean
// cross-entropy. [N][H]. The model's gates are restored afterwards.
std::vector<std::vector<double>> head_importance(nn::GPT& model, const std::vector<TokenBatch>& batches);

// The mean loss over the batches (eval mode, no graph).
double mean_loss(nn::GPT& model, const std::vector<TokenBatch>& batches);

struct Head {
  int64_t layer = 0, head = 0;
};
// The heads that are on (gate not 0), least important first (ties: the earlier head first).
std::vector<Head> heads_by_importance(const std::vector<std::vector<double>>& importance,
                                      const std::vector<std::vector<double>>& gates);

// The gates with the K least important heads among those on switched off
// (ties: the earlier head first). [N][H] of 0 and 1.
std::vector<std::vector<double>> prune_least_important(const std::vector<std::vector<double>>& importance,
                                                       const std::vector<std::vector<double>>& gates, int64_t K);

// The mean loss over the batches as the heads of `order` are switched off one at a time, from the
// model's own gates (k = 0) to all of `order` off: [order.size() + 1]. The model's head mask is restored.
std::vector<double> pruning_curve(nn::GPT& model, const std::vector<TokenBatch>& batches, const std::vector<Head>& order);

}  // namespace ag::interp
