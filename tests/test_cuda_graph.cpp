// One CUDA graph per training step (optim/train_step.h, cuda/graph.h): a step
// replayed from the graph gives the bits of the same step run eagerly —
// losses, gradient norms and parameters over ten steps of a small GPT with
// dropout and clipping, at fp32 and bf16, across a change of shapes, a reseeded
// dropout generator and a capture that fails. On the CPU: what the graph rests
// on — the step constants (the learning rate and 1/n read from scalars) give the
// bits of the values passed as doubles, dropout's counter shift, the scored
// rows found on the targets' device (what a captured loss reads), and the option.
// The allocator's private pools are tested in tests/test_allocator.cpp.
#include <algorithm>
#include <memory>

#include "core/autograd.h"
#include "core/dispatch.h"
#include "core/safetensors.h"
#include "examples/common/checkpoint.h"
#include "examples/common/train.h"
#include "nn/gpt.h"
#include "optim/adam.h"
#include "optim/clip_grad.h"
#include "optim/schedule.h"
#include "optim/sgd.h"
#include "optim/train_step.h"
#include "tests/char_lm_helpers.h"
#include "tests/helpers.h"

// The file's names and using-directives stay its own in a unity build, where the test
// files compile as one translation unit (CMakeLists.txt).
namespace cuda_graph_test {

using namespace ag;

namespace {
constexpr int64_t kVocab = 13, kBlock = 16;

nn::GPTConfig small_gpt(double dropout) {
  nn::GPTConfig config = test::gpt_sizes(kVocab, kBlock, 2, 2, 32);
  config.dropout = dropout;
  return config;
}

std::vector<double> all_values(const nn::GPT& model) {
  std::vector<double> out;
  for (const Tensor& p : model.parameters()) {
    const std::vector<double> v = p.to_vector();
    out.insert(out.end(), v.begin(), v.end());
  }
  return out;
}

// `count` micro-batches of B sequences of T tokens, from `gen`; targets at -100 where `ignore` says.
std::vector<optim::Batch> random_batches(Generator& gen, int64_t count, int64_t B, int64_t T, bool ignore_some = false) {
  std::vector<optim::Batch> out;
  for (int64_t m = 0; m < count; ++m) {
    std::vector<int64_t> x(static_cast<size_t>(B * T)), y(x.size());
    for (int64_t& t : x) t = static_cast<int64_t>(gen.integer(kVocab));
    for (int64_t& t : y) t = ignore_some && gen.uniform() < 0.3 ? -100 : static_cast<int64_t>(gen.integer(kVocab));
    out.push_back({Tensor::from_indices(x, {B, T}), Tensor::from_indices(y, {B, T})});
  }
  return out;
}

optim::TrainOptions step_options() {
  optim::TrainOptions options;
  options.grad_accum = 2;
  options.lr = 3e-3;
  options.min_lr = 1e-4;
  options.warmup_iters = 3;
  options.lr_decay_iters = 30;
  options.grad_clip = 0.5;  // small enough to clip: the clip's coefficient is in the graph too
  return options;
}
}  // namespace

// --- on the CPU ---------------------------------------------------------------------------

TEST_CASE("train step: the step constants give the bits of the learning rate and 1/n passed as doubles") {
  // Two copies of one model: one trained by TrainStep (the learning rate read by the
  // update kernels from its scalar, each micro-batch's loss times a 1/n scalar), the
  // other by the same step spelled out with doubles, as TrainStep did before.
  const nn::GPTConfig config = small_gpt(0.0);
  Generator init_a(3), init_b(3);
  nn::GPT a(config, init_a), b(config, init_b);
  optim::AdamW opt_a(optim::decay_groups(a.named_parameters(), 0.1), {1e-3, 0.9, 0.99, 1e-8});
  optim::AdamW opt_b(optim::decay_groups(b.named_parameters(), 0.1), {1e-3, 0.9, 0.99, 1e-8});
  const optim::TrainOptions options = step_options();
  optim::TrainStep step(opt_a, options,
                        [&](const Tensor& x, const Tensor& y, std::span<const int64_t> y_host) {
                          return a.loss(x, y, Reduction::Sum, -100, y_host);
                        },
                        Device::CPU);
  Generator batches(4);
  for (int64_t iter = 0; iter < 5; ++iter) {
    const std::vector<optim::Batch> micro = random_batches(batches, 2, 3, kBlock, /*ignore_some=*/true);
    const optim::StepResult r = step.run(iter, micro);
    // The same step with doubles.
    const double lr = optim::warmup_cosine_lr(iter, {options.lr, options.min_lr, options.warmup_iters, options.lr_decay_iters});
    opt_b.set_lr(lr);
    int64_t n = 0;
    for (const optim::Batch& m : micro)
      for (int64_t t : m.y.to_indices()) n += t != -100;
    opt_b.zero_grad();
    Tensor loss;
    for (const optim::Batch& m : micro) {
      const std::vector<int64_t> y_host = m.y.to_indices();
      const Tensor share = mul(b.loss(m.x, m.y, Reduction::Sum, -100, y_host), 1.0 / static_cast<double>(n));
      share.backward();
      NoGradGuard no_grad;
      loss = loss.defined() ? add(loss, share.detach()) : share.detach();
    }
    const Tensor norm = optim::clip_grad_norm(opt_b, options.grad_clip);
    Tensor guard;
    {
      NoGradGuard no_grad;
      guard = add(norm, mul(loss.to(DType::Float64), 0.0));
    }
    opt_b.step(guard);
    CHECK(r.loss.item() == loss.item());
    CHECK(r.grad_norm.item() == norm.item());
    CHECK(all_values(a) == all_values(b));
  }
}

TEST_CASE("optim: a learning rate read from a scalar gives the bits of the same rate passed by value — adamw and sgd") {
  for (const bool adam : {true, false}) {
    CAPTURE(adam);
    Tensor p1 = Tensor::from_vector({0.5, -1.25, 2.0, 0.75}, {4}), p2 = p1.clone();
    p1.requires_grad_();
    p2.requires_grad_();
    std::unique_ptr<optim::Optimizer> by_value, by_scalar;
    if (adam) {
      by_value = std::make_unique<optim::AdamW>(std::vector<optim::NamedParameter>{{"p", p1}}, optim::AdamOptions{0.0123});
      by_scalar = std::make_unique<optim::AdamW>(std::vector<optim::NamedParameter>{{"p", p2}}, optim::AdamOptions{0.5});
    } else {
      by_value = std::make_unique<optim::SGD>(std::vector<optim::NamedParameter>{{"p", p1}}, optim::SgdOptions{0.0123, 0.9});
      by_scalar = std::make_unique<optim::SGD>(std::vector<optim::NamedParameter>{{"p", p2}}, optim::SgdOptions{0.5, 0.9});
    }
    const Tensor lr = Tensor::full({1}, 0.0123, DType::Float64);
    by_scalar->read_lr_from(lr);  // its own lr() (0.5) is not what the kernels read
    for (int step = 0; step < 3; ++step) {
      for (Tensor* p : {&p1, &p2}) {
        Tensor g = p->grad();
        kernel::cast(Tensor::from_vector({0.1 * step - 0.2, 0.3, -0.05, 1.0}, {4}), g);
      }
      by_value->step();
      by_scalar->step();
      CHECK(p1.to_vector() == p2.to_vector());
    }
    by_scalar->read_lr_from(Tensor());  // lr() again: 0.5 moves p2 away
    by_scalar->step();
    by_value->step();
    CHECK(p1.to_vector() != p2.to_vector());
  }
}

TEST_CASE("dropout: a counter shift adds to every counter (the CPU kernel: the reference for a replayed graph's)") {
  const Tensor x = Tensor::full({1000}, 1.0);
  Tensor shifted = Tensor::empty({1000}), moved = Tensor::empty({1000});
  const uint64_t shift = 12345;
  kernel::dropout(x, 0.3, 7, 100, &shift, shifted);
  kernel::dropout(x, 0.3, 7, 100 + shift, nullptr, moved);
  CHECK(shifted.to_vector() == moved.to_vector());
}

TEST_CASE("scored_positions: the scored targets' rows in increasing order, and GPT::loss's head over them alone") {
  // A captured step cannot upload rows the host found (a replay would read the capture's), so
  // GPT::loss finds them on the targets' device: kernel::scored_positions, a stable compaction.
  const Tensor y = Tensor::from_indices({-100, 3, 4, -100, -100, 0, 7, -100}, {8});
  Tensor rows = Tensor::empty({4}, DType::Int64), scored = Tensor::empty({4}, DType::Int64);
  kernel::scored_positions(y, -100, rows, scored);
  CHECK(rows.to_indices() == std::vector<int64_t>{1, 2, 5, 6});
  CHECK(scored.to_indices() == std::vector<int64_t>{3, 4, 0, 7});
  Tensor two = Tensor::empty({2}, DType::Int64), two_scored = Tensor::empty({2}, DType::Int64);
  kernel::scored_positions(y, -100, two, two_scored);  // n, the caller's count: nothing past it is written
  CHECK(two.to_indices() == std::vector<int64_t>{1, 2});
  // The loss with the targets read on the host (a training step's) and without: the same bits.
  nn::GPTConfig config = small_gpt(0.0);
  Generator init(3);
  nn::GPT model(config, init);
  Generator batches(5);
  const optim::Batch batch = random_batches(batches, 1, 3, kBlock, /*ignore_some=*/true)[0];
  const std::vector<int64_t> read = batch.y.to_indices();
  CHECK(model.loss(batch.x, batch.y, Reduction::Sum, -100, read).item() ==
        model.loss(batch.x, batch.y, Reduction::Sum, -100).item());
}

TEST_CASE("cuda: scored_positions on the device gives the CPU's rows, over more targets than its block has threads") {
  if (!ag::test::cuda_or_skip()) return;
  std::vector<int64_t> targets(5000);
  Generator gen(11);
  for (size_t i = 0; i < targets.size(); ++i) targets[i] = gen.uniform() < 0.3 ? static_cast<int64_t>(i % 97) : -100;
  const int64_t n = std::count_if(targets.begin(), targets.end(), [](int64_t t) { return t != -100; });
  const Tensor y = Tensor::from_indices(targets, {5000});
  Tensor rows = Tensor::empty({n}, DType::Int64), scored = Tensor::empty({n}, DType::Int64);
  kernel::scored_positions(y, -100, rows, scored);
  const Tensor y_gpu = y.to(Device::CUDA);
  Tensor rows_gpu = Tensor::empty({n}, DType::Int64, Device::CUDA), scored_gpu = Tensor::empty({n}, DType::Int64, Device::CUDA);
  kernel::scored_positions(y_gpu, -100, rows_gpu, scored_gpu);
  CHECK(rows_gpu.to_indices() == rows.to_indices());
  CHECK(scored_gpu.to_indices() == scored.to_indices());
}

TEST_CASE("cuda graph: a step on the CPU runs eagerly and says why, as --cuda-graph off does") {
  const nn::GPTConfig config = small_gpt(0.0);
  Generator init(3);
  nn::GPT model(config, init);
  optim::AdamW optimizer(optim::decay_groups(model.named_parameters(), 0.1), {1e-3, 0.9, 0.99, 1e-8});
  auto loss = [&](const Tensor& x, const Tensor& y, std::span<const int64_t> y_host) {
    return model.loss(x, y, Reduction::Sum, -100, y_host);
  };
  optim::TrainOptions options = step_options();
  CHECK(options.cuda_graph == CudaGraph::On);  // the default
  {
    optim::TrainStep step(optimizer, options, loss, Device::CPU);
    CHECK(step.cuda_graph_status() == "off: the CPU (CUDA graphs are a CUDA feature)");
    Generator batches(4);
    for (int64_t iter = 0; iter < 4; ++iter) step.run(iter, random_batches(batches, 2, 2, kBlock));
    CHECK(step.graph_replays() == 0);
  }
  options.cuda_graph = CudaGraph::Off;
  optim::TrainStep off(optimizer, options, loss, Device::CPU);
  CHECK(off.cuda_graph_status() == "off: --cuda-graph off");
  off.disable_cuda_graph("a test's reason");
  CHECK(off.cuda_graph_status() == "off: --cuda-graph off");  // the option is said first
  CHECK(option_from_string<CudaGraph>("off", "--cuda-graph") == CudaGraph::Off);
  CHECK(option_to_string(CudaGraph::On) == "on");
  CHECK_THROWS_AS(option_from_string<CudaGraph>("maybe", "--cuda-graph"), Error);
}

TEST_CASE("cuda graph: --cuda-graph is one table line — parsed, in --help, saved, a Setting a resumed run may change") {
  char_lm::TrainConfig parsed;
  const std::set<std::string> given = ag::test::parse_train(parsed, {"--cuda-graph", "off"});
  CHECK(parsed.optim.cuda_graph == CudaGraph::Off);
  CHECK(given.count("cuda_graph") == 1);
  const auto [status, help] = ag::test::run_char_lm("train --help");
  CHECK(status == 0);
  CHECK(ag::test::contains(help, "--cuda-graph"));

  const ag::test::TempDir tmp("cuda_graph_option");
  char_lm::TrainConfig c = ag::test::tiny_run(tmp.file("run"));
  c.run.max_iters = 2;
  c.run.eval_interval = 2;
  c.optim.cuda_graph = CudaGraph::Off;
  char_lm::train(c);
  auto saved = [&] {
    return load_safetensors(char_lm::train_state_path(char_lm::find_checkpoint(c.run.out))).metadata.at("cuda-graph");
  };
  CHECK(saved() == "off");
  // Not given again: the run's value; given another: taken (a Setting), no conflict.
  char_lm::TrainConfig resume = ag::test::tiny_run(c.run.out);
  resume.run.resume = true;
  resume.run.max_iters = 4;
  resume.run.eval_interval = 2;
  resume.given = std::set<std::string>{"resume", "max_iters", "out", "eval_interval"};
  CHECK(ag::test::error_of([&] { char_lm::train(resume); }) == "");
  CHECK(saved() == "off");
  resume.run.max_iters = 6;
  resume.given->insert("cuda_graph");
  resume.optim.cuda_graph = CudaGraph::On;
  CHECK(ag::test::error_of([&] { char_lm::train(resume); }) == "");
  CHECK(saved() == "on");
}

// --- on the device ---------------------------------------------------------------------------

namespace {
struct Trained {
  std::vector<double> losses, norms, params;
  int64_t replays = 0, hook_calls = 0;
  std::string status;
};

// `steps` steps of a small GPT (dropout 0.1, two micro-batches, clipping) on CUDA.
// at_step(iter) may change the step's shapes or reseed dropout's generator.
Trained train_on_cuda(CudaGraph graph, Precision precision, int64_t steps,
                      const std::function<int64_t(int64_t iter)>& T_at = nullptr,
                      const std::function<void(int64_t iter)>& before_step = nullptr, bool sync_in_loss = false,
                      bool activation_hook = false) {
  Generator init(3);
  nn::GPT model(small_gpt(0.1), init);
  model.to(Device::CUDA);
  model.train();
  int64_t hook_calls = 0;
  if (activation_hook) model.set_activation_hook([&hook_calls](const std::string&, const Tensor&) { ++hook_calls; });
  optim::AdamW optimizer(optim::decay_groups(model.named_parameters(), 0.1), {1e-3, 0.9, 0.99, 1e-8});
  optim::TrainOptions options = step_options();
  options.cuda_graph = graph;
  options.precision = precision;
  optim::TrainStep step(optimizer, options,
                        [&](const Tensor& x, const Tensor& y, std::span<const int64_t> y_host) {
                          const Tensor loss = model.loss(x, y, Reduction::Sum, -100, y_host);
                          if (sync_in_loss) cuda::synchronize();  // what a capture cannot hold
                          return loss;
                        },
                        Device::CUDA);
  manual_seed(11);  // dropout draws from the default generator
  Generator batches(4);
  Trained out;
  for (int64_t iter = 0; iter < steps; ++iter) {
    if (before_step) before_step(iter);
    const optim::StepResult r = step.run(iter, random_batches(batches, 2, 4, T_at ? T_at(iter) : kBlock));
    out.losses.push_back(r.loss.item());
    out.norms.push_back(r.grad_norm.item());
  }
  step.check_finite();
  out.params = all_values(model);
  out.replays = step.graph_replays();
  out.hook_calls = hook_calls;
  out.status = step.cuda_graph_status();
  return out;
}

void check_same_bits(const Trained& graph, const Trained& eager) {
  CHECK(graph.losses == eager.losses);
  CHECK(graph.norms == eager.norms);
  CHECK(graph.params == eager.params);
}
}  // namespace

TEST_CASE("cuda: a training step replayed from its CUDA graph gives the eager step's bits — fp32 and bf16") {
  if (!test::cuda_or_skip()) return;
  for (const Precision precision : {Precision::FP32, Precision::BF16}) {
    CAPTURE(name_of(precision));
    const Trained eager = train_on_cuda(CudaGraph::Off, precision, 10);
    const Trained graph = train_on_cuda(CudaGraph::On, precision, 10);
    INFO("graph status: " << graph.status);
    CHECK(graph.replays == 8);  // steps 2 (captured, then launched) to 9
    CHECK(eager.replays == 0);
    check_same_bits(graph, eager);
    CHECK(eager.losses.back() < eager.losses.front());  // it trains
  }
}

TEST_CASE("cuda: new shapes capture again, and a reseeded dropout generator too, bit for bit") {
  if (!test::cuda_or_skip()) return;
  auto T_at = [](int64_t iter) { return iter < 5 ? kBlock : kBlock / 2; };
  auto reseed = [](int64_t iter) {
    if (iter == 11) manual_seed(99);
  };
  const Trained eager = train_on_cuda(CudaGraph::Off, Precision::FP32, 16, T_at, reseed);
  const Trained graph = train_on_cuda(CudaGraph::On, Precision::FP32, 16, T_at, reseed);
  INFO("graph status: " << graph.status);
  // T = 16: steps 2..4 replayed; T = 8: steps 5, 6 eager, 7..10 replayed; reseeded at 11: 11 eager, 12..15 replayed
  CHECK(graph.replays == 3 + 4 + 4);
  check_same_bits(graph, eager);
}

TEST_CASE("cuda: dropout's generator rewound by manual_seed with the captured seed captures again, bit for bit") {
  if (!test::cuda_or_skip()) return;
  // manual_seed(11) again at step 6 puts the generator back at offset 0, before where the capture
  // at step 2 found it: the shift would be negative, so the step runs eagerly and the next captures.
  auto rewind = [](int64_t iter) {
    if (iter == 6) manual_seed(11);
  };
  const Trained eager = train_on_cuda(CudaGraph::Off, Precision::FP32, 10, nullptr, rewind);
  const Trained graph = train_on_cuda(CudaGraph::On, Precision::FP32, 10, nullptr, rewind);
  INFO("graph status: " << graph.status);
  CHECK(graph.replays == 4 + 3);  // steps 2..5; rewound at 6: 6 eager, 7..9 replayed
  check_same_bits(graph, eager);
}

TEST_CASE("cuda: a step that cannot be captured says why once and runs eagerly, with the same results") {
  if (!test::cuda_or_skip()) return;
  const Trained eager = train_on_cuda(CudaGraph::Off, Precision::FP32, 6, nullptr, nullptr, true);
  const Trained graph = train_on_cuda(CudaGraph::On, Precision::FP32, 6, nullptr, nullptr, true);
  CHECK(graph.replays == 0);
  CHECK(graph.status.find("off: the capture at iteration 2 failed") == 0);
  check_same_bits(graph, eager);
}

TEST_CASE("cuda: an activation hook keeps the steps eager (a capture would run it once), with the same results") {
  if (!test::cuda_or_skip()) return;
  const Trained eager = train_on_cuda(CudaGraph::Off, Precision::FP32, 6, nullptr, nullptr, false, true);
  const Trained graph = train_on_cuda(CudaGraph::On, Precision::FP32, 6, nullptr, nullptr, false, true);
  INFO("graph status: " << graph.status);
  CHECK(graph.replays == 0);
  CHECK(graph.status.find("off: the capture at iteration 2 failed") == 0);
  CHECK(graph.status.find("activation hook") != std::string::npos);
  CHECK(eager.hook_calls > 0);
  CHECK(graph.hook_calls == eager.hook_calls);  // every step's forward called it, as eagerly
  check_same_bits(graph, eager);
}

TEST_CASE("cuda: AG_CUDA_SYNC keeps the steps eager and says so") {
  if (!test::cuda_or_skip()) return;
  // A process of its own: the variable is read once, at the first launch.
  const ag::test::TempDir tmp("cuda_graph_sync");
  const std::pair<int, std::string> run = ag::test::run_char_lm(
      "train --device cuda --out " + tmp.file("run") + " --data " + ag::test::generated_text_file() +
          " --n-layer 1 --n-head 2 --n-embd 16 --block-size 8 --batch-size 2 --max-iters 4 --eval-interval 4"
          " --eval-iters 1 --sample-tokens 0",
      "AG_CUDA_SYNC=1 ");
  INFO(run.second);
  CHECK(run.first == 0);
  CHECK(run.second.find("cuda graph: off: AG_CUDA_SYNC (every launch waits for the device, which a capture cannot)") !=
        std::string::npos);
}

TEST_CASE("cuda: empty_cache between replays leaves the graph's memory alone") {
  if (!test::cuda_or_skip()) return;
  auto empty = [](int64_t iter) {
    if (iter >= 3) cuda::empty_cache();
  };
  const Trained eager = train_on_cuda(CudaGraph::Off, Precision::FP32, 8, nullptr, empty);
  const Trained graph = train_on_cuda(CudaGraph::On, Precision::FP32, 8, nullptr, empty);
  CHECK(graph.replays == 6);
  CHECK(cuda::memory_stats().pool_bytes == 0);  // both steps gone: their pools released
  check_same_bits(graph, eager);
}

}  // namespace cuda_graph_test
