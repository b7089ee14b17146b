// Strided indexing for the kernels that read operands through strides (broadcasts, permutes,
// reductions: cuda/elementwise_kernels.cuh, memory_kernels.cuh, reduce_kernels.cuh). Code a host
// build compiles too (tests/cuda_on_host.h).
#pragma once
#include <array>
#include <cstdint>
#include <vector>

#include "core/error.h"
#include "core/shape.h"

namespace ag::cuda {

// Element i (row-major) of `shape` sits at offset Σ_d index_d · strides[k][d] in
// operand k. Built on the host by make_strided_index, which drops size-1 dims and
// merges neighbours that every operand walks contiguously, so a permute of a
// [B, T, H, d_h] tensor needs 3 dims and a plain broadcast 1 or 2.
constexpr int kMaxRank = 8;

template <int K> struct StridedIndex {
  int rank = 0;
  int64_t shape[kMaxRank] = {};
  int64_t strides[K][kMaxRank] = {};

  __device__ void offsets(int64_t i, int64_t (&out)[K]) const {
    for (int k = 0; k < K; ++k) out[k] = 0;
    for (int d = rank - 1; d >= 0; --d) {
      const int64_t index = i % shape[d];
      i /= shape[d];
      for (int k = 0; k < K; ++k) out[k] += index * strides[k][d];
    }
  }
};

template <int K>
StridedIndex<K> make_strided_index(const char* kernel, const Shape& shape,
                                   const std::array<std::vector<int64_t>, K>& strides) {
  std::vector<int64_t> dims;
  std::array<std::vector<int64_t>, K> kept;
  for (size_t d = 0; d < shape.size(); ++d) {
    if (shape[d] == 1) continue;
    const bool merge = !dims.empty() && [&] {
      for (int k = 0; k < K; ++k)
        if (kept[k].back() != strides[k][d] * shape[d]) return false;
      return true;
    }();
    if (merge) {
      dims.back() *= shape[d];
      for (int k = 0; k < K; ++k) kept[k].back() = strides[k][d];
    } else {
      dims.push_back(shape[d]);
      for (int k = 0; k < K; ++k) kept[k].push_back(strides[k][d]);
    }
  }
  AG_CHECK(dims.size() <= kMaxRank, kernel << ": shape " << to_string(shape) << " has " << dims.size()
                                           << " dims that cannot be merged; the CUDA kernel handles " << kMaxRank);
  StridedIndex<K> index;
  index.rank = static_cast<int>(dims.size());
  for (size_t d = 0; d < dims.size(); ++d) {
    index.shape[d] = dims[d];
    for (int k = 0; k < K; ++k) index.strides[k][d] = kept[k][d];
  }
  return index;
}

}  // namespace ag::cuda
