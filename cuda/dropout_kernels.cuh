// Dropout's kernel on CUDA: the mask is a pure function of (seed, offset + i) through the same
// ag::random_uniform as the CPU (core/random.h), so both devices drop the same elements. Inside
// a captured graph every counter adds the shift in device memory (core/counter_shifts.h), read
// per thread. With its launch, written once for any device (cuda/dropout.cu runs it on the GPU,
// tests/test_cuda_on_host.cpp on the host). Reference: core/cpu/dropout.cpp.
#pragma once
#include <cstdint>

#include "core/random.h"

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

// On a device `dev` (cuda/launch.cuh's Gpu; the host tests' Device). Contract: core/kernels.inc.
template <class T, class Device>
void dropout_launch(const Device& dev, const T* x, int64_t n, double p, uint64_t seed, uint64_t offset,
                    const uint64_t* counter_shift, T* y) {
  const T scale = p < 1 ? static_cast<T>(1.0 / (1.0 - p)) : T(0);
  dev(n, Dropout<T>{x, y, p, scale, seed, offset, counter_shift});
}

}  // namespace
}  // namespace ag::cuda
