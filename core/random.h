// A counter-based random generator whose numbers are the same on every machine,
// compiler and device. std::normal_distribution is implementation-defined, so
// attograd draws its own: number i of a stream is a pure function of
// (seed, offset + i). The same function runs in CUDA kernels (dropout masks), so
// a CPU and a GPU run from the same seed draw the same numbers.
#pragma once
#include <cmath>
#include <cstdint>

#ifdef __CUDACC__
#define AG_HOST_DEVICE __host__ __device__
#else
#define AG_HOST_DEVICE
#endif

namespace ag {

// SplitMix64's finaliser over (seed, counter): a well-mixed 64-bit hash.
AG_HOST_DEVICE inline uint64_t random_bits(uint64_t seed, uint64_t counter) {
  uint64_t z = seed + (counter + 1) * 0x9E3779B97F4A7C15ull;
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
  return z ^ (z >> 31);
}

// Uniform in [0, 1) with 53 random bits.
AG_HOST_DEVICE inline double random_uniform(uint64_t seed, uint64_t counter) {
  return static_cast<double>(random_bits(seed, counter) >> 11) * 0x1.0p-53;
}

// random_uniform(seed, counter) >= p as an integer test, for loops that draw a keep-mask
// (dropout): u = k·2⁻⁵³ with k = random_bits >> 11 is exact, and so is p·2⁵³, so u ≥ p exactly
// when k ≥ ⌈p·2⁵³⌉ = uniform_threshold(p). The same entries are kept as by the double compare,
// and a CPU loop of it vectorises (no 64-bit integer to double conversion per draw).
inline uint64_t uniform_threshold(double p) { return static_cast<uint64_t>(std::ceil(std::ldexp(p, 53))); }
AG_HOST_DEVICE inline bool uniform_at_least(uint64_t seed, uint64_t counter, uint64_t threshold) {
  return (random_bits(seed, counter) >> 11) >= threshold;
}

// Standard normal by Box-Muller (the cosine branch only, so number i never
// depends on number i-1). Its two uniforms both come from counter i: the second
// from a key derived from the seed, so a normal takes one counter like every
// other draw and never reuses bits a later uniform draw gets. 1 - u lies in (0, 1].
AG_HOST_DEVICE inline double random_normal(uint64_t seed, uint64_t counter) {
  const double u1 = 1.0 - random_uniform(seed, counter);
  const double u2 = random_uniform(seed ^ 0xD1B54A32D192ED03ull, counter);
  return std::sqrt(-2.0 * std::log(u1)) * std::cos(6.283185307179586 * u2);
}

// A seed and a position in its stream. Each draw of n numbers takes the next n
// counters, so the whole state is two integers (saved in checkpoints).
class Generator {
 public:
  explicit Generator(uint64_t seed = 0) : seed_(seed) {}

  // Reserves n counters and returns the first; callers compute number i as
  // random_*(seed(), first + i).
  uint64_t advance(uint64_t n) {
    const uint64_t first = offset_;
    offset_ += n;
    return first;
  }
  double uniform() { return random_uniform(seed_, advance(1)); }
  double normal() { return random_normal(seed_, advance(1)); }
  // Uniform integer in [0, n); n is small next to 2^64, so the modulo bias is negligible.
  uint64_t integer(uint64_t n) { return random_bits(seed_, advance(1)) % n; }

  uint64_t seed() const { return seed_; }
  uint64_t offset() const { return offset_; }
  void set_state(uint64_t seed, uint64_t offset) {
    seed_ = seed;
    offset_ = offset;
  }

 private:
  uint64_t seed_;
  uint64_t offset_ = 0;
};

// The process-wide generator used when none is passed.
Generator& default_generator();
void manual_seed(uint64_t seed);

}  // namespace ag
