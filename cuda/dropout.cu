// Dropout: the mask is a pure function of (seed, offset + i) through the same
// ag::random_uniform as the CPU (core/random.h), so both devices drop the same
// elements. Reference: core/cpu/dropout.cpp. Inside a captured graph every
// counter adds the shift in device memory (core/counter_shifts.h), read per thread.
#include "core/random.h"
#include "cuda/cuda.h"
#include "cuda/launch.cuh"

namespace ag::cuda {

namespace {
template <class T> struct Dropout {
  const T* x;
  T* y;
  double p;
  T scale;
  uint64_t seed, offset;
  const uint64_t* shift;
  __device__ void operator()(int64_t i) const {
    const uint64_t first = shift ? offset + *shift : offset;
    y[i] = random_uniform(seed, first + i) >= p ? x[i] * scale : T(0);
  }
};
}  // namespace

void dropout(const Tensor& x, double p, uint64_t seed, uint64_t offset, const uint64_t* counter_shift, Tensor& y) {
  visit_floating(x.dtype(), "dropout", [&](auto zero) {
    using T = decltype(zero);
    const T scale = p < 1 ? static_cast<T>(1.0 / (1.0 - p)) : T(0);
    for_each_index(x.numel(), Dropout<T>{ptr<const T>(x), ptr<T>(y), p, scale, seed, offset, counter_shift});
  });
}

}  // namespace ag::cuda
