#include "core/cpu/cpu.h"
#include "core/cpu/loops.h"
#include "core/random.h"

namespace ag::cpu {

void dropout(const Tensor& x, double p, uint64_t seed, uint64_t offset, Tensor& y) {
  visit_floating(x.dtype(), "dropout", [&](auto zero) {
    using T = decltype(zero);
    const T* px = static_cast<const T*>(x.raw_data());
    T* py = static_cast<T*>(y.raw_data());
    const T scale = p < 1 ? static_cast<T>(1.0 / (1.0 - p)) : T(0);
    const int64_t n = x.numel();
#pragma omp parallel for schedule(static) if (n > kParallelGrain)
    for (int64_t i = 0; i < n; ++i) py[i] = random_uniform(seed, offset + i) >= p ? px[i] * scale : T(0);
  });
}

}  // namespace ag::cpu
