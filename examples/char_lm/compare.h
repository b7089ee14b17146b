// char_lm compare RUN RUN ... [--out compare.svg]: the validation loss of
// several runs (directories of char_lm train) on one chart, what a user
// comparing variants looks at first. Each curve is named by the options in
// which its run differs from the others (`attn-impl=flash, n-layer=2`), read
// from its newest checkpoint's training state; the curves from each log.csv.
#pragma once
#include <string>
#include <vector>

#include "core/options.h"
#include "examples/char_lm/compare_options.h"

namespace ag::char_lm {

struct CompareOptions {
  AG_DECLARE_OPTIONS(AG_CHAR_LM_COMPARE_OPTIONS)
  std::vector<std::string> runs;  // the positional arguments
};

// The chart of `runs` (at least two): one val-loss curve per run, in the order given.
std::string compare_svg(const std::vector<std::string>& runs);
// Writes the chart to options.out and prints its path.
int run_compare(const CompareOptions& options);

}  // namespace ag::char_lm
