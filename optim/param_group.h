// Parameters grouped by their hyperparameters: what optimizers and their flat
// buffers (optim/flat_parameters.h) are made from.
#pragma once
#include <vector>

#include "core/tensor.h"

namespace ag::optim {

using NamedParameter = NamedTensor;  // "blocks.0.attn.w_q.weight" and its tensor

// Parameters that share hyperparameters; only weight decay varies between groups.
struct ParamGroup {
  std::vector<NamedParameter> params;
  double weight_decay = 0;
};

// Optimizer state by name, e.g. {"exp_avg.blocks.0.attn.w_q.weight", m}.
using NamedTensors = std::vector<NamedTensor>;

// nanoGPT's split (its configure_optimizers): matrices (dim() >= 2: linear weights, embeddings) decay; biases
// and LayerNorm gains (dim() < 2) don't. Returns {decayed group, undecayed group}.
std::vector<ParamGroup> decay_groups(const std::vector<NamedParameter>& params, double weight_decay);

}  // namespace ag::optim
