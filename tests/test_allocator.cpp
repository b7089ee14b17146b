// The host caching allocator (core/caching_allocator.h): blocks come back for
// requests of their size, the statistics add up, empty_cache returns them, and
// a steady training loop asks the system for no tensor memory after its first step.
#include "core/caching_allocator.h"
#include "nn/gpt.h"
#include "optim/adam.h"
#include "optim/clip_grad.h"
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
  // A small GPT trained as char_lm does: forward, loss, backward, clip, AdamW.
  Generator init(3);
  nn::GPT model({.vocab_size = 13, .block_size = 8, .n_layer = 2, .n_head = 2, .n_embd = 16}, init);
  const std::vector<NamedTensor> params = model.named_parameters();
  optim::AdamW optimizer(optim::decay_groups(params, 0.1), {1e-3, 0.9, 0.99, 1e-8});
  Generator batches(4);
  auto step = [&] {
    std::vector<int64_t> x(4 * 8), y(4 * 8);
    for (int64_t& t : x) t = static_cast<int64_t>(batches.integer(13));
    for (int64_t& t : y) t = static_cast<int64_t>(batches.integer(13));
    const Tensor loss = model.loss(Tensor::from_indices(x, {4, 8}), Tensor::from_indices(y, {4, 8}));
    optimizer.zero_grad();
    loss.backward();
    optim::clip_grad_norm(params, 1.0);
    optimizer.step();
    return loss.item();
  };
  // Step 1 allocates the activations, the gradients and AdamW's state. Step 2
  // still allocates: AdamW creates m and v lazily, in step 1's update, from
  // blocks the activations had just freed, and step 2's forward runs while the
  // first gradients are still alive (zero_grad comes after the forward, as in
  // char_lm), so its peak holds more than step 1's. From step 3 on every block
  // has a twin on a free list. (With state and gradients allocated up front,
  // in flat buffers, the count would start at step 2.)
  step();
  step();
  const MemoryStats after_warmup = host_memory_stats();
  std::vector<int64_t> allocs;
  for (int i = 3; i <= 10; ++i) {
    const double loss = step();
    CHECK(std::isfinite(loss));
    allocs.push_back(host_memory_stats().system_allocs - after_warmup.system_allocs);
  }
  std::string per_step;
  for (int64_t a : allocs) per_step += std::to_string(a) + " ";
  INFO("system allocations since step 2, after steps 3..10: " << per_step);
  CHECK(allocs == std::vector<int64_t>(allocs.size(), 0));
  CHECK(host_memory_stats().in_use_bytes == after_warmup.in_use_bytes);
}
