// The LSTM cell on CUDA: cuda/lstm_kernels.cuh's launches on the GPU. Reference: core/cpu/lstm.cpp.
#include "cuda/cuda.h"
#include "cuda/launch.cuh"
#include "cuda/lstm_kernels.cuh"

namespace ag::cuda {

void lstm_cell(const Tensor& G, const Tensor& c_prev, Tensor& act, Tensor& c, Tensor& h) {
  visit_floating(G.dtype(), "lstm_cell", [&](auto zero) {
    using T = decltype(zero);
    lstm_cell_launch(Gpu(), ptr<const T>(G), ptr<const T>(c_prev), c_prev.size(0), c_prev.size(1), ptr<T>(act),
                     ptr<T>(c), ptr<T>(h));
  });
}

void lstm_cell_backward(const Tensor& act, const Tensor& c_prev, const Tensor& c, const Tensor& dh, const Tensor& dc,
                        Tensor& dG, Tensor& dc_prev) {
  visit_floating(act.dtype(), "lstm_cell_backward", [&](auto zero) {
    using T = decltype(zero);
    lstm_cell_backward_launch(Gpu(), ptr<const T>(act), ptr<const T>(c_prev), ptr<const T>(c), ptr<const T>(dh),
                              ptr<const T>(dc), c_prev.size(0), c_prev.size(1), ptr<T>(dG), ptr<T>(dc_prev));
  });
}

}  // namespace ag::cuda
