// The one training step (optim/train_step.h): gradient accumulation gives the
// whole batch's gradient, also when micro-batches score different numbers of
// targets, and so does a data-parallel step over shards of the batch; the
// after_backward hook sees the finished gradients; on CUDA a step waits for
// the device only to upload its batches.
#include <memory>

#include "examples/common/text_data.h"
#include "nn/gpt.h"
#include "optim/adam.h"
#include "core/autograd.h"
#include "core/dispatch.h"
#include "optim/data_parallel.h"
#include "optim/train_step.h"
#include "tests/helpers.h"

// The file's names and using-directives stay its own in a unity build, where the test
// files compile as one translation unit (CMakeLists.txt).
namespace train_step_test {

using namespace ag;

namespace {
constexpr int64_t kVocab = 11, kBlock = 8;

// A float64 GPT of its own, from a fixed seed, so two copies start identical.
std::unique_ptr<nn::GPT> tiny_gpt(Device device = Device::CPU, int64_t n_layer = 2) {
  const nn::GPTConfig config = test::gpt_sizes(kVocab, kBlock, n_layer, 2, 8);
  Generator gen(3);
  auto model = std::make_unique<nn::GPT>(config, gen);
  model->to(DType::Float64);
  model->to(device);
  return model;
}

text::TokenIds token_stream(size_t n) {
  Generator gen(4);
  text::TokenIds tokens(kVocab, n);
  for (size_t i = 0; i < n; ++i) tokens.set(i, static_cast<int64_t>(gen.integer(kVocab)));
  return tokens;
}

// micro_batches of batch_size windows each, drawn in order from one generator:
// 4 × 3 draws the same 12 windows as 1 × 12.
std::vector<optim::Batch> draw(int64_t micro_batches, int64_t batch_size) {
  const text::TokenIds tokens = token_stream(500);
  Generator gen(5);
  std::vector<optim::Batch> out(micro_batches);
  for (optim::Batch& b : out) text::get_batch(tokens, batch_size, kBlock, gen, b.x, b.y);
  return out;
}

// The step's loss: the model's, summed over the scored targets, with the
// targets as the step read them on the host.
optim::TrainStep::SummedLoss summed_loss(nn::GPT& model, int64_t ignore_index = -100) {
  return [&model, ignore_index](const Tensor& x, const Tensor& y, std::span<const int64_t> y_host) {
    return model.loss(x, y, Reduction::Sum, ignore_index, y_host);
  };
}

struct StepOutcome {
  std::vector<double> grads, params;
  double loss, norm;
};

// One step on a fresh model: the gradient the optimizer used (no clipping) and
// the parameters after. With `comm`, a data-parallel step: this process takes
// its shard of each batch, and the loss is the processes' shares summed.
StepOutcome one_step(const std::vector<optim::Batch>& batches, int64_t ignore_index = -100,
                     dist::Communicator* comm = nullptr) {
  const std::unique_ptr<nn::GPT> model = tiny_gpt();
  optim::AdamW optimizer(optim::decay_groups(model->named_parameters(), 0.1), {.lr = 1e-2});
  optim::TrainOptions options;
  options.grad_accum = static_cast<int64_t>(batches.size());
  options.grad_clip = 0;
  optim::TrainStep step(optimizer, options,
                        summed_loss(*model, ignore_index),
                        Device::CPU, ignore_index);
  std::vector<optim::Batch> shards = batches;
  if (comm) {
    optim::make_data_parallel(step, *comm);
    for (optim::Batch& b : shards) b = {optim::shard(b.x, *comm), optim::shard(b.y, *comm)};
  }
  const int64_t iter = 150;
  const optim::StepResult r = step.run(iter, shards);
  if (comm) comm->all_reduce_sum(r.loss);
  StepOutcome out{optimizer.gradient_buffers()[0].to_vector(), {}, r.loss.item(), r.grad_norm.item()};
  for (const Tensor& p : model->parameters())
    for (double v : p.to_vector()) out.params.push_back(v);
  return out;
}

double max_relative_difference(const std::vector<double>& a, const std::vector<double>& b) {
  REQUIRE(a.size() == b.size());
  double diff = 0, scale = 0;
  for (size_t i = 0; i < a.size(); ++i) {
    diff = std::max(diff, std::abs(a[i] - b[i]));
    scale = std::max(scale, std::abs(b[i]));
  }
  return diff / scale;
}
}  // namespace

TEST_CASE("train step: 4 accumulated micro-batches of 3 give the gradient of one batch of 12 (float64)") {
  const StepOutcome accumulated = one_step(draw(4, 3)), whole = one_step(draw(1, 12));
  CHECK(max_relative_difference(accumulated.grads, whole.grads) <= 1e-6);
  CHECK(max_relative_difference(accumulated.grads, whole.grads) <= 1e-13);  // in fact rounding only
  CHECK(accumulated.loss == doctest::Approx(whole.loss).epsilon(1e-13));
  CHECK(accumulated.norm == doctest::Approx(whole.norm).epsilon(1e-13));
  CHECK(max_relative_difference(accumulated.params, whole.params) <= 1e-13);
  // And it is a real gradient, not zeros on both sides.
  CHECK(accumulated.norm > 0.1);
}

TEST_CASE("train step: micro-batches scoring different numbers of targets still give the whole batch's gradient") {
  // Ignore every target of the first micro-batch but one, so the counts are 1, 24, 24, 24:
  // averaging each micro-batch's own mean would weight that one target 24 times too much.
  constexpr int64_t kIgnore = -100;
  std::vector<optim::Batch> micro = draw(4, 3);
  std::vector<int64_t> first = micro[0].y.to_indices();
  std::fill(first.begin() + 1, first.end(), kIgnore);
  micro[0].y = Tensor::from_indices(first, micro[0].y.shape());
  std::vector<int64_t> all_x, all_y;
  for (const optim::Batch& b : micro) {
    for (int64_t v : b.x.to_indices()) all_x.push_back(v);
    for (int64_t v : b.y.to_indices()) all_y.push_back(v);
  }
  const std::vector<optim::Batch> whole{{Tensor::from_indices(all_x, {12, kBlock}), Tensor::from_indices(all_y, {12, kBlock})}};
  const StepOutcome a = one_step(micro, kIgnore), b = one_step(whole, kIgnore);
  CHECK(max_relative_difference(a.grads, b.grads) <= 1e-13);
  CHECK(a.loss == doctest::Approx(b.loss).epsilon(1e-13));
}

// Run alone by CTest, and on 2 MPI processes by "data parallel: the every-process
// cases pass on 2 MPI processes" (tests/test_data_parallel.cpp).
TEST_CASE("data parallel (every process): a step over shards of the batch gives the one-process gradient, "
          "even when the shards score different numbers of targets") {
  dist::Communicator& comm = dist::world();
  const int64_t N = comm.size();
  // 2 micro-batches of 3 sequences per process; in the first, process 0's
  // shard scores a single target and the others all 3·8 of theirs.
  constexpr int64_t kIgnore = -100;
  std::vector<optim::Batch> batches = draw(2, 3 * N);
  std::vector<int64_t> targets = batches[0].y.to_indices();
  std::fill(targets.begin() + 1, targets.begin() + 3 * kBlock, kIgnore);
  batches[0].y = Tensor::from_indices(targets, batches[0].y.shape());

  const StepOutcome whole = one_step(batches, kIgnore), parallel = one_step(batches, kIgnore, &comm);
  CHECK(max_relative_difference(parallel.grads, whole.grads) <= 1e-13);
  CHECK(parallel.loss == doctest::Approx(whole.loss).epsilon(1e-13));
  CHECK(parallel.norm == doctest::Approx(whole.norm).epsilon(1e-13));
  CHECK(max_relative_difference(parallel.params, whole.params) <= 1e-13);
  CHECK(whole.norm > 0.1);

  if (N > 1) {
    // The test can fail: each process's own mean, averaged over the processes,
    // is another gradient (process 0's 1 + 24 targets weigh 1/(N·25) each instead of 1/n).
    std::vector<double> own_means;
    std::vector<optim::Batch> shard_batches = batches;
    for (optim::Batch& b : shard_batches) b = {optim::shard(b.x, comm), optim::shard(b.y, comm)};
    const StepOutcome own = one_step(shard_batches, kIgnore);
    const Tensor averaged = Tensor::from_vector(own.grads, {static_cast<int64_t>(own.grads.size())}, DType::Float64);
    comm.all_reduce_sum(averaged);
    for (double g : averaged.to_vector()) own_means.push_back(g / static_cast<double>(N));
    CHECK(max_relative_difference(own_means, whole.grads) > 1e-2);
  }
}

TEST_CASE("train step: after_backward sees the finished gradients, once per step, before clipping") {
  const std::unique_ptr<nn::GPT> model = tiny_gpt();
  optim::AdamW optimizer(model->named_parameters(), {.lr = 1e-3});
  optim::TrainOptions options;
  options.grad_clip = 1e-3;  // far below the norm: clipping changes the gradients
  optim::TrainStep step(optimizer, options,
                        summed_loss(*model), Device::CPU);
  int calls = 0;
  double norm_in_hook = 0;
  step.after_backward = [&](optim::Optimizer& o) {
    ++calls;
    double squares = 0;
    for (const Tensor& g : o.gradient_buffers())
      for (double v : g.to_vector()) squares += v * v;
    norm_in_hook = std::sqrt(squares);
  };
  const optim::StepResult r = step.run(0, draw(3, 2));
  CHECK(calls == 1);
  CHECK(r.grad_norm.item() == doctest::Approx(norm_in_hook).epsilon(1e-12));
  CHECK(r.grad_norm.item() > 1e-3);
  CHECK(r.scored == 3 * 2 * kBlock);
}

TEST_CASE("train step: a step whose targets are all ignored is an error, not a NaN update") {
  const std::unique_ptr<nn::GPT> model = tiny_gpt();
  optim::AdamW optimizer(model->named_parameters());
  optim::TrainStep step(optimizer, {}, summed_loss(*model),
                        Device::CPU);
  std::vector<optim::Batch> batches = draw(1, 2);
  batches[0].y = Tensor::full(batches[0].y.shape(), -100, DType::Int64);
  CHECK_THROWS_WITH_AS(step.run(0, batches), doctest::Contains("no scored target"), Error);
}

TEST_CASE("cuda: a training step does not wait for the device, whatever the model's size") {
  if (!ag::test::cuda_or_skip()) return;
  for (const int64_t n_layer : {1, 4}) {
    CAPTURE(n_layer);
    const std::unique_ptr<nn::GPT> model = tiny_gpt(Device::CUDA, n_layer);
    optim::AdamW optimizer(optim::decay_groups(model->named_parameters(), 0.1));
    optim::TrainOptions options;
    options.grad_accum = 2;
    optim::TrainStep step(optimizer, options,
                          summed_loss(*model),
                          Device::CUDA);
    const std::vector<optim::Batch> batches = draw(2, 3);
    step.run(0, batches);  // the first step may create the cuBLAS handle and fill the caches
    cuda::synchronize();   // the staging buffers' copies so far have all been made: none is waited for below
    // Step 1 eager, 2 captured as a CUDA graph and launched, 3 replayed (--cuda-graph on): none waits,
    // the uploads of x and y of each micro-batch included (pinned staging buffers: cuda/context.cu).
    for (int64_t iter = 1; iter <= 3; ++iter) {
      CAPTURE(iter);
      const int64_t before = cuda::synchronizations();
      step.run(iter, batches);
      CHECK(cuda::synchronizations() - before == 0);
    }
    CHECK(step.graph_replays() == 2);
    const optim::StepResult r = step.run(4, batches);
    CHECK(std::isfinite(r.loss.item()));
  }
}

TEST_CASE("train step: a diverged step changes no parameter, and check_finite names it") {
  const std::unique_ptr<nn::GPT> model = tiny_gpt();
  optim::AdamW optimizer(model->named_parameters(), {.lr = 1e-3});
  optim::TrainOptions options;
  options.warmup_iters = 0;
  optim::TrainStep step(optimizer, options,
                        summed_loss(*model), Device::CPU);
  const std::vector<optim::Batch> batches = draw(1, 2);
  step.run(0, batches);
  step.check_finite();  // a finite step passes
  // Poison one weight: the loss and every gradient downstream of it turn NaN.
  const NamedTensor w_q = model->named_parameters()[4];
  REQUIRE(w_q.name == "blocks.0.attn.w_q.weight");
  std::vector<Tensor> before;
  for (const Tensor& p : model->parameters()) before.push_back(p.detach().clone());
  Tensor poisoned = w_q.tensor.view(5, {1});
  kernel::fill(poisoned, NAN);
  before[4] = w_q.tensor.detach().clone();
  step.run(1, batches);
  const std::vector<Tensor> params = model->parameters();
  for (size_t i = 0; i < params.size(); ++i) {
    INFO("parameter " << i);
    const std::vector<double> a = params[i].to_vector(), b = before[i].to_vector();
    for (size_t j = 0; j < a.size(); ++j) CHECK((a[j] == b[j] || (std::isnan(a[j]) && std::isnan(b[j]))));
  }
  CHECK_THROWS_WITH_AS(step.check_finite(), doctest::Contains("training diverged at iteration 1 (lr 0.000999"), Error);
  step.run(2, batches);
  CHECK_THROWS_WITH_AS(step.check_finite(&batches),
                       doctest::Contains("anomaly mode: the forward of 'linear' received a non-finite input"), Error);
}

TEST_CASE("anomaly mode names the first op whose output or gradient is not finite") {
  const Tensor x = Tensor::from_vector({1.0, -1.0, 4.0}, {3}, DType::Float64).requires_grad_();
  {
    AnomalyModeGuard anomaly;
    CHECK_THROWS_WITH_AS(log(x), doctest::Contains("the forward of 'log' produced a non-finite value from finite inputs"),
                         Error);
    const Tensor zero = Tensor::zeros({1}, DType::Float64).requires_grad_();
    const Tensor root = pow(zero, 0.5);  // finite: 0
    CHECK_THROWS_WITH_AS(sum(root).backward(), doctest::Contains("the backward of 'pow' produced a non-finite gradient"),
                         Error);
  }
  CHECK_NOTHROW(log(x));  // off again: NaN is an ordinary value
}

TEST_CASE("flat buffers: linear adds dW straight into the gradient buffer, equal to a separate gradient") {
  // Two identical float64 models; only the first has an optimizer (and so pinned, flat gradients).
  const std::unique_ptr<nn::GPT> flat = tiny_gpt(), plain = tiny_gpt();
  optim::AdamW optimizer(flat->named_parameters());
  const std::vector<optim::Batch> batches = draw(2, 3);
  for (const optim::Batch& b : batches) {  // two backwards: the second accumulates onto the first
    flat->loss(b.x, b.y).backward();
    plain->loss(b.x, b.y).backward();
  }
  const std::vector<NamedTensor> a = flat->named_parameters(), b = plain->named_parameters();
  for (size_t i = 0; i < a.size(); ++i) {
    INFO(a[i].name);
    CHECK(a[i].tensor.impl()->grad_pinned);
    CHECK_CLOSE(a[i].tensor.grad(), b[i].tensor.grad(), 1e-13);
  }
}

}  // namespace train_step_test
