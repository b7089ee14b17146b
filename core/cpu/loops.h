// Loop helpers shared by the CPU kernels.
#pragma once
#include <array>
#include <cstdint>
#include <vector>

#include "core/shape.h"

namespace ag::cpu {

// Below this many elements a loop runs on one thread: starting an OpenMP team
// costs more than it saves.
constexpr int64_t kParallelGrain = 1 << 15;

// Calls body(row) for each of `rows` rows of `cols` elements, in parallel when
// the work is large, so body must write only its own row.
template <class Body> void for_rows(int64_t rows, int64_t cols, Body&& body) {
#pragma omp parallel for schedule(static) if (rows > 1 && rows * cols > kParallelGrain)
  for (int64_t r = 0; r < rows; ++r) body(r);
}

// Walks the rows (all dims but the last) of `shape` for K operands laid out by
// `strides` (in elements, 0 on broadcast dims), calling
//   body(base, inner, inner_stride)
// with each operand's offset of the row's first element, the row length, and
// each operand's stride along the last dim. Rows run in parallel when the total
// is large, so body must write only its own row. A rank-0 shape is one row of 1.
template <size_t K, class Body>
void for_each_row(const Shape& shape, const std::array<std::vector<int64_t>, K>& strides, bool parallel,
                  Body&& body) {
  using Offsets = std::array<int64_t, K>;
  const int64_t rank = static_cast<int64_t>(shape.size());
  if (rank == 0) {
    body(Offsets{}, int64_t{1}, Offsets{});
    return;
  }
  const int64_t inner = shape.back();
  if (inner == 0) return;
  const int64_t rows = numel(shape) / inner;
  Offsets inner_stride{};
  for (size_t k = 0; k < K; ++k) inner_stride[k] = strides[k].back();
  auto row_offsets = [&](int64_t row) {
    Offsets base{};
    for (int64_t d = rank - 2; d >= 0; --d) {
      const int64_t index = row % shape[d];
      row /= shape[d];
      for (size_t k = 0; k < K; ++k) base[k] += index * strides[k][d];
    }
    return base;
  };
#pragma omp parallel for schedule(static) if (parallel && rows > 1 && rows * inner > kParallelGrain)
  for (int64_t row = 0; row < rows; ++row) body(row_offsets(row), inner, inner_stride);
}

}  // namespace ag::cpu
