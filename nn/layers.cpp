#include "nn/layers.h"

#include <cmath>

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

AddLayerNorm LayerNorm::forward_residual(const Tensor& x, const Tensor& residual) const {
  return add_layer_norm(x, residual, weight_, bias_, eps_);
}

MLP::MLP(const Config& config, Generator* gen)
    : fc_(register_module("fc", std::make_shared<Linear>(Linear::Config{.in = config.C, .out = 4 * config.C}, gen))),
      proj_(register_module("proj", std::make_shared<Linear>(Linear::Config{.in = 4 * config.C, .out = config.C}, gen))),
      gelu_(register_module("gelu", std::make_shared<GELU>(config.gelu))),
      dropout_(register_module("dropout", std::make_shared<Dropout>(config.dropout))) {}

// fc's bias rides with the GELU rather than in fc's GEMM: bias_gelu is one pass
// forward and one backward (dX and db together), the composed
// gelu_->forward(fc_->forward(x)) its reference.
Tensor MLP::forward(const Tensor& x) const {
  const Tensor h = bias_gelu(matmul(x, fc_->weight()), fc_->bias(), gelu_->approx());  // [B, T, 4C]
  return dropout_->forward(proj_->forward(h));                                         // [B, T, C]
}

}  // namespace ag::nn
