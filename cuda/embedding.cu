// Embedding: a row gather forward, a deterministic scatter-add backward (its passes and
// the algorithm: cuda/embedding_kernels.cuh), and the loss's scored positions.
// Reference: core/cpu/embedding.cpp.
#include <cub/device/device_radix_sort.cuh>

#include <limits>

#include "cuda/cuda.h"
#include "cuda/embedding_kernels.cuh"
#include "cuda/launch.cuh"

namespace ag::cuda {

void scored_positions(const Tensor& targets, int64_t ignore_index, Tensor& rows, Tensor& scored) {
  if (rows.numel() == 0) return;
  scored_positions_kernel<<<1, kScanThreads, 0, current_stream()>>>(
      ptr<const int64_t>(targets), targets.numel(), ignore_index, rows.numel(), ptr<int64_t>(rows), ptr<int64_t>(scored));
  AG_CUDA_CHECK_LAUNCH();
}

void embedding(const Tensor& weight, const Tensor& indices, Tensor& out) {
  const int64_t V = weight.size(0), C = weight.size(1);
  check_indices_later(indices, V, false, 0, [V](int64_t position, int64_t value) {
    return "embedding: index " + std::to_string(value) + " at position " + std::to_string(position) +
           " out of range for a table of " + std::to_string(V) + " rows";
  });
  visit_floating(weight.dtype(), "embedding", [&](auto zero) {
    using T = decltype(zero);
    for_each_index(indices.numel() * C, Gather<T>{ptr<const T>(weight), ptr<const int64_t>(indices), ptr<T>(out), C, V});
  });
}

void embedding_backward(const Tensor& dOut, const Tensor& indices, Tensor& dWeight) {
  const int64_t V = dWeight.size(0), C = dWeight.size(1), N = indices.numel();
  if (V == 0 || C == 0) return;
  AG_CHECK(N <= std::numeric_limits<int32_t>::max() && V < std::numeric_limits<uint32_t>::max(),
           "embedding_backward: " << N << " indices into " << V << " rows: the CUDA kernel takes fewer than 2^31 "
                                  << "indices and 2^32 - 1 rows");
  AG_CUDA_CHECK(cudaMemsetAsync(dWeight.raw_data(), 0, dWeight.numel() * dtype_size(dWeight.dtype()), current_stream()));
  if (N == 0) return;
  int end_bit = 1;  // enough bits for the keys 0 … V
  while ((int64_t{1} << end_bit) <= V) ++end_bit;
  Scratch<uint32_t> keys(N), sorted_keys(N);
  Scratch<int32_t> positions(N), sorted_positions(N);
  for_each_index(N, SortKeys{ptr<const int64_t>(indices), V, keys.data(), positions.data()});
  size_t sort_bytes = 0;
  AG_CUDA_CHECK(cub::DeviceRadixSort::SortPairs(nullptr, sort_bytes, keys.data(), sorted_keys.data(), positions.data(),
                                                sorted_positions.data(), static_cast<int>(N), 0, end_bit,
                                                current_stream()));
  Scratch<unsigned char> sort_space(static_cast<int64_t>(sort_bytes));
  AG_CUDA_CHECK(cub::DeviceRadixSort::SortPairs(sort_space.data(), sort_bytes, keys.data(), sorted_keys.data(),
                                                positions.data(), sorted_positions.data(), static_cast<int>(N), 0,
                                                end_bit, current_stream()));
  visit_floating(dOut.dtype(), "embedding_backward", [&](auto zero) {
    using T = decltype(zero);
    Scratch<T> partial(N * C);
    const int64_t chunks = (N + kRunChunk - 1) / kRunChunk;
    for_each_index(chunks * C, RunSums<T>{ptr<const T>(dOut), sorted_keys.data(), sorted_positions.data(),
                                          partial.data(), N, C});
    for_each_index(N * C, SegmentSums<T>{sorted_keys.data(), partial.data(), ptr<T>(dWeight), N, C, V});
  });
}

}  // namespace ag::cuda
