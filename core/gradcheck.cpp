#include "core/gradcheck.h"

#include <cmath>
#include <sstream>

#include "core/autograd.h"

namespace ag {

namespace {
// The function's output as a flat float64 vector, with no graph.
std::vector<double> evaluate(const GradcheckFn& f, const std::vector<Tensor>& inputs) {
  NoGradGuard no_grad;
  return f(inputs).to_vector();
}
}  // namespace

std::string GradcheckResult::summary() const {
  std::ostringstream os;
  os << (passed ? "gradcheck passed" : "gradcheck FAILED");
  for (const GradcheckInputReport& r : inputs)
    os << "\n  input " << r.input << ": max abs err " << r.max_abs_error << ", max rel err " << r.max_rel_error
       << " at input[" << r.worst_input_index << "] / output[" << r.worst_output_index
       << "] (analytic " << r.analytic_at_worst << ", numeric " << r.numeric_at_worst << ")";
  return os.str();
}

GradcheckResult gradcheck(const GradcheckFn& f, const std::vector<Tensor>& inputs,
                          const GradcheckOptions& options) {
  for (const Tensor& x : inputs)
    AG_CHECK(!x.requires_grad() || (x.dtype() == DType::Float64 && x.device() == Device::CPU),
             "gradcheck: input " << describe(x) << ": inputs that require grad must be float64 CPU tensors");
  const int64_t n_out = static_cast<int64_t>(evaluate(f, inputs).size());

  // Analytic Jacobians of every input that requires grad, row by row: one backward (through
  // one retained graph) per output element gives row i of each of them at once.
  std::vector<std::vector<double>> analytic(inputs.size());
  bool any = false;
  for (size_t which = 0; which < inputs.size(); ++which)
    if (inputs[which].requires_grad()) {
      analytic[which].assign(static_cast<size_t>(n_out * inputs[which].numel()), 0.0);
      any = true;
    }
  if (any) {
    const Tensor y = f(inputs);
    AG_CHECK(y.requires_grad(), "gradcheck: the output does not depend on any input that requires grad");
    for (int64_t i = 0; i < n_out; ++i) {
      for (const Tensor& t : inputs) t.impl()->grad.reset();
      std::vector<double> one_hot(n_out, 0.0);
      one_hot[i] = 1.0;
      constexpr bool retain_graph = true;  // one backward per output element over the same graph
      y.backward(Tensor::from_vector(one_hot, y.shape(), y.dtype()).to(y.device()), retain_graph);
      for (size_t which = 0; which < inputs.size(); ++which) {
        const Tensor& x = inputs[which];
        if (!x.requires_grad() || !x.grad().defined()) continue;
        const std::vector<double> g = x.grad().to_vector();
        std::copy(g.begin(), g.end(), analytic[which].begin() + i * x.numel());
      }
    }
    for (const Tensor& t : inputs) t.impl()->grad.reset();
  }

  GradcheckResult result;
  for (size_t which = 0; which < inputs.size(); ++which) {
    const Tensor& x = inputs[which];
    if (!x.requires_grad()) continue;
    const int64_t n_in = x.numel();

    // Numerical Jacobian, column by column, by the fourth-order central
    // difference (−f(x+2ε) + 8f(x+ε) − 8f(x−ε) + f(x−2ε)) / 12ε: its truncation
    // error is O(ε⁴), so ε can be large enough that rounding in f stays ~1e-12.
    // Perturbs x's storage in place.
    std::vector<double> numeric(n_out * n_in, 0.0);
    double* data = x.data<double>();
    const double h = options.eps;
    for (int64_t j = 0; j < n_in; ++j) {
      const double original = data[j];
      auto at = [&](double delta) {
        data[j] = original + delta;
        return evaluate(f, inputs);
      };
      const std::vector<double> p2 = at(2 * h), p1 = at(h), m1 = at(-h), m2 = at(-2 * h);
      data[j] = original;
      for (int64_t i = 0; i < n_out; ++i)
        numeric[i * n_in + j] = (-p2[i] + 8 * p1[i] - 8 * m1[i] + m2[i]) / (12 * h);
    }

    GradcheckInputReport report;
    report.input = static_cast<int>(which);
    double scale = 0;
    for (double v : numeric) scale = std::max(scale, std::abs(v));
    const double floor = std::max(scale * options.floor_fraction, options.min_floor);
    for (int64_t e = 0; e < n_out * n_in; ++e) {
      double abs_error = std::abs(analytic[which][e] - numeric[e]);
      double rel_error = abs_error / std::max(std::abs(numeric[e]), floor);
      if (std::isnan(abs_error)) abs_error = rel_error = INFINITY;
      report.max_abs_error = std::max(report.max_abs_error, abs_error);
      if (rel_error > report.max_rel_error || report.worst_input_index < 0) {
        report.max_rel_error = std::max(report.max_rel_error, rel_error);
        report.worst_output_index = e / n_in;
        report.worst_input_index = e % n_in;
        report.analytic_at_worst = analytic[which][e];
        report.numeric_at_worst = numeric[e];
      }
    }
    if (!(report.max_rel_error <= options.rtol)) result.passed = false;  // NaN fails too
    result.inputs.push_back(report);
  }
  return result;
}

}  // namespace ag
