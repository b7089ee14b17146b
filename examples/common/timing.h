// Timing shared by the programs that report how fast they ran (char_lm train's
// ms per iteration, the lab's cells, bench/profile_step): the median of a
// run's step times, which one step stretched by a busy machine does not move.
#pragma once
#include <algorithm>
#include <vector>

namespace ag {

// The middle value (of an even count, the upper of the two middle ones); 0 if there are none.
inline double median(std::vector<double> values) {
  if (values.empty()) return 0;
  std::nth_element(values.begin(), values.begin() + values.size() / 2, values.end());
  return values[values.size() / 2];
}

}  // namespace ag
