// A first look at attograd's API: an MLP with two hidden layers (three weight
// matrices) learns to tell two interleaved spirals apart, with plain gradient
// descent written out by hand.
//
//   ./build/autograd_tour [--steps N] [--threads N]
#include <cmath>
#include <cstdio>
#include <string>

#include "core/autograd.h"
#include "core/ops.h"
#include "examples/common/command_line.h"

using namespace ag;

namespace {
// N points per class on two spirals, r from 0 to 1, the second one turned by π.
void make_spirals(int64_t n, Tensor& points, Tensor& labels) {
  std::vector<double> xy;
  std::vector<int64_t> y;
  Generator noise(7);
  for (int64_t cls = 0; cls < 2; ++cls)
    for (int64_t i = 0; i < n; ++i) {
      const double r = static_cast<double>(i) / n;
      const double angle = 3.0 * M_PI * r + cls * M_PI + 0.15 * noise.normal();
      xy.push_back(r * std::cos(angle));
      xy.push_back(r * std::sin(angle));
      y.push_back(cls);
    }
  points = Tensor::from_vector(xy, {2 * n, 2});
  labels = Tensor::from_indices(y, {2 * n});
}

double accuracy(const Tensor& logits, const Tensor& labels) {
  const std::vector<double> l = logits.to_vector();
  const std::vector<int64_t> y = labels.to_indices();
  int64_t correct = 0;
  for (size_t i = 0; i < y.size(); ++i) correct += (l[2 * i + 1] > l[2 * i]) == (y[i] == 1);
  return static_cast<double>(correct) / static_cast<double>(y.size());
}
// The tour's one option of its own (core/options.h explains the columns).
#define AG_TOUR_OPTIONS(X) X(Local, int64_t, steps, 2000, 1, 1 << 24, "gradient descent steps")
struct TourOptions {
  AG_DECLARE_OPTIONS(AG_TOUR_OPTIONS)
};
}  // namespace

int main(int argc, char** argv) {
  cli::Program program("An MLP with two hidden layers learns two spirals, with gradient descent written out by hand.",
                       "autograd_tour");
  TourOptions options;
  cli::ProcessOptions process;
  process.threads = 1;  // 400 points: more threads only wait for each other
  cli::Command& command = program.command();
  command.bind(options).bind(process);
  if (const int code = program.parse_and_apply(argc, argv, process); code >= 0) return code;
  const int64_t steps = options.steps;

  Tensor points, labels;
  make_spirals(200, points, labels);

  // Parameters are plain tensors that require grad. x [N, 2] → h [N, 64] → logits [N, 2].
  Generator gen(1);
  Tensor W1 = Tensor::randn({2, 64}, DType::Float32, &gen, 0.0, 1.0).requires_grad_();
  Tensor b1 = Tensor::zeros({64}).requires_grad_();
  Tensor W2 = Tensor::randn({64, 64}, DType::Float32, &gen, 0.0, 1.0 / 8).requires_grad_();
  Tensor b2 = Tensor::zeros({64}).requires_grad_();
  Tensor W3 = Tensor::randn({64, 2}, DType::Float32, &gen, 0.0, 1.0 / 8).requires_grad_();
  Tensor b3 = Tensor::zeros({2}).requires_grad_();
  std::vector<Tensor*> params = {&W1, &b1, &W2, &b2, &W3, &b3};

  const double lr = 0.5;
  for (int step = 0; step <= steps; ++step) {
    // Forward: every op records how to send gradients back to its inputs.
    const Tensor h1 = tanh(matmul(points, W1) + b1);
    const Tensor h2 = tanh(matmul(h1, W2) + b2);
    const Tensor logits = matmul(h2, W3) + b3;
    const Tensor loss = cross_entropy(logits, labels);

    // Backward: fills p.grad() for every parameter, then the graph is freed.
    loss.backward();

    // Gradient descent. A new leaf per step keeps the update out of the graph.
    for (Tensor* p : params) {
      NoGradGuard no_grad;
      *p = (*p - p->grad() * lr).detach().requires_grad_();
    }
    if (step % 200 == 0)
      std::printf("step %5d  loss %.4f  accuracy %.1f%%\n", step, loss.item(), 100 * accuracy(logits, labels));
  }
  return 0;
}
