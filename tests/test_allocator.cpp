// The host caching allocator (core/caching_allocator.h): blocks come back for
// requests of their size, the statistics add up, empty_cache returns them, and
// a steady training loop asks the system for no tensor memory after its first step.
#include "core/caching_allocator.h"
#include "nn/gpt.h"
#include "optim/adam.h"
#include "optim/train_step.h"
#include "tests/helpers.h"

using namespace ag;

TEST_CASE("allocator: a freed block serves the next request of its rounded size") {
  void* first = nullptr;
  {
    const Tensor t = Tensor::empty({1000});  // 4000 bytes: a 4096-byte block
    first = t.raw_data();
  }
  const MemoryStats before = host_memory_stats();
  {
    const Tensor same_size = Tensor::empty({1000});
    CHECK(same_size.raw_data() == first);
    const Tensor same_block = Tensor::empty({1010});  // 4040 bytes: rounds to the same 4096, but that block is taken
    CHECK(same_block.raw_data() != first);
    CHECK(reinterpret_cast<uintptr_t>(same_block.raw_data()) % 64 == 0);
  }
  const MemoryStats after = host_memory_stats();
  CHECK(after.system_allocs == before.system_allocs + 1);  // only the second 4096-byte block was new
  CHECK(after.in_use_bytes == before.in_use_bytes);
  CHECK(after.cached_bytes == before.cached_bytes + 4096);
  host_empty_cache();
  CHECK(host_memory_stats().cached_bytes == 0);
}

TEST_CASE("allocator: steady-state GPT training steps allocate no tensor memory from the system") {
  // A small GPT trained by the one training step (optim/train_step.h): forward,
  // loss, backward, clip, AdamW. The optimizer's flat buffers hold the
  // parameters, gradients and AdamW's state from its construction, so step 1
  // already has every block a step needs; from step 2 on each is served from a list.
  const nn::GPTConfig config = test::gpt_sizes(13, 8, 2, 2, 16);
  Generator init(3);
  nn::GPT model(config, init);
  optim::AdamW optimizer(optim::decay_groups(model.named_parameters(), 0.1), {1e-3, 0.9, 0.99, 1e-8});
  optim::TrainStep step(optimizer, {},
                        [&](const Tensor& x, const Tensor& y, std::span<const int64_t> y_host) {
                          return model.loss(x, y, Reduction::Sum, -100, y_host);
                        },
                        Device::CPU);
  Generator batches(4);
  auto run = [&](int64_t iter) {
    std::vector<int64_t> x(4 * 8), y(4 * 8);
    for (int64_t& t : x) t = static_cast<int64_t>(batches.integer(13));
    for (int64_t& t : y) t = static_cast<int64_t>(batches.integer(13));
    const optim::Batch batch{Tensor::from_indices(x, {4, 8}), Tensor::from_indices(y, {4, 8})};
    const double loss = step.run(iter, {batch}).loss.item();
    step.check_finite();  // as char_lm does every CPU step (it releases the step's loss and norm)
    return loss;
  };
  run(0);
  const MemoryStats after_first = host_memory_stats();
  std::vector<int64_t> allocs;
  for (int64_t iter = 1; iter < 10; ++iter) {  // steps 2..10
    CHECK(std::isfinite(run(iter)));
    allocs.push_back(host_memory_stats().system_allocs - after_first.system_allocs);
  }
  std::string per_step;
  for (int64_t a : allocs) per_step += std::to_string(a) + " ";
  INFO("system allocations since step 1, after steps 2..10: " << per_step);
  CHECK(allocs == std::vector<int64_t>(allocs.size(), 0));
  CHECK(host_memory_stats().in_use_bytes == after_first.in_use_bytes);
}
