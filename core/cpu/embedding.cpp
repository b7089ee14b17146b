#include <cstring>

#include "core/cpu/cpu.h"

namespace ag::cpu {

namespace {
void check_indices(const Tensor& indices, int64_t V) {
  const int64_t* idx = static_cast<const int64_t*>(indices.raw_data());
  for (int64_t n = 0; n < indices.numel(); ++n)
    AG_CHECK(idx[n] >= 0 && idx[n] < V, "embedding: index " << idx[n] << " at position " << n
                                                            << " out of range for a table of " << V << " rows");
}
}  // namespace

void embedding(const Tensor& weight, const Tensor& indices, Tensor& out) {
  const int64_t V = weight.size(0), C = weight.size(1);
  check_indices(indices, V);
  const int64_t* idx = static_cast<const int64_t*>(indices.raw_data());
  const size_t row_bytes = C * dtype_size(weight.dtype());
  const char* w = static_cast<const char*>(weight.raw_data());
  char* o = static_cast<char*>(out.raw_data());
  for (int64_t n = 0; n < indices.numel(); ++n) std::memcpy(o + n * row_bytes, w + idx[n] * row_bytes, row_bytes);
}

// Rows are added in index order on one thread: a token that appears twice gets
// the same sum, in the same order, every run.
void embedding_backward(const Tensor& dOut, const Tensor& indices, Tensor& dWeight) {
  visit_floating(dOut.dtype(), "embedding_backward", [&](auto zero) {
    using T = decltype(zero);
    const int64_t C = dWeight.size(1);
    const int64_t* idx = static_cast<const int64_t*>(indices.raw_data());
    const T* g = static_cast<const T*>(dOut.raw_data());
    T* dw = static_cast<T*>(dWeight.raw_data());
    std::fill_n(dw, dWeight.numel(), T(0));
    for (int64_t n = 0; n < indices.numel(); ++n)
      for (int64_t c = 0; c < C; ++c) dw[idx[n] * C + c] += g[n * C + c];
  });
}

void scored_positions(const Tensor& targets, int64_t ignore_index, Tensor& rows, Tensor& scored) {
  const int64_t* y = static_cast<const int64_t*>(targets.raw_data());
  int64_t* r = static_cast<int64_t*>(rows.raw_data());
  int64_t* s = static_cast<int64_t*>(scored.raw_data());
  for (int64_t i = 0, at = 0, n = rows.numel(); i < targets.numel() && at < n; ++i)
    if (y[i] != ignore_index) r[at] = i, s[at++] = y[i];
}

}  // namespace ag::cpu
