// The kernel profiler (core/profiler.h): off unless started, records every
// kernel call with its family and shapes while on, keeps GEMM shapes whole, and
// the GEMMs of a GPT training step add up to training_step_flops.
#include "core/profiler.h"
#include "nn/gpt.h"
#include "tests/helpers.h"

// The file's names and using-directives stay its own in a unity build, where the test
// files compile as one translation unit (CMakeLists.txt).
namespace profiler_test {

using namespace ag;

TEST_CASE("profiler: records nothing until started, then every kernel call with its shapes") {
  const Tensor a = ag::test::random({3, 4}, 1, DType::Float32, false);
  const Tensor b = ag::test::random({4, 5}, 2, DType::Float32, false);
  CHECK_FALSE(profiler::recording());
  (void)matmul(a, b);
  profiler::start();
  CHECK(profiler::recording());
  (void)gelu(matmul(a, b));
  const std::vector<profiler::KernelRecord> records = profiler::stop();
  CHECK_FALSE(profiler::recording());
  CHECK(profiler::stop().empty());  // stop() hands the records over once

  REQUIRE(records.size() == 2);
  CHECK(std::string(records[0].kernel) == "gemm");
  CHECK(std::string(records[0].family) == "matmul");
  CHECK(records[0].grad_mode);
  CHECK(records[0].shapes == std::vector<Shape>{{3, 4}, {4, 5}, {3, 5}});
  REQUIRE(records[0].is_gemm);
  CHECK(records[0].gemm.M == 3);
  CHECK(records[0].gemm.N == 5);
  CHECK(records[0].gemm.K == 4);
  CHECK(records[0].gemm_flops() == 2.0 * 3 * 5 * 4);
  CHECK(profiler::describe_gemm(records[0].gemm) == "1x [3,4]·[4,5]");
  CHECK(std::string(records[1].kernel) == "unary");
  CHECK(std::string(records[1].family) == "elementwise");
  CHECK_FALSE(records[1].is_gemm);
  CHECK(records[1].gemm_flops() == 0.0);
  for (const profiler::KernelRecord& r : records) CHECK(r.ms >= 0.0);

  const std::vector<profiler::Total> by_family =
      profiler::totals(records, [](const profiler::KernelRecord& r) { return std::string(r.family); });
  REQUIRE(by_family.size() == 2);
  CHECK(by_family[0].calls + by_family[1].calls == 2);
  CHECK(profiler::summary(records).find("gemm") != std::string::npos);

  // backward() runs with grad mode off: its kernels say so.
  const Tensor w = ag::test::random({4, 5}, 3, DType::Float32);
  const Tensor loss = sum(matmul(a, w)), seed = Tensor::ones({});
  profiler::start();
  loss.backward(seed);
  const std::vector<profiler::KernelRecord> backward = profiler::stop();
  REQUIRE_FALSE(backward.empty());
  for (const profiler::KernelRecord& r : backward) CHECK_FALSE(r.grad_mode);
}

namespace {
// The FLOPs of the GEMMs one forward and backward of a GPT with `config` runs, as the profiler records them.
double step_gemm_flops(const nn::GPTConfig& config, int64_t B, int64_t T) {
  Generator init(5);
  nn::GPT model(config, init);
  std::vector<int64_t> x(B * T), y(B * T);
  Generator gen(6);
  for (int64_t& t : x) t = static_cast<int64_t>(gen.integer(config.vocab_size));
  for (int64_t& t : y) t = static_cast<int64_t>(gen.integer(config.vocab_size));
  profiler::start();
  model.loss(Tensor::from_indices(x, {B, T}), Tensor::from_indices(y, {B, T})).backward();
  double flops = 0;
  for (const profiler::KernelRecord& r : profiler::stop()) flops += r.gemm_flops();
  return flops;
}
}  // namespace

TEST_CASE("profiler: the GEMMs of a GPT training step do exactly training_step_flops") {
  // training_step_flops counts every product of the model by hand; the
  // profiler sees the GEMMs the code really runs. If an op starts doing its
  // products another way (or skipping masked ones), this says so.
  const nn::GPTConfig config{.vocab_size = 13, .block_size = 8, .n_layer = 2, .n_head = 2, .n_embd = 16};
  CHECK(step_gemm_flops(config, 3, 8) == static_cast<double>(nn::training_step_flops(config, 3, 8)));
}

TEST_CASE("profiler: a linear-attention GPT's step counts its GEMMs plus the prefix products, no T×T term") {
  // Its GEMMs are the projections, the MLP and the head; the prefix products
  // (elu1: r = d_h) run in their own kernels, 2 · 2·B·T·r·(d_h + 1) per head and
  // layer forward, 3x with the backward.
  nn::GPTConfig config{.vocab_size = 13, .block_size = 8, .n_layer = 2, .n_head = 2, .n_embd = 16};
  config.attention = AttentionFunction::Linear;
  const int64_t B = 3, T = 8, d_h = 8;
  const double gemm_flops = step_gemm_flops(config, B, T);
  const double prefix_products = 3.0 * config.n_layer * B * config.n_head * (2 * 2 * T * d_h * (d_h + 1));
  CHECK(gemm_flops + prefix_products == static_cast<double>(nn::training_step_flops(config, B, T)));
}

TEST_CASE("profiler: an ssd GPT's step counts its GEMMs (w_dt and w_g too) plus the chunked products and the convolution, by hand") {
  // Per layer, head and position forward, in chunks of Q = kDefaultAttentionChunk: the visible half
  // of the chunk's q·k and its weighted sum of v, (Q + 1)·d multiply-adds, and the state's readout
  // and update, d·d each; the convolution, W multiply-adds per position and channel of [q|k|v]
  // (C + 2·C_kv = 48). 2 FLOPs a multiply-add, 3x with the backward. Its GEMMs are W_Q … W_O's,
  // w_dt's, w_g's (with the gate), the MLP's and the head's, as the profiler records them.
  for (const bool gate : {true, false})
    for (const int64_t W : {int64_t{4}, int64_t{0}}) {
      CAPTURE(gate);
      CAPTURE(W);
      nn::GPTConfig config{.vocab_size = 13, .block_size = 8, .n_layer = 2, .n_head = 2, .n_embd = 16};
      config.attention = AttentionFunction::Ssd;
      config.ssd_gate = gate;
      config.ssd_conv = W;
      const int64_t B = 3, T = 8, d_h = 8, Q = kDefaultAttentionChunk;
      const double gemm_flops = step_gemm_flops(config, B, T);
      const double chunked = 3.0 * config.n_layer * B * config.n_head * T * 2 * ((Q + 1) * d_h + 2 * d_h * d_h);
      const double conv = 3.0 * config.n_layer * 2 * B * T * W * 48;
      CHECK(gemm_flops + chunked + conv == static_cast<double>(nn::training_step_flops(config, B, T)));
    }
}

TEST_CASE("profiler: an lstm GPT's step is all GEMMs — X W_ih once and h W_hh per step, 3x with the backward") {
  // No projections W_Q … W_O: per layer forward 2·B·T·C·4C for X W_ih and as much for the T products
  // h_{t−1} W_hh; the backward's dX, dW_ih, dW_hh and dG W_hhᵀ per step are twice that.
  nn::GPTConfig config{.vocab_size = 13, .block_size = 8, .n_layer = 2, .n_head = 2, .n_embd = 16};
  config.attention = AttentionFunction::Lstm;
  CHECK(step_gemm_flops(config, 3, 8) == static_cast<double>(nn::training_step_flops(config, 3, 8)));
}

}  // namespace profiler_test
