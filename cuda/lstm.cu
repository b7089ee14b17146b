// The LSTM cell, one step for every row: one thread per (row, unit), the math
// of core/lstm_math.h. Reference: core/cpu/lstm.cpp.
#include "core/lstm_math.h"
#include "cuda/cuda.h"
#include "cuda/launch.cuh"

namespace ag::cuda {

namespace {
template <class T> struct LstmCellStep {
  const T *G, *c_prev;
  T *act, *c, *h;
  int64_t C;
  __device__ void operator()(int64_t index) const {
    const int64_t b = index / C, j = index % C;
    lstm_cell_unit(G + b * 4 * C, c_prev + b * C, C, j, act + b * 4 * C, c + b * C, h + b * C);
  }
};
template <class T> struct LstmCellStepBackward {
  const T *act, *c_prev, *c, *dh, *dc;
  T *dG, *dc_prev;
  int64_t C;
  __device__ void operator()(int64_t index) const {
    const int64_t b = index / C, j = index % C;
    lstm_cell_unit_backward(act + b * 4 * C, c_prev + b * C, c + b * C, dh + b * C, dc + b * C, C, j, dG + b * 4 * C,
                            dc_prev + b * C);
  }
};
}  // namespace

void lstm_cell(const Tensor& G, const Tensor& c_prev, Tensor& act, Tensor& c, Tensor& h) {
  visit_floating(G.dtype(), "lstm_cell", [&](auto zero) {
    using T = decltype(zero);
    for_each_index(c_prev.numel(), LstmCellStep<T>{ptr<const T>(G), ptr<const T>(c_prev), ptr<T>(act), ptr<T>(c),
                                                   ptr<T>(h), c_prev.size(1)});
  });
}

void lstm_cell_backward(const Tensor& act, const Tensor& c_prev, const Tensor& c, const Tensor& dh, const Tensor& dc,
                        Tensor& dG, Tensor& dc_prev) {
  visit_floating(act.dtype(), "lstm_cell_backward", [&](auto zero) {
    using T = decltype(zero);
    for_each_index(c_prev.numel(),
                   LstmCellStepBackward<T>{ptr<const T>(act), ptr<const T>(c_prev), ptr<const T>(c), ptr<const T>(dh),
                                           ptr<const T>(dc), ptr<T>(dG), ptr<T>(dc_prev), c_prev.size(1)});
  });
}

}  // namespace ag::cuda
