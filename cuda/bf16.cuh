// bf16 copies of float32 operands, for the GEMMs under --precision bf16 (cuda/matmul.cu's
// cuBLAS products, cuda/mlp.cu's cuBLASLt ones): `elements` floats from `src`, rounded to
// nearest even, in a block of the caching allocator that lives for the product's scope (the
// allocator reuses it only for work queued after the product: one stream). Callers copy the
// operand's whole span, gaps included, so that its leading dims carry over.
#pragma once
#include <cuda_bf16.h>

#include "cuda/cuda.h"
#include "cuda/launch.cuh"

namespace ag::cuda {

// dst[i] = bf16(src[i]), rounded to nearest even.
struct RoundToBf16 {
  const float* src;
  __nv_bfloat16* dst;
  __device__ void operator()(int64_t i) const { dst[i] = __float2bfloat16_rn(src[i]); }
};

// Allocated at construction, rounded by round() (cuda/mlp.cu rounds only once it knows the
// product runs).
class Bf16Span {
 public:
  Bf16Span(const float* src, int64_t elements) : src_(src), elements_(elements), data_(elements) {}
  void round() const { for_each_index(elements_, RoundToBf16{src_, data_.data()}); }
  const __nv_bfloat16* data() const { return data_.data(); }

 private:
  const float* src_;
  int64_t elements_;
  Scratch<__nv_bfloat16> data_;
};

}  // namespace ag::cuda
