// The caching allocator behind every tensor's memory, on the host
// (core/tensor.cpp) and on the device (cuda/context.cu): the same design,
// written once here, over each one's system allocator.
//
// A training step allocates and frees the same few hundred sizes every step, and
// the system calls are slow: on the device cudaFree synchronizes the whole GPU;
// on the host, glibc serves large blocks with mmap and returns them with munmap
// (or trims its heap), so every step faults its buffers back in page by page,
// the kernel zeroing each page first. So a freed block is not returned to the
// system: it goes on a free list for its size, and the next request of that size
// takes it back.
//
//   - Sizes are rounded up to a multiple of kGranule (512 bytes); each rounded
//     size has its own free list, and a block only ever serves requests of its
//     rounded size (no splitting or merging). After the first step of a loop
//     whose shapes repeat, every request is served from a list: system_allocs
//     stays flat, and no page is faulted in again.
//   - When the system allocator runs out of memory, the cached blocks are freed
//     and the call is retried once. empty_cache() does the same on demand (after
//     a change of shapes has left many blocks of sizes no longer used).
//   - A mutex guards the lists: tensors may be freed on any thread.
//   - Blocks are not cleared: a new tensor's contents are undefined, as they were
//     with malloc. The System is told when a block starts serving a request and
//     when it comes back (lend, take_back): the host's poisons, under
//     AddressSanitizer, a block's bytes past the request and a cached block's
//     bytes, so that the sanitizer build reports a kernel that reads or writes
//     past a tensor's end, or memory of a tensor already freed, as it would with
//     malloc (the cache would otherwise hide both: core/tensor.cpp).
//   - Private pools, for CUDA graphs (cuda/graph.h; PyTorch's design). A captured
//     graph keeps the addresses its kernels were recorded with, and every replay
//     writes them again: those blocks must never serve another tensor while the
//     graph exists. So between begin_pool() and end_pool() (the capture) every
//     request is served from the pool's own free lists, or failing that from the
//     general lists or the system, and the block then belongs to the pool; every
//     block freed meanwhile goes to the pool too, whoever allocated it (a tensor
//     made before the capture and freed during it may still be read by the graph).
//     A pool's block freed after the capture goes back to the pool's lists, where
//     only a later capture into the same pool finds it: general requests never
//     take it, and neither empty_cache() nor the out-of-memory retry releases it.
//     release_pool() (the graph destroyed) hands its free blocks to the general
//     lists, and its blocks still in use go there when freed.
//     While a pool captures, the out-of-memory retry frees nothing: on the device
//     cudaFree waits for the GPU, which a capture forbids, so the request fails
//     and so does the capture (the step then runs eagerly).
//
// System supplies the memory:
//   static void* allocate(size_t bytes);  // nullptr when out of memory
//   static void release(void* ptr);
//   static void lend(void* ptr, size_t nbytes, size_t size);  // the block (size bytes) now serves nbytes
//   static void take_back(void* ptr, size_t size);            // the block is free again, cached
// (C++17: nvcc compiles this header too.)
#pragma once
#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <mutex>
#include <string>
#include <unordered_map>
#include <vector>

#include "core/error.h"

namespace ag {

struct MemoryStats {
  size_t in_use_bytes = 0;    // held by live blocks (rounded sizes)
  size_t cached_bytes = 0;    // freed blocks kept for reuse (the private pools' among them)
  size_t pool_bytes = 0;      // blocks that belong to private pools, in use or free
  int64_t system_allocs = 0;  // calls of the system allocator so far; flat in a steady training loop
};

// The host's allocator (core/tensor.cpp); the device's are cuda::memory_stats()
// and cuda::empty_cache() (cuda/context.h).
MemoryStats host_memory_stats();
void host_empty_cache();  // returns every cached host block to the system

template <class System>
class CachingAllocator {
 public:
  // `what` names the memory in the out-of-memory error ("host", "cudaMalloc").
  explicit CachingAllocator(const char* what) : what_(what) {}

  using PoolId = uint64_t;  // 0 is no pool

  void* allocate(size_t nbytes) {
    const size_t size = round_up(nbytes);
    std::lock_guard<std::mutex> lock(mutex_);
    void* ptr = capturing_ ? take(pools_[capturing_].free[size], size) : nullptr;
    if (!ptr) ptr = take(free_[size], size);
    if (!ptr) ptr = system_allocate(size);
    if (capturing_ && !owner_.count(ptr)) {
      owner_[ptr] = {capturing_, size};
      stats_.pool_bytes += size;
    }
    stats_.in_use_bytes += size;
    System::lend(ptr, nbytes, size);
    return ptr;
  }

  // nbytes: what allocate() was given for this block.
  void deallocate(void* ptr, size_t nbytes) {
    if (!ptr) return;
    const size_t size = round_up(nbytes);
    std::lock_guard<std::mutex> lock(mutex_);
    PoolId pool = 0;
    if (!owner_.empty()) {
      const auto it = owner_.find(ptr);
      if (it != owner_.end()) pool = it->second.pool;
    }
    if (!pool && capturing_) {  // made before the capture, freed during it: the graph may read it
      pool = capturing_;
      owner_[ptr] = {pool, size};
      stats_.pool_bytes += size;
    }
    System::take_back(ptr, size);
    (pool ? pools_[pool].free : free_)[size].push_back(ptr);
    stats_.in_use_bytes -= size;
    stats_.cached_bytes += size;
  }

  // Starts a new private pool and routes every allocation and free to it until
  // end_pool(). One pool captures at a time.
  PoolId begin_pool() {
    std::lock_guard<std::mutex> lock(mutex_);
    AG_CHECK(!capturing_, what_ << ": begin_pool while pool " << capturing_ << " still captures");
    capturing_ = next_pool_++;
    pools_[capturing_];
    return capturing_;
  }
  // Ends the capture: the pool keeps its blocks until release_pool.
  void end_pool() {
    std::lock_guard<std::mutex> lock(mutex_);
    capturing_ = 0;
  }
  // Gives the pool's blocks back to the general lists: the free ones now, the ones
  // still in use when they are freed. Ends its capture if it is still capturing.
  void release_pool(PoolId pool) {
    std::lock_guard<std::mutex> lock(mutex_);
    const auto found = pools_.find(pool);
    if (found == pools_.end()) return;
    if (capturing_ == pool) capturing_ = 0;
    for (auto& [size, list] : found->second.free)
      for (void* ptr : list) free_[size].push_back(ptr);
    pools_.erase(found);
    for (auto it = owner_.begin(); it != owner_.end();) {
      if (it->second.pool != pool) {
        ++it;
        continue;
      }
      stats_.pool_bytes -= it->second.size;
      it = owner_.erase(it);
    }
  }

  MemoryStats stats() {
    std::lock_guard<std::mutex> lock(mutex_);
    return stats_;
  }

  void empty_cache() {
    std::lock_guard<std::mutex> lock(mutex_);
    release_cached();
  }

 private:
  static constexpr size_t kGranule = 512;
  // A zero-byte request still gets a block of its own: every pointer is valid and distinct.
  static size_t round_up(size_t nbytes) { return (std::max<size_t>(nbytes, 1) + kGranule - 1) / kGranule * kGranule; }

  // With mutex_ held: a block from `list`, or null.
  void* take(std::vector<void*>& list, size_t size) {
    if (list.empty()) return nullptr;
    void* ptr = list.back();
    list.pop_back();
    stats_.cached_bytes -= size;
    return ptr;
  }

  // With mutex_ held.
  void* system_allocate(size_t size) {
    void* ptr = System::allocate(size);
    if (!ptr && !capturing_) {
      release_cached();
      ptr = System::allocate(size);
    }
    if (!ptr)
      throw Error(std::string(what_) + ": out of memory allocating " + std::to_string(size) + " bytes (" +
                  std::to_string(stats_.in_use_bytes) + " in use, " + std::to_string(stats_.cached_bytes) +
                  " cached)");
    ++stats_.system_allocs;
    return ptr;
  }

  // With mutex_ held: the general lists only (a private pool's blocks stay until release_pool).
  void release_cached() {
    for (auto& [size, list] : free_) {
      // Unlink the blocks first: if a release throws, none is left to be freed twice.
      std::vector<void*> blocks;
      blocks.swap(list);
      stats_.cached_bytes -= size * blocks.size();
      for (void* ptr : blocks) System::release(ptr);
    }
  }

  struct Pool {
    std::unordered_map<size_t, std::vector<void*>> free;  // rounded size -> the pool's free blocks
  };

  const char* what_;
  std::mutex mutex_;
  std::unordered_map<size_t, std::vector<void*>> free_;  // rounded size -> free blocks
  std::unordered_map<PoolId, Pool> pools_;
  struct Owned {
    PoolId pool;
    size_t size;  // rounded
  };
  std::unordered_map<void*, Owned> owner_;  // every block that belongs to a pool
  PoolId capturing_ = 0, next_pool_ = 1;
  MemoryStats stats_;
};

}  // namespace ag
