// The LSTM cell's kernels on CUDA, one step for every row: one thread per (row, unit), the math
// of core/lstm_math.h; with their launches, written once for any device (cuda/lstm.cu runs them on
// the GPU, tests/test_cuda_on_host.cpp on the host). Reference: core/cpu/lstm.cpp.
#pragma once
#include <cstdint>

#include "core/lstm_math.h"

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

// The launches on a device `dev` (cuda/launch.cuh's Gpu; the host tests' Device): B rows of C units,
// G and act [B, 4C]. Contracts: core/kernels.inc.
template <class T, class Device>
void lstm_cell_launch(const Device& dev, const T* G, const T* c_prev, int64_t B, int64_t C, T* act, T* c, T* h) {
  dev(B * C, LstmCellStep<T>{G, c_prev, act, c, h, C});
}

template <class T, class Device>
void lstm_cell_backward_launch(const Device& dev, const T* act, const T* c_prev, const T* c, const T* dh, const T* dc,
                               int64_t B, int64_t C, T* dG, T* dc_prev) {
  dev(B * C, LstmCellStepBackward<T>{act, c_prev, c, dh, dc, dG, dc_prev, C});
}

}  // namespace
}  // namespace ag::cuda
