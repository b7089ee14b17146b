// The LSTM cell's per-element math, written once for the CPU loops
// (core/cpu/lstm.cpp) and the CUDA kernels (cuda/lstm.cu). The op around it:
// core/ops/lstm.cpp; the derivation: docs/backprop.md, "The LSTM".
//
// One step t of one batch entry, unit j < C (the hidden size), from the
// pre-activations G = x_t W_ih + b_ih + h_{t−1} W_hh + b_hh [4C], whose four
// blocks of C are the gates in PyTorch's order i, f, g, o:
//   i = σ(G_i)  f = σ(G_f)  g = tanh(G_g)  o = σ(G_o)
//   c_t = f·c_{t−1} + i·g
//   h_t = o·tanh(c_t)
// The forward saves the four activations (Act [4C], same order) and c_t; the
// backward recomputes tanh(c_t) from c_t.
#pragma once
#include <cmath>
#include <cstdint>

#include "core/random.h"  // AG_HOST_DEVICE

namespace ag {

template <class T> AG_HOST_DEVICE inline T lstm_sigmoid(T x) {
  // σ(x) = 1/(1 + e^−x), from the side where the exponential cannot overflow
  if (x >= T(0)) return T(1) / (T(1) + std::exp(-x));
  const T e = std::exp(x);
  return e / (T(1) + e);
}

// Unit j of one row: G, Act [4C] (the row's gates), c_prev, c, h [C].
template <class T>
AG_HOST_DEVICE inline void lstm_cell_unit(const T* G, const T* c_prev, int64_t C, int64_t j, T* act, T* c, T* h) {
  const T i = lstm_sigmoid(G[j]);          // input gate
  const T f = lstm_sigmoid(G[C + j]);      // forget gate
  const T g = std::tanh(G[2 * C + j]);          // candidate
  const T o = lstm_sigmoid(G[3 * C + j]);  // output gate
  const T c_t = f * c_prev[j] + i * g;     // c_t = f·c_{t−1} + i·g
  act[j] = i, act[C + j] = f, act[2 * C + j] = g, act[3 * C + j] = o;
  c[j] = c_t;
  h[j] = o * std::tanh(c_t);                    // h_t = o·tanh(c_t)
}

// Unit j of one row, backward: from dh (all that reaches h_t: the output's
// gradient and the next step's through W_hh) and dc (what reaches c_t from
// c_{t+1}), the pre-activations' dG [4C] and dc_prev [C]. Each line quotes the
// forward line it differentiates.
template <class T>
AG_HOST_DEVICE inline void lstm_cell_unit_backward(const T* act, const T* c_prev, const T* c, const T* dh,
                                                   const T* dc, int64_t C, int64_t j, T* dG, T* dc_prev) {
  const T i = act[j], f = act[C + j], g = act[2 * C + j], o = act[3 * C + j];
  const T tc = std::tanh(c[j]);
  // h_t = o·tanh(c_t):           do = dh·tanh(c_t),  dc_t += dh·o·(1 − tanh²(c_t))
  const T d_o = dh[j] * tc;
  const T dc_t = dc[j] + dh[j] * o * (T(1) - tc * tc);
  // c_t = f·c_{t−1} + i·g:        df = dc_t·c_{t−1},  di = dc_t·g,  dg = dc_t·i,  dc_{t−1} = dc_t·f
  const T d_f = dc_t * c_prev[j], d_i = dc_t * g, d_g = dc_t * i;
  dc_prev[j] = dc_t * f;
  // i = σ(G_i), f = σ(G_f), o = σ(G_o):  σ' = σ(1 − σ);  g = tanh(G_g):  tanh' = 1 − g²
  dG[j] = d_i * i * (T(1) - i);
  dG[C + j] = d_f * f * (T(1) - f);
  dG[2 * C + j] = d_g * (T(1) - g * g);
  dG[3 * C + j] = d_o * o * (T(1) - o);
}

}  // namespace ag
