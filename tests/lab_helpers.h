// What the lab's test files share: a small lab to run in a temporary directory.
#pragma once
#include <algorithm>
#include <cstdint>

#include "examples/lab/lab_run.h"
#include "tests/helpers.h"

namespace ag::test {

// A lab of one-layer width-16 softmax models on mqar (T 16, 2 pairs, V 32) writing to `dir`: `steps`
// steps, scored every 10 (or at the end) on `examples` held-out examples, batches of `batch`.
// A test changes what it is about (the grid, the heads, the interval) on the spec it returns.
inline lab::LabSpec small_lab(const TempDir& dir, int64_t steps, int64_t examples, int64_t batch) {
  lab::LabSpec spec;
  spec.quiet = true;
  spec.options.out = dir.dir.string();
  spec.options.eval_interval = std::min<int64_t>(steps, 10);
  spec.defaults.budget.max_iters = steps;
  spec.defaults.budget.eval_examples = examples;
  spec.defaults.model.n_layer = 1;
  spec.defaults.model.n_embd = 16;
  spec.defaults.model.n_head = 2;
  spec.defaults.optim.batch_size = batch;
  spec.grids = {lab::Grid{.axes = {{"block_size", {"16"}}, {"pairs", {"2"}}, {"vocab", {"32"}}}, .mixers = {"softmax"}, .lrs = {}}};
  return spec;
}

}  // namespace ag::test
