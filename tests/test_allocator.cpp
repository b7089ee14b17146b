// The host caching allocator (core/caching_allocator.h): blocks come back for
// requests of their size, the statistics add up, empty_cache returns them, and
// a steady training loop asks the system for no tensor memory after its first step.
#include <algorithm>

#include "core/caching_allocator.h"
#include "nn/gpt.h"
#include "optim/adam.h"
#include "optim/train_step.h"
#include "tests/helpers.h"

// The file's names and using-directives stay its own in a unity build, where the test
// files compile as one translation unit (CMakeLists.txt).
namespace allocator_test {

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

// --- private pools (CUDA graphs' memory, core/caching_allocator.h) -------------------------
//
// Tested on a host allocator over a system that records what it was asked for,
// so that which block comes from where, and what goes back to the system, are
// seen exactly. The device's allocator is the same template over cudaMalloc.
namespace {
struct RecordingMemory {
  static inline int64_t allocs = 0, releases = 0;
  static inline bool out_of_memory = false;  // the next allocate fails (as cudaMalloc's would)
  static void* allocate(size_t bytes) {
    if (out_of_memory) return nullptr;
    ++allocs;
    return std::malloc(bytes);
  }
  static void release(void* ptr) {
    ++releases;
    std::free(ptr);
  }
  struct Lent {
    void* ptr;
    size_t nbytes, size;
    bool operator==(const Lent&) const = default;
  };
  static inline std::vector<Lent> lent;             // every lend(), in order
  static inline std::vector<Lent> taken_back;       // every take_back(), nbytes 0
  static void lend(void* ptr, size_t nbytes, size_t size) { lent.push_back({ptr, nbytes, size}); }
  static void take_back(void* ptr, size_t size) { taken_back.push_back({ptr, 0, size}); }
};
using PoolAllocator = CachingAllocator<RecordingMemory>;
}  // namespace

TEST_CASE("allocator: the system is told each block's request when it is lent, and its block when it comes back") {
  // What lets the host's System poison the bytes no tensor owns (core/tensor.cpp).
  RecordingMemory::lent.clear();
  RecordingMemory::taken_back.clear();
  PoolAllocator a("test memory");
  void* first = a.allocate(1000);
  a.deallocate(first, 1000);
  void* again = a.allocate(1001);  // the same 1024-byte block, from the list this time
  CHECK(again == first);
  void* empty = a.allocate(0);  // a block of its own, none of whose bytes is the tensor's
  a.deallocate(again, 1001);
  a.deallocate(empty, 0);
  using Lent = RecordingMemory::Lent;
  CHECK(RecordingMemory::lent == std::vector<Lent>{{first, 1000, 1024}, {first, 1001, 1024}, {empty, 0, 512}});
  CHECK(RecordingMemory::taken_back == std::vector<Lent>{{first, 0, 1024}, {first, 0, 1024}, {empty, 0, 512}});
  a.empty_cache();
}

#if AG_ADDRESS_SANITIZER
// Only in the sanitizer build (scripts/build_sanitize.sh): elsewhere nothing is poisoned.
TEST_CASE("allocator: under AddressSanitizer a tensor's bytes are addressable, its block's rest and a freed tensor's are not") {
  const char* freed = nullptr;
  {
    const Tensor t = Tensor::zeros({1001});  // 4004 bytes of a 4096-byte block
    const char* bytes = static_cast<const char*>(t.raw_data());
    CHECK(__asan_region_is_poisoned(const_cast<char*>(bytes), 4004) == nullptr);
    CHECK(__asan_address_is_poisoned(bytes + 4004));  // mid-granule: ASan's shadow marks 4 of 8 bytes
    CHECK(__asan_address_is_poisoned(bytes + 4095));
    freed = bytes;
  }
  CHECK(__asan_address_is_poisoned(freed));  // cached, not the tensor's any more
  CHECK(__asan_address_is_poisoned(freed + 4003));
  const Tensor next = Tensor::empty({1000});  // the cached block again, now 4000 bytes
  CHECK(next.raw_data() == freed);
  CHECK(__asan_region_is_poisoned(const_cast<char*>(freed), 4000) == nullptr);
  CHECK(__asan_address_is_poisoned(freed + 4000));
  // Its bytes are 0xFF, not the last tensor's values: an output a kernel never writes reads NaN.
  const float* values = next.data<float>();
  CHECK(std::all_of(values, values + 1000, [](float v) { return std::isnan(v); }));
}
#endif

TEST_CASE("allocator pool: blocks of a captured pool serve no general request and survive empty_cache") {
  PoolAllocator a("test memory");
  void* before = a.allocate(1000);  // a block made before the capture: general
  a.deallocate(before, 1000);       // now on the general list
  const PoolAllocator::PoolId pool = a.begin_pool();
  void* taken = a.allocate(1000);  // no pool block of that size yet: the general list's block joins the pool
  CHECK(taken == before);
  void* fresh = a.allocate(5000);  // from the system, into the pool
  void* reused = nullptr;
  a.deallocate(fresh, 5000);       // back to the pool's list
  reused = a.allocate(5000);       // and out of it again within the capture
  CHECK(reused == fresh);
  a.deallocate(reused, 5000);
  a.end_pool();
  CHECK(a.stats().pool_bytes == 1024 + 5120);
  CHECK(a.stats().in_use_bytes == 1024);  // `taken` is still in use (a graph's output, say)

  // After the capture, a general request of the pool's sizes gets new blocks from the system.
  const int64_t allocs = RecordingMemory::allocs;
  void* general = a.allocate(5000);
  CHECK(general != fresh);
  CHECK(RecordingMemory::allocs == allocs + 1);
  // The pool's block in use, freed now, goes back to the pool, not to the general list.
  a.deallocate(taken, 1000);
  void* general_small = a.allocate(1000);
  CHECK(general_small != taken);
  a.deallocate(general, 5000);
  a.deallocate(general_small, 1000);

  // empty_cache returns the general blocks to the system and keeps the pool's.
  const int64_t releases = RecordingMemory::releases;
  a.empty_cache();
  CHECK(RecordingMemory::releases == releases + 2);  // general and general_small
  CHECK(a.stats().cached_bytes == 1024 + 5120);       // the pool's two blocks, free but kept
  CHECK(a.stats().pool_bytes == 1024 + 5120);

  // Releasing the pool hands its blocks to the general lists: served again, and freed by empty_cache.
  a.release_pool(pool);
  CHECK(a.stats().pool_bytes == 0);
  CHECK(a.stats().cached_bytes == 1024 + 5120);
  void* again = a.allocate(5000);
  CHECK(again == fresh);
  a.deallocate(again, 5000);
  a.empty_cache();
  CHECK(RecordingMemory::releases == releases + 4);
  CHECK(a.stats().cached_bytes == 0);
  CHECK(a.stats().in_use_bytes == 0);
}

TEST_CASE("allocator pool: a block made before the capture and freed during it joins the pool") {
  // The graph may still read it on every replay: it must not serve another tensor.
  PoolAllocator a("test memory");
  void* input = a.allocate(2000);
  const PoolAllocator::PoolId pool = a.begin_pool();
  a.deallocate(input, 2000);
  void* inside = a.allocate(2000);  // a later request in the same capture may take it (stream order keeps it safe)
  CHECK(inside == input);
  a.deallocate(inside, 2000);
  a.end_pool();
  void* outside = a.allocate(2000);
  CHECK(outside != input);
  a.deallocate(outside, 2000);
  CHECK(a.stats().pool_bytes == 2048);
  a.release_pool(pool);
  a.empty_cache();
  CHECK(a.stats().cached_bytes == 0);
}

TEST_CASE("allocator pool: a block still in use when its pool is released goes to the general lists when freed") {
  PoolAllocator a("test memory");
  const PoolAllocator::PoolId pool = a.begin_pool();
  void* output = a.allocate(700);
  a.end_pool();
  a.release_pool(pool);
  CHECK(a.stats().pool_bytes == 0);
  a.deallocate(output, 700);
  void* next = a.allocate(700);  // general now
  CHECK(next == output);
  a.deallocate(next, 700);
  a.empty_cache();
  CHECK(a.stats().cached_bytes == 0);
}

TEST_CASE("allocator pool: under capture the out-of-memory retry frees nothing, and one pool captures at a time") {
  PoolAllocator a("test memory");
  void* cached = a.allocate(3000);
  a.deallocate(cached, 3000);
  const PoolAllocator::PoolId pool = a.begin_pool();
  CHECK_THROWS_WITH_AS(a.begin_pool(), doctest::Contains("still captures"), Error);
  const int64_t releases = RecordingMemory::releases;
  RecordingMemory::out_of_memory = true;
  // Outside a capture the retry would free the cached block (on the device: cudaFree, which waits for the GPU).
  CHECK_THROWS_WITH_AS(a.allocate(9000), doctest::Contains("out of memory"), Error);
  RecordingMemory::out_of_memory = false;
  CHECK(RecordingMemory::releases == releases);
  CHECK(a.stats().cached_bytes == 3072);
  a.release_pool(pool);  // ends the capture too
  void* after = a.allocate(3000);
  CHECK(after == cached);
  a.deallocate(after, 3000);
  const PoolAllocator::PoolId second = a.begin_pool();  // a new capture may begin
  CHECK(second != pool);
  a.end_pool();
  a.release_pool(second);
  a.empty_cache();
}

TEST_CASE("allocator pool: two pools keep their blocks apart") {
  PoolAllocator a("test memory");
  const PoolAllocator::PoolId first = a.begin_pool();
  void* x = a.allocate(600);
  a.deallocate(x, 600);
  a.end_pool();
  const PoolAllocator::PoolId second = a.begin_pool();
  void* y = a.allocate(600);  // the first pool's free block is not the second's
  CHECK(y != x);
  a.deallocate(y, 600);
  a.end_pool();
  CHECK(a.stats().pool_bytes == 2 * 1024);
  a.release_pool(first);
  a.release_pool(second);
  CHECK(a.stats().pool_bytes == 0);
  a.empty_cache();
  CHECK(a.stats().cached_bytes == 0);
}

}  // namespace allocator_test
