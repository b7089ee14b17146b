// dropout: y = x ∘ m / (1 − p), m_i ~ Bernoulli(1 − p). Backward: dX = dY ∘ m / (1 − p).
// The mask is a pure function of (seed, offset + i) (core/random.h), so
// nothing is saved: backward runs the same kernel on dY with the same counters.
// Inside a captured CUDA graph the counters also add a shift the graph's owner
// writes before each replay (core/counter_shifts.h), in backward too.
#include "core/counter_shifts.h"
#include "core/ops/common.h"

namespace ag {

Tensor dropout(const Tensor& x, double p, bool training, Generator* gen) {
  detail::check_floating("dropout", x);
  AG_CHECK(p >= 0 && p <= 1, "dropout: p = " << p << " outside [0, 1]");
  if (!training || p == 0) return x;
  Generator& g = gen ? *gen : default_generator();
  const uint64_t* shift = counter_shift(g, x.device());
  const uint64_t seed = g.seed(), offset = g.advance(x.numel());
  Tensor y = detail::empty_like(x);
  kernel::dropout(x, p, seed, offset, shift, y);
  return record("dropout", {x}, y, [p, seed, offset, shift](const Tensor& dY) -> Gradients {
    Tensor dX = detail::empty_like(dY);
    kernel::dropout(dY, p, seed, offset, shift, dX);
    return {dX};
  });
}

}  // namespace ag
