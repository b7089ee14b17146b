// The out-of-line parts of cuda/launch.cuh.
#include "cuda/launch.cuh"
#include "cuda/memory_kernels.cuh"

namespace ag::cuda {

void check_indices_later(const Tensor& indices, int64_t limit, bool has_ignore, int64_t ignore,
                         IndexErrorMessage describe) {
  const int64_t n = indices.numel();
  if (n == 0) return;
  Tensor first = Tensor::empty({1}, DType::Int64, Device::CUDA);  // "none" = 2^64 − 1
  first_out_of_range_launch(Gpu(), ptr<const int64_t>(indices), n, limit, has_ignore, ignore,
                            ptr<unsigned long long>(first));
  defer_index_error({first.raw_data(), indices.raw_data(), std::move(describe),
                     {first.impl()->storage, indices.impl()->storage}});
}

}  // namespace ag::cuda
