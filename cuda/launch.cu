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

BadIndex find_out_of_range(const Tensor& indices, int64_t limit, bool has_ignore, int64_t ignore) {
  const int64_t n = indices.numel();
  if (n == 0) return {};
  const Tensor first = Tensor::empty({1}, DType::Int64, Device::CUDA);
  AG_CUDA_CHECK(cudaMemsetAsync(first.raw_data(), 0xFF, sizeof(int64_t), current_stream()));  // "none" = 2^64 − 1
  find_out_of_range_kernel<<<blocks_for(n), kThreads, 0, current_stream()>>>(
      ptr<const int64_t>(indices), n, limit, has_ignore, ignore, ptr<unsigned long long>(first));
  AG_CUDA_CHECK_LAUNCH();
  unsigned long long position = 0;
  copy_device_to_host(&position, first.raw_data(), sizeof(position));
  if (position == ~0ull) return {};
  BadIndex bad;
  bad.position = static_cast<int64_t>(position);
  copy_device_to_host(&bad.value, ptr<const int64_t>(indices) + bad.position, sizeof(int64_t));
  return bad;
}

}  // namespace ag::cuda
