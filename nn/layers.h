// The small layers a transformer is built from: Embedding, LayerNorm, GELU,
// Dropout, the MLP of a block, and ssd attention's causal convolution. Each forward is one or two ops of core/ops.h,
// where the derivatives live.
#pragma once
#include "core/ops.h"
#include "nn/linear.h"
#include "nn/module.h"

namespace ag::nn {

// A lookup table: row i of weight [V, C] is the vector of token i.
class Embedding : public Module {
 public:
  // weight [V, C] ~ N(0, 1), PyTorch's default, from `gen` (the default if null).
  Embedding(int64_t V, int64_t C, Generator* gen = nullptr);
  // indices int64 [...] -> [..., C]
  Tensor forward(const Tensor& indices) const;
  const Tensor& weight() const { return weight_; }  // [V, C]

 private:
  Tensor weight_;
};

// Normalises each row over its last dim, then scales and shifts:
// y = (x − mean) / √(var + eps) · weight + bias.
class LayerNorm : public Module {
 public:
  LayerNorm(int64_t C, double eps = 1e-5);  // weight [C] = 1, bias [C] = 0
  // x [..., C] -> [..., C]
  Tensor forward(const Tensor& x) const;
  // The residual add before the norm, fused: {x + residual, norm(x + residual)}.
  AddLayerNorm forward_residual(const Tensor& x, const Tensor& residual) const;

 private:
  Tensor weight_, bias_;
  double eps_;
};

// A causal depthwise convolution over time (ag::causal_conv1d): each channel c
// of y_t mixes channel c of x_{t−W+1} … x_t, with x before t = 0 taken as 0.
class CausalConv1d : public Module {
 public:
  // weight [W, C] and bias [C] ~ U(−1/√W, 1/√W), as PyTorch's Conv1d(C, C, W, groups = C).
  struct Config {
    int64_t channels = 0, width = 1;
  };
  explicit CausalConv1d(const Config& config, Generator* gen = nullptr);
  // x [B, T, C] -> [B, T, C]
  Tensor forward(const Tensor& x) const;
  // Decoding: `history` [B, W − 1, C] holds the W − 1 inputs before x's (zeros
  // before the first position; undefined: none yet) and becomes the last W − 1
  // of history and x. Equals the last rows of forward() over the whole sequence.
  Tensor forward_cached(const Tensor& x, Tensor& history) const;
  // Context parallelism: x [B, T / P, C] holds this process's rows of sequences split over `group`
  // (its two zigzag chunks, core/context_parallel.h); each chunk is convolved after the W − 1 inputs
  // before it, from the process that holds them (a collective). Equals those rows of forward() over
  // the whole sequence.
  Tensor forward(const Tensor& x, dist::Communicator& group) const;

 private:
  Tensor weight_, bias_;
};

class GELU : public Module {
 public:
  explicit GELU(GeluApprox approx = GeluApprox::Erf) : approx_(approx) {}
  Tensor forward(const Tensor& x) const { return gelu(x, approx_); }  // any shape
  GeluApprox approx() const { return approx_; }

 private:
  GeluApprox approx_;
};

// Zeroes each element with probability p in training (scaling the rest by
// 1/(1−p)); the identity in eval mode. Draws from the default generator.
class Dropout : public Module {
 public:
  explicit Dropout(double p) : p_(p) {}
  Tensor forward(const Tensor& x) const { return dropout(x, p_, is_training()); }  // any shape

 private:
  double p_;
};

// The feed-forward half of a block: fc (C → 4C), GELU, proj (4C → C), dropout.
class MLP : public Module {
 public:
  struct Config {
    int64_t C = 0;
    GeluApprox gelu = GeluApprox::Erf;
    double dropout = 0.0;
  };
  explicit MLP(const Config& config, Generator* gen = nullptr);
  // x [B, T, C] -> [B, T, C]
  Tensor forward(const Tensor& x) const;

 private:
  std::shared_ptr<Linear> fc_, proj_;
  std::shared_ptr<GELU> gelu_;
  std::shared_ptr<Dropout> dropout_;
};

}  // namespace ag::nn
