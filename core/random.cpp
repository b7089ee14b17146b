#include "core/random.h"

namespace ag {

Generator& default_generator() {
  static Generator generator(0);
  return generator;
}

void manual_seed(uint64_t seed) { default_generator().set_state(seed, 0); }

}  // namespace ag
