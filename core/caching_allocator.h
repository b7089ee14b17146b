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
//   - Blocks are not poisoned or cleared: a new tensor's contents are undefined,
//     as they were with malloc.
//
// System supplies the memory:
//   static void* allocate(size_t bytes);  // nullptr when out of memory
//   static void release(void* ptr);
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
  size_t cached_bytes = 0;    // freed blocks kept for reuse
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

  void* allocate(size_t nbytes) {
    const size_t size = round_up(nbytes);
    std::lock_guard<std::mutex> lock(mutex_);
    std::vector<void*>& list = free_[size];
    void* ptr = nullptr;
    if (!list.empty()) {
      ptr = list.back();
      list.pop_back();
      stats_.cached_bytes -= size;
    } else {
      ptr = system_allocate(size);
    }
    stats_.in_use_bytes += size;
    return ptr;
  }

  // nbytes: what allocate() was given for this block.
  void deallocate(void* ptr, size_t nbytes) {
    if (!ptr) return;
    const size_t size = round_up(nbytes);
    std::lock_guard<std::mutex> lock(mutex_);
    free_[size].push_back(ptr);
    stats_.in_use_bytes -= size;
    stats_.cached_bytes += size;
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

  // With mutex_ held.
  void* system_allocate(size_t size) {
    void* ptr = System::allocate(size);
    if (!ptr) {
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

  // With mutex_ held.
  void release_cached() {
    for (auto& [size, list] : free_) {
      // Unlink the blocks first: if a release throws, none is left to be freed twice.
      std::vector<void*> blocks;
      blocks.swap(list);
      stats_.cached_bytes -= size * blocks.size();
      for (void* ptr : blocks) System::release(ptr);
    }
  }

  const char* what_;
  std::mutex mutex_;
  std::unordered_map<size_t, std::vector<void*>> free_;  // rounded size -> free blocks
  MemoryStats stats_;
};

}  // namespace ag
