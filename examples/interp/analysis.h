// What a trained GPT does, measured with its own forward and backward:
//   attention_maps      A of every layer and head for one sequence (the dense
//                       implementation keeps it; a linear-attention layer, the
//                       weights its output implies);
//   attention_rollout   Abnar & Zuidema (2020): which earlier positions each
//                       position draws on through all the layers;
//   integrated_gradients Sundararajan et al. (2017): each input position's share
//                       of one logit;
//   head_importance     Michel et al. (2019): mean |∂L/∂g_h| of each head's gate.
// The derivations: docs/backprop.md, "Integrated gradients, head gates and rollout".
#pragma once
#include <cstdint>
#include <vector>

#include "core/tensor.h"
#include "nn/gpt.h"

namespace ag::interp {

// For a sequence of T token ids (T <= block_size): A [H, T, T] of each of the N
// layers (float64, on the CPU), from one forward in eval mode. An ssd model's
// layers also give each head's decay a_t averaged over the positions, if
// `mean_decays` is given ([N][H]; left empty for the other functions).
std::vector<Tensor> attention_maps(nn::GPT& model, const std::vector<int64_t>& ids,
                                   std::vector<std::vector<double>>* mean_decays = nullptr);

// R = Ã_N ··· Ã_2 Ã_1 with Ã_l = ½ (mean over heads of A_l) + ½ I: the residual
// stream carries half of each position's own state past every layer. Each Ã_l is
// row-stochastic, so each row of R [T, T] sums to 1. With `gates` ([N][H], a
// pruned model's), the mean is over the heads that are on.
Tensor attention_rollout(const std::vector<Tensor>& maps, const std::vector<std::vector<double>>& gates = {});

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

// The gates with the K least important heads among those on switched off
// (ties: the earlier head first). [N][H] of 0 and 1.
std::vector<std::vector<double>> prune_least_important(const std::vector<std::vector<double>>& importance,
                                                       const std::vector<std::vector<double>>& gates, int64_t K);

}  // namespace ag::interp
