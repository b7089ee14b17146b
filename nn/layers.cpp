#include "nn/layers.h"

#include <cmath>
#include <vector>

#include "core/context_parallel.h"
#include "dist/communicator.h"

namespace ag::nn {

Embedding::Embedding(int64_t V, int64_t C, Generator* gen)
    : weight_(register_parameter("weight", Tensor::randn({V, C}, DType::Float32, gen))) {}

Tensor Embedding::forward(const Tensor& indices) const { return embedding(weight_, indices); }

LayerNorm::LayerNorm(int64_t C, double eps)
    : weight_(register_parameter("weight", Tensor::ones({C}))),
      bias_(register_parameter("bias", Tensor::zeros({C}))),
      eps_(eps) {}

Tensor LayerNorm::forward(const Tensor& x) const { return layer_norm(x, weight_, bias_, eps_); }

CausalConv1d::CausalConv1d(const Config& config, Generator* gen) {
  AG_CHECK(config.width >= 1 && config.channels >= 1,
           "CausalConv1d: width " << config.width << " and channels " << config.channels << " must be positive");
  const double bound = 1.0 / std::sqrt(static_cast<double>(config.width));  // fan-in: W taps of one channel
  weight_ = register_parameter("weight", Tensor::uniform({config.width, config.channels}, -bound, bound, DType::Float32, gen));
  bias_ = register_parameter("bias", Tensor::uniform({config.channels}, -bound, bound, DType::Float32, gen));
}

Tensor CausalConv1d::forward(const Tensor& x) const { return causal_conv1d(x, weight_, bias_); }

Tensor CausalConv1d::forward_cached(const Tensor& x, Tensor& history) const {
  const int64_t W = weight_.size(0), B = x.size(0), C = weight_.size(1);
  if (W == 1) return forward(x);  // no earlier input reaches the output
  if (!history.defined()) history = Tensor::zeros({B, W - 1, C}, x.dtype(), x.device());
  const Tensor window = concat({history, x}, 1);  // [B, W − 1 + T, C]
  const int64_t length = window.size(1);
  history = slice(window, 1, length - (W - 1), length);
  return slice(forward(window), 1, W - 1, length);
}

// Chunk c's W − 1 inputs before it are chunk c − 1's last (chunks are at least that long), here
// or on another process: every chunk's tail is gathered once, and each half runs as a decode
// step after its halo (zeros before the sequence's first chunk).
Tensor CausalConv1d::forward(const Tensor& x, dist::Communicator& group) const {
  const int64_t W = weight_.size(0), B = x.size(0), channels = x.size(2);
  if (W == 1) return forward(x);
  const ZigzagSplit split(x.size(1) * group.size(), group.size(), group.rank());
  const int64_t C = split.chunk();
  AG_CHECK(C >= W - 1, "CausalConv1d: chunks of " << C << " positions (block size " << split.T << " over 2·"
                                                   << split.P << ") are shorter than the " << W - 1
                                                   << " inputs before each that a width-" << W << " convolution reads");
  std::vector<Tensor> tails;  // each half's last W − 1 inputs
  for (int64_t h = 0; h < 2; ++h) tails.push_back(slice(x, 1, (h + 1) * C - (W - 1), (h + 1) * C).reshape({1, B, W - 1, channels}));
  const Tensor all_tails = gather_chunks(concat(tails, 0), group);  // [2P, B, W − 1, C]
  std::vector<Tensor> out;
  for (int64_t h = 0; h < 2; ++h) {
    const int64_t c = split.chunk_of(h);
    Tensor halo = c == 0 ? Tensor() : slice(all_tails, 0, c - 1, c).reshape({B, W - 1, channels});
    out.push_back(forward_cached(slice(x, 1, h * C, (h + 1) * C), halo));
  }
  return concat(out, 1);
}

AddLayerNorm LayerNorm::forward_residual(const Tensor& x, const Tensor& residual) const {
  return add_layer_norm(x, residual, weight_, bias_, eps_);
}

MLP::MLP(const Config& config, Generator* gen)
    : fc_(register_module("fc", std::make_shared<Linear>(Linear::Config{.in = config.C, .out = 4 * config.C}, gen))),
      proj_(register_module("proj", std::make_shared<Linear>(Linear::Config{.in = 4 * config.C, .out = config.C}, gen))),
      gelu_(register_module("gelu", std::make_shared<GELU>(config.gelu))),
      dropout_(register_module("dropout", std::make_shared<Dropout>(config.dropout))) {}

// fc, the GELU and proj are one op (core/ops/mlp.cpp), so that a device can fold
// fc's bias and the GELU into fc's GEMM and GELU's derivative into the GEMM of
// proj's backward; the composed proj_->forward(gelu_->forward(fc_->forward(x))) is its reference.
Tensor MLP::forward(const Tensor& x) const {
  return dropout_->forward(mlp(x, fc_->weight(), fc_->bias(), proj_->weight(), proj_->bias(), gelu_->approx()));  // [B, T, C]
}

}  // namespace ag::nn
