// Linear: y = xW + b, with W stored [in, out] so the forward is a plain matmul
// (the users' X W_Q, not PyTorch's x Wᵀ).
#pragma once
#include "core/random.h"
#include "nn/module.h"

namespace ag::nn {

class Linear : public Module {
 public:
  // weight [in, out] and bias [out] ~ U(−1/√in, 1/√in), PyTorch's default, drawn
  // from `gen` (the default generator if null). Models re-initialise them.
  struct Config {
    int64_t in = 0, out = 0;
    bool bias = true;
  };
  explicit Linear(const Config& config, Generator* gen = nullptr);

  // x [..., in] -> y [..., out]
  Tensor forward(const Tensor& x) const;

  const Tensor& weight() const { return weight_; }  // W [in, out]
  const Tensor& bias() const { return bias_; }      // b [out]; undefined without bias

 private:
  Tensor weight_, bias_;
};

}  // namespace ag::nn
