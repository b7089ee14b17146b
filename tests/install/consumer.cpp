// Built against an installed attograd: one matmul, its backward, and a check
// of the gradient against the hand-derived one (docs/backprop.md, section 5).
#include <cstdio>
#include <vector>

#include "core/autograd.h"
#include "core/ops.h"

int main() {
  using namespace ag;
  const Tensor X = Tensor::from_vector({1, 2, 3, 4, 5, 6}, {3, 2}, DType::Float64);
  Tensor W = Tensor::from_vector({0.5, -1, 2, 0.25}, {2, 2}, DType::Float64);
  W.requires_grad_();
  sum(matmul(X, W)).backward();
  // L = Σ XW, so dW = Xᵀ 1: row k of dW holds column k's sum of X, twice.
  const std::vector<double> expected = {9, 9, 12, 12}, dW = W.grad().to_vector();
  std::printf("dW = [%g %g; %g %g], expected [9 9; 12 12]\n", dW[0], dW[1], dW[2], dW[3]);
  return dW == expected ? 0 : 1;
}
