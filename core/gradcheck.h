// gradcheck: compares the gradients backward() computes with central
// differences, over the full Jacobian, in float64.
//
// For f: inputs -> y, column j of the numerical Jacobian is the fourth-order
// central difference
//   (−f(x + 2ε e_j) + 8f(x + ε e_j) − 8f(x − ε e_j) + f(x − 2ε e_j)) / 12ε,
// and row i of the analytic one is the gradient backward() gives from the
// upstream one-hot e_i. Each input's report names the worst absolute and
// relative error and the (flat) input index and output index where they occur.
#pragma once
#include <functional>
#include <string>
#include <vector>

#include "core/tensor.h"

namespace ag {

struct GradcheckOptions {
  double eps = 1e-4;   // finite-difference step (inputs must be smooth within ±2ε)
  double rtol = 1e-6;  // pass when every relative error <= rtol
  // Relative error of an entry is |analytic − numeric| / max(|numeric|, floor),
  // floor = floor_fraction × (largest |numeric| in that input's Jacobian), so
  // entries that are exactly zero compare against the Jacobian's scale, not 0;
  // and at least min_floor, for Jacobians that are zero (the differences of a
  // constant are pure rounding, ~1e-14).
  double floor_fraction = 1e-3;
  double min_floor = 1e-6;
};

struct GradcheckInputReport {
  int input = 0;
  double max_abs_error = 0, max_rel_error = 0;
  int64_t worst_input_index = -1, worst_output_index = -1;
  double analytic_at_worst = 0, numeric_at_worst = 0;
};

struct GradcheckResult {
  bool passed = true;
  std::vector<GradcheckInputReport> inputs;  // one per input that requires grad
  std::string summary() const;               // one line per input
};

using GradcheckFn = std::function<Tensor(const std::vector<Tensor>&)>;

// `inputs` must be float64 CPU tensors; those with requires_grad are checked
// (their .grad is cleared on the way). f is called many times and must be
// deterministic (for dropout: reseed inside f).
GradcheckResult gradcheck(const GradcheckFn& f, const std::vector<Tensor>& inputs,
                          const GradcheckOptions& options = {});

}  // namespace ag
