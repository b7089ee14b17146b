// The out-of-line parts of cuda/launch.cuh.
#include "cuda/launch.cuh"

namespace ag::cuda {

namespace {
// atomicMin on the position: an integer atomic, so the result (the smallest bad
// position) does not depend on the order the threads run in.
__global__ void find_out_of_range_kernel(const int64_t* indices, int64_t n, int64_t limit, bool has_ignore,
                                         int64_t ignore, unsigned long long* first) {
  for (int64_t i = thread_index(); i < n; i += thread_count()) {
    const int64_t v = indices[i];
    if ((v < 0 || v >= limit) && !(has_ignore && v == ignore))
      atomicMin(first, static_cast<unsigned long long>(i));
  }
}
}  // namespace

void check_indices_later(const Tensor& indices, int64_t limit, bool has_ignore, int64_t ignore,
                         IndexErrorMessage describe) {
  const int64_t n = indices.numel();
  if (n == 0) return;
  Tensor first = Tensor::empty({1}, DType::Int64, Device::CUDA);
  AG_CUDA_CHECK(cudaMemsetAsync(first.raw_data(), 0xFF, sizeof(int64_t), current_stream()));  // "none" = 2^64 − 1
  find_out_of_range_kernel<<<blocks_for(n), kThreads, 0, current_stream()>>>(
      ptr<const int64_t>(indices), n, limit, has_ignore, ignore, ptr<unsigned long long>(first));
  AG_CUDA_CHECK_LAUNCH();
  defer_index_error({first.raw_data(), indices.raw_data(), std::move(describe),
                     {first.impl()->storage, indices.impl()->storage}});
}

}  // namespace ag::cuda
