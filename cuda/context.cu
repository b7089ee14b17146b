// The CUDA context (cuda/context.h): the stream, the cuBLAS handle bound to it,
// and the caching allocator. Each is created on first use and never destroyed:
// tensors released during static destruction still find the allocator, and
// nothing calls into the CUDA runtime after it has shut down (the driver frees
// the process's memory at exit).
#include <algorithm>
#include <atomic>
#include <mutex>
#include <unordered_map>
#include <vector>

#include "cuda/check.h"
#include "cuda/context.h"

namespace ag::cuda {

bool available() {
  int count = 0;
  return cudaGetDeviceCount(&count) == cudaSuccess && count > 0;
}

std::string describe_device() {
  int count = 0;
  const cudaError_t status = cudaGetDeviceCount(&count);
  if (status != cudaSuccess) return std::string("no CUDA device: ") + cudaGetErrorString(status);
  if (count == 0) return "no CUDA device";
  cudaDeviceProp prop{};
  AG_CUDA_CHECK(cudaGetDeviceProperties(&prop, 0));
  return std::string(prop.name) + " (sm_" + std::to_string(prop.major) + std::to_string(prop.minor) +
         ", " + std::to_string(prop.totalGlobalMem >> 30) + " GiB)";
}

// --- the caching allocator ---------------------------------------------------------
//
// cudaMalloc and cudaFree are slow (cudaFree synchronizes the whole device), and
// a training step allocates and frees the same few hundred sizes every step. So
// a freed block is not returned to the driver: it goes on a free list for its
// size, and the next request of that size takes it back.
//
//   - Sizes are rounded up to a multiple of 512 bytes; each rounded size has its
//     own free list, and a block only ever serves requests of its rounded size
//     (no splitting or merging). After the first step of a loop whose shapes
//     repeat, every request is served from a list: device_mallocs stays flat.
//   - Reuse is safe because all work runs on one stream: kernels still reading
//     a freed block were queued before the free, and its next owner's kernels
//     are queued after them, so they run after them.
//   - When cudaMalloc runs out of memory, the cached blocks are freed and the
//     call is retried once. empty_cache() does the same on demand (after a
//     change of shapes has left many blocks of sizes no longer used).
//   - A mutex guards the lists: tensors may be freed on any thread.
class CachingAllocator {
 public:
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
      ptr = device_malloc(size);
    }
    stats_.in_use_bytes += size;
    return ptr;
  }

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
  void* device_malloc(size_t size) {
    void* ptr = nullptr;
    cudaError_t status = cudaMalloc(&ptr, size);
    if (status == cudaErrorMemoryAllocation) {
      cudaGetLastError();  // clear it, or the next launch check would report it
      release_cached();
      status = cudaMalloc(&ptr, size);
    }
    if (status != cudaSuccess) {
      cudaGetLastError();
      throw_cuda_error("cudaMalloc", __FILE__, __LINE__,
                       std::string(cudaGetErrorString(status)) + " allocating " + std::to_string(size) +
                           " bytes (" + std::to_string(stats_.in_use_bytes) + " in use, " +
                           std::to_string(stats_.cached_bytes) + " cached)");
    }
    ++stats_.device_mallocs;
    return ptr;
  }

  // With mutex_ held. cudaFree waits for queued work, so no kernel still reads these.
  void release_cached() {
    for (auto& [size, list] : free_) {
      // Unlink the blocks first: if a cudaFree throws, none is left to be freed twice.
      std::vector<void*> blocks;
      blocks.swap(list);
      stats_.cached_bytes -= size * blocks.size();
      for (void* ptr : blocks) AG_CUDA_CHECK(cudaFree(ptr));
    }
  }

  std::mutex mutex_;
  std::unordered_map<size_t, std::vector<void*>> free_;  // rounded size -> free blocks
  MemoryStats stats_;
};

CachingAllocator& allocator() {
  static CachingAllocator* instance = new CachingAllocator;  // never destroyed (see the top)
  return *instance;
}

void* allocate(size_t nbytes) { return allocator().allocate(nbytes); }
void deallocate(void* ptr, size_t nbytes) { allocator().deallocate(ptr, nbytes); }
MemoryStats memory_stats() { return allocator().stats(); }
void empty_cache() { allocator().empty_cache(); }

// --- the stream and cuBLAS ----------------------------------------------------------

namespace {
bool tf32_allowed = false;

cublasMath_t math_mode() { return tf32_allowed ? CUBLAS_TF32_TENSOR_OP_MATH : CUBLAS_DEFAULT_MATH; }

struct Context {
  // A blocking stream (cudaStreamCreate's default): work queued on the legacy
  // default stream, if any ever is, still runs in order with ours.
  cudaStream_t stream = nullptr;
  cublasHandle_t blas = nullptr;
};

Context& context() {
  static Context* instance = [] {
    auto* c = new Context;
    AG_CUDA_CHECK(cudaStreamCreate(&c->stream));
    AG_CUBLAS_CHECK(cublasCreate(&c->blas));
    AG_CUBLAS_CHECK(cublasSetStream(c->blas, c->stream));
    AG_CUBLAS_CHECK(cublasSetMathMode(c->blas, math_mode()));
    return c;
  }();
  return *instance;
}
}  // namespace

void* stream() { return context().stream; }
void* cublas_handle() { return context().blas; }

void set_allow_tf32(bool allow) {
  tf32_allowed = allow;
  // Without a device the flag is only stored; the handle takes it when created.
  if (available()) AG_CUBLAS_CHECK(cublasSetMathMode(context().blas, math_mode()));
}
bool allow_tf32() { return tf32_allowed; }

// --- deferred errors ------------------------------------------------------------------

namespace {
struct PendingChecks {
  std::mutex mutex;
  std::vector<PendingIndexCheck> checks;
};
PendingChecks& pending() {
  static auto* instance = new PendingChecks;  // never destroyed, as the allocator
  return *instance;
}

// After a synchronisation: the first failed check's message, if any; all are dropped.
void raise_pending_index_errors() {
  std::vector<PendingIndexCheck> checks;
  {
    std::lock_guard<std::mutex> lock(pending().mutex);
    checks.swap(pending().checks);
  }
  for (const PendingIndexCheck& check : checks) {
    unsigned long long position = 0;
    AG_CUDA_CHECK(cudaMemcpy(&position, check.first_bad, sizeof position, cudaMemcpyDeviceToHost));
    if (position == ~0ull) continue;
    int64_t value = 0;
    AG_CUDA_CHECK(cudaMemcpy(&value, static_cast<const int64_t*>(check.indices) + position, sizeof value,
                             cudaMemcpyDeviceToHost));
    throw Error(check.describe(static_cast<int64_t>(position), value));
  }
}
}  // namespace

void defer_index_error(PendingIndexCheck check) {
  std::lock_guard<std::mutex> lock(pending().mutex);
  pending().checks.push_back(std::move(check));
}

namespace {
std::atomic<int64_t> waits{0};
void wait_for_stream() {
  ++waits;
  AG_CUDA_CHECK(cudaStreamSynchronize(context().stream));
}
}  // namespace

int64_t synchronizations() { return waits; }

void synchronize() {
  wait_for_stream();
  raise_pending_index_errors();
}

// Asynchronous copies from pageable host memory may return before the host
// buffer has been read, so both directions wait for the copy.
void copy_host_to_device(void* dst, const void* src, size_t nbytes) {
  if (nbytes == 0) return;
  AG_CUDA_CHECK(cudaMemcpyAsync(dst, src, nbytes, cudaMemcpyHostToDevice, context().stream));
  wait_for_stream();  // the host buffer is free again
}

void copy_device_to_host(void* dst, const void* src, size_t nbytes) {
  if (nbytes == 0) return;
  AG_CUDA_CHECK(cudaMemcpyAsync(dst, src, nbytes, cudaMemcpyDeviceToHost, context().stream));
  synchronize();
}

}  // namespace ag::cuda
