// The LSTM cell, one step for every row (core/lstm_math.h; the op: core/ops/lstm.cpp).
#include "core/cpu/cpu.h"
#include "core/cpu/loops.h"
#include "core/lstm_math.h"

namespace ag::cpu {

void lstm_cell(const Tensor& G, const Tensor& c_prev, Tensor& act, Tensor& c, Tensor& h) {
  visit_floating(G.dtype(), "lstm_cell", [&](auto zero) {
    using T = decltype(zero);
    const int64_t B = c_prev.size(0), C = c_prev.size(1);
    const T *pG = static_cast<const T*>(G.raw_data()), *pc_prev = static_cast<const T*>(c_prev.raw_data());
    T *pact = static_cast<T*>(act.raw_data()), *pc = static_cast<T*>(c.raw_data()), *ph = static_cast<T*>(h.raw_data());
#pragma omp parallel for schedule(static) if (B * C > kParallelGrain)
    for (int64_t b = 0; b < B; ++b)
      for (int64_t j = 0; j < C; ++j)
        lstm_cell_unit(pG + b * 4 * C, pc_prev + b * C, C, j, pact + b * 4 * C, pc + b * C, ph + b * C);
  });
}

void lstm_cell_backward(const Tensor& act, const Tensor& c_prev, const Tensor& c, const Tensor& dh, const Tensor& dc,
                        Tensor& dG, Tensor& dc_prev) {
  visit_floating(act.dtype(), "lstm_cell_backward", [&](auto zero) {
    using T = decltype(zero);
    const int64_t B = c_prev.size(0), C = c_prev.size(1);
    const auto in = [](const Tensor& t) { return static_cast<const T*>(t.raw_data()); };
    const T *pact = in(act), *pc_prev = in(c_prev), *pc = in(c), *pdh = in(dh), *pdc = in(dc);
    T *pdG = static_cast<T*>(dG.raw_data()), *pdc_prev = static_cast<T*>(dc_prev.raw_data());
#pragma omp parallel for schedule(static) if (B * C > kParallelGrain)
    for (int64_t b = 0; b < B; ++b)
      for (int64_t j = 0; j < C; ++j)
        lstm_cell_unit_backward(pact + b * 4 * C, pc_prev + b * C, pc + b * C, pdh + b * C, pdc + b * C, C, j,
                                pdG + b * 4 * C, pdc_prev + b * C);
  });
}

}  // namespace ag::cpu
