// Embedding: a row gather forward, a deterministic scatter-add backward (its passes and
// the algorithm: cuda/embedding_kernels.cuh), and the loss's scored positions.
// Reference: core/cpu/embedding.cpp.
#include <cub/device/device_radix_sort.cuh>

#include <limits>

#include "cuda/cuda.h"
#include "cuda/embedding_kernels.cuh"
#include "cuda/launch.cuh"

namespace ag::cuda {

namespace {
// The embedding backward's sort on the GPU: CUB's stable radix sort of the pairs by key, its
// temporary storage from the caching allocator for the call.
struct CubSortPairs {
  void operator()(const uint32_t* keys, uint32_t* sorted_keys, const int32_t* values, int32_t* sorted_values, int64_t N,
                  int end_bit) const {
    size_t bytes = 0;
    AG_CUDA_CHECK(cub::DeviceRadixSort::SortPairs(nullptr, bytes, keys, sorted_keys, values, sorted_values,
                                                  static_cast<int>(N), 0, end_bit, current_stream()));
    Scratch<unsigned char> space(static_cast<int64_t>(bytes));
    AG_CUDA_CHECK(cub::DeviceRadixSort::SortPairs(space.data(), bytes, keys, sorted_keys, values, sorted_values,
                                                  static_cast<int>(N), 0, end_bit, current_stream()));
  }
};
}  // namespace

void scored_positions(const Tensor& targets, int64_t ignore_index, Tensor& rows, Tensor& scored) {
  scored_positions_launch(Gpu(), ptr<const int64_t>(targets), targets.numel(), ignore_index, rows.numel(),
                          ptr<int64_t>(rows), ptr<int64_t>(scored));
}

void embedding(const Tensor& weight, const Tensor& indices, Tensor& out) {
  const int64_t V = weight.size(0), C = weight.size(1);
  check_indices_later(indices, V, false, 0, [V](int64_t position, int64_t value) {
    return "embedding: index " + std::to_string(value) + " at position " + std::to_string(position) +
           " out of range for a table of " + std::to_string(V) + " rows";
  });
  visit_floating(weight.dtype(), "embedding", [&](auto zero) {
    using T = decltype(zero);
    embedding_launch(Gpu(), ptr<const T>(weight), ptr<const int64_t>(indices), indices.numel(), V, C, ptr<T>(out));
  });
}

void embedding_backward(const Tensor& dOut, const Tensor& indices, Tensor& dWeight) {
  const int64_t V = dWeight.size(0), C = dWeight.size(1), N = indices.numel();
  if (V == 0 || C == 0) return;
  AG_CHECK(N <= std::numeric_limits<int32_t>::max() && V < std::numeric_limits<uint32_t>::max(),
           "embedding_backward: " << N << " indices into " << V << " rows: the CUDA kernel takes fewer than 2^31 "
                                  << "indices and 2^32 - 1 rows");
  AG_CUDA_CHECK(cudaMemsetAsync(dWeight.raw_data(), 0, dWeight.numel() * dtype_size(dWeight.dtype()), current_stream()));
  visit_floating(dOut.dtype(), "embedding_backward", [&](auto zero) {
    using T = decltype(zero);
    Gpu gpu;
    embedding_backward_launch(gpu, CubSortPairs(), ptr<const T>(dOut), ptr<const int64_t>(indices), N, V, C,
                              ptr<T>(dWeight));
  });
}

}  // namespace ag::cuda
