// Dropout's mask, drawn from the counter-based generator (core/random.h).
#include "core/cpu/cpu.h"
#include "core/cpu/loops.h"
#include "core/cpu/vector_math.h"
#include "core/random.h"

namespace ag::cpu {

namespace {
// y_i = x_i·scale where draw i (counter first + i) is kept, else 0. The draw's test is an integer
// one (uniform_at_least, core/random.h), so the loop is a vector loop, the float version compiled
// for AVX-512 too, where the hash's 64-bit products are one instruction (docs/performance.md,
// "Dense score modifiers and attention dropout": the attention dropout's draws, the same change).
template <class T>
inline void dropout_chunk(const T* x, T* y, int64_t n, uint64_t first, uint64_t seed, uint64_t threshold, T scale) {
#pragma omp simd
  for (int64_t i = 0; i < n; ++i)
    y[i] = uniform_at_least(seed, first + static_cast<uint64_t>(i), threshold) ? x[i] * scale : T(0);
}
AG_VECTOR_CLONES void dropout_chunk(const float* x, float* y, int64_t n, uint64_t first, uint64_t seed,
                                    uint64_t threshold, float scale) {
  dropout_chunk<float>(x, y, n, first, seed, threshold, scale);
}
}  // namespace

void dropout(const Tensor& x, double p, uint64_t seed, uint64_t offset, const uint64_t* counter_shift, Tensor& y) {
  if (counter_shift) offset += *counter_shift;
  visit_floating(x.dtype(), "dropout", [&](auto zero) {
    using T = decltype(zero);
    const T* px = static_cast<const T*>(x.raw_data());
    T* py = static_cast<T*>(y.raw_data());
    const T scale = p < 1 ? static_cast<T>(1.0 / (1.0 - p)) : T(0);
    const uint64_t threshold = uniform_threshold(p);
    for_chunks(x.numel(), [&](int64_t begin, int64_t count) {
      dropout_chunk(px + begin, py + begin, count, offset + static_cast<uint64_t>(begin), seed, threshold, scale);
    });
  });
}

}  // namespace ag::cpu
