// The CUDA context (cuda/context.h): the stream, the cuBLAS handle bound to it,
// and the caching allocator. Each is created on first use and never destroyed:
// tensors released during static destruction still find the allocator, and
// nothing calls into the CUDA runtime after it has shut down (the driver frees
// the process's memory at exit).
#include <array>
#include <atomic>
#include <cstdlib>
#include <cstring>
#include <mutex>
#include <vector>

#include "cuda/check.h"
#include "cuda/context.h"
#include "cuda/cublas.h"

namespace ag::cuda {

bool available() {
  int count = 0;
  return cudaGetDeviceCount(&count) == cudaSuccess && count > 0;
}

std::string describe_device() {
  int count = 0;
  const cudaError_t status = cudaGetDeviceCount(&count);
  // Without a GPU there is no driver, and the runtime calls that "insufficient":
  // say what the user needs to know instead. A driver that is there but too old
  // for this runtime gets its own message.
  int driver = 0, runtime = 0;
  cudaDriverGetVersion(&driver);
  cudaRuntimeGetVersion(&runtime);
  auto version = [](int v) { return std::to_string(v / 1000) + "." + std::to_string(v % 1000 / 10); };
  if (driver == 0 || status == cudaErrorNoDevice || (status == cudaSuccess && count == 0))
    return "no CUDA device found (no NVIDIA GPU or driver on this machine)";
  if (status == cudaErrorInsufficientDriver)
    return "no usable CUDA device: the NVIDIA driver supports CUDA " + version(driver) +
           ", older than the CUDA " + version(runtime) + " attograd was built with; update the driver";
  if (status != cudaSuccess) return std::string("no usable CUDA device: ") + cudaGetErrorString(status);
  cudaDeviceProp prop{};
  AG_CUDA_CHECK(cudaGetDeviceProperties(&prop, 0));
  return std::string(prop.name) + " (sm_" + std::to_string(prop.major) + std::to_string(prop.minor) +
         ", " + std::to_string(prop.totalGlobalMem >> 30) + " GiB)";
}

// --- the caching allocator (core/caching_allocator.h) -------------------------------
//
// Reuse is safe because all work runs on one stream: kernels still reading a
// freed block were queued before the free, and its next owner's kernels are
// queued after them, so they run after them.
namespace {
struct DeviceMemory {
  static void* allocate(size_t bytes) {
    void* ptr = nullptr;
    const cudaError_t status = cudaMalloc(&ptr, bytes);
    if (status == cudaSuccess) return ptr;
    cudaGetLastError();  // clear it, or the next launch check would report it
    if (status == cudaErrorMemoryAllocation) return nullptr;  // the allocator frees its cache and retries
    AG_CHECK(available(), "a CUDA tensor needs a device: " << describe_device());
    throw_cuda_error("cudaMalloc", __FILE__, __LINE__,
                     std::string(cudaGetErrorString(status)) + " allocating " + std::to_string(bytes) + " bytes");
  }
  // cudaFree waits for queued work, so no kernel still reads the block.
  static void release(void* ptr) { AG_CUDA_CHECK(cudaFree(ptr)); }
  // The host's AddressSanitizer cannot see device memory (core/tensor.cpp poisons the host's blocks).
  static void lend(void*, size_t, size_t) {}
  static void take_back(void*, size_t) {}
};

CachingAllocator<DeviceMemory>& allocator() {
  static auto* instance = new CachingAllocator<DeviceMemory>("cudaMalloc");  // never destroyed (see the top)
  return *instance;
}
}  // namespace

void* allocate(size_t nbytes) { return allocator().allocate(nbytes); }
void deallocate(void* ptr, size_t nbytes) { allocator().deallocate(ptr, nbytes); }
MemoryStats memory_stats() { return allocator().stats(); }
void empty_cache() { allocator().empty_cache(); }
uint64_t begin_graph_pool() { return allocator().begin_pool(); }
void end_graph_pool() { allocator().end_pool(); }
void release_graph_pool(uint64_t pool) { allocator().release_pool(pool); }

// --- the stream and cuBLAS ----------------------------------------------------------

namespace {
Precision gemm_mode = Precision::FP32;

// The handle's math mode decides TF32 for the float32 GEMMs; bf16 GEMMs name their types in each call.
cublasMath_t math_mode() { return gemm_mode == Precision::TF32 ? CUBLAS_TF32_TENSOR_OP_MATH : CUBLAS_DEFAULT_MATH; }

// cuBLAS's workspace, set on the handle: without one cuBLAS allocates its own
// on first use of a GEMM shape, which a CUDA graph's capture cannot do (cuda/graph.h).
// 32 MiB, what cuBLAS itself takes on Hopper (and PyTorch's default there).
constexpr size_t kCublasWorkspaceBytes = size_t{32} << 20;

struct Context {
  // A created stream, not the legacy default one (which a CUDA graph cannot
  // capture); blocking (cudaStreamCreate's default): work queued on the legacy
  // default stream, if any ever is, still runs in order with ours.
  cudaStream_t stream = nullptr;
  cublasHandle_t blas = nullptr;
  void* blas_workspace = nullptr;  // never freed, as the handle
};

bool context_made = false;  // the handle exists: a mode set later must reach it

Context& context() {
  static Context* instance = [] {
    auto* c = new Context;
    AG_CUDA_CHECK(cudaStreamCreate(&c->stream));
    AG_CUBLAS_CHECK(cublas().create(&c->blas));
    AG_CUBLAS_CHECK(cublas().set_stream(c->blas, c->stream));
    // After set_stream, which puts the handle back on cuBLAS's own workspace pool.
    AG_CUDA_CHECK(cudaMalloc(&c->blas_workspace, kCublasWorkspaceBytes));
    AG_CUBLAS_CHECK(cublas().set_workspace(c->blas, c->blas_workspace, kCublasWorkspaceBytes));
    AG_CUBLAS_CHECK(cublas().set_math_mode(c->blas, math_mode()));
    context_made = true;
    return c;
  }();
  return *instance;
}
}  // namespace

void* stream() { return context().stream; }
void* cublas_handle() { return context().blas; }

void set_gemm_precision(Precision precision) {
  gemm_mode = precision;
  // Until the handle exists the mode is only stored, and the handle takes it when created: setting it
  // opens no cuBLAS (a CPU run on a machine with a GPU sets it too, through its optim::PrecisionScope).
  if (context_made) AG_CUBLAS_CHECK(cublas().set_math_mode(context().blas, math_mode()));
}
Precision gemm_precision() { return gemm_mode; }
void set_allow_tf32(bool allow) { set_gemm_precision(allow ? Precision::TF32 : Precision::FP32); }
bool allow_tf32() { return gemm_mode == Precision::TF32; }

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
  // A check already pending reads the same result (a replayed graph writes it again at each replay;
  // a check's own buffer cannot be reused while it is pending): one read at the synchronisation, not
  // one per replay since the last.
  for (const PendingIndexCheck& queued : pending().checks)
    if (queued.first_bad == check.first_bad) return;
  pending().checks.push_back(std::move(check));
}

std::vector<PendingIndexCheck> pending_index_checks() {
  std::lock_guard<std::mutex> lock(pending().mutex);
  return pending().checks;
}

void keep_pending_index_checks(size_t count) {
  std::lock_guard<std::mutex> lock(pending().mutex);
  if (pending().checks.size() > count) pending().checks.resize(count);
}

namespace {
std::atomic<int64_t> waits{0};
void wait_for_stream() {
  ++waits;
  AG_CUDA_CHECK(cudaStreamSynchronize(context().stream));
}
}  // namespace

int64_t synchronizations() { return waits; }

bool sync_after_launch() {
  static const bool on = std::getenv("AG_CUDA_SYNC") != nullptr;
  return on;
}

void wait_for_queue() { wait_for_stream(); }

void synchronize() {
  wait_for_stream();
  raise_pending_index_errors();
}

// --- uploads -----------------------------------------------------------------------
//
// A copy from pageable host memory may return before the driver has read the
// host buffer, so such a copy has to wait for the stream, and with it for all the
// work queued before (a training step's batches would wait for the step before).
// An upload of up to kStagingBytes goes through a pinned staging buffer instead:
// the host copies the bytes into it, queues the device's copy from it and records
// an event after that copy, and does not wait. The buffers are a ring, and one is
// written again only once its event has passed (the host waits then, and counts
// it, if it has run kStagingBuffers uploads ahead of the device). Not while the
// stream is being captured: the graph would copy from the buffer as it is at each
// replay. There, for larger uploads, and if pinned memory cannot be had, the copy
// waits as before (which also fails a capture: cuda/graph.h, the step runs eagerly).
namespace {
constexpr size_t kStagingBuffers = 16, kStagingBytes = size_t{1} << 20;
struct Staging {
  void* host = nullptr;            // pinned (cudaMallocHost), kStagingBytes; never freed, as the context
  cudaEvent_t copied = nullptr;    // recorded after the last copy out of it
  bool queued = false;             // a copy out of it was queued
};
std::mutex staging_mutex;
std::array<Staging, kStagingBuffers> staging;
size_t next_staging = 0;

bool capturing(cudaStream_t s) {
  cudaStreamCaptureStatus status = cudaStreamCaptureStatusNone;
  AG_CUDA_CHECK(cudaStreamIsCapturing(s, &status));
  return status != cudaStreamCaptureStatusNone;
}

bool no_pinned_memory = false;  // cudaMallocHost failed once: uploads wait, as without staging

// The next buffer of the ring, free to be written; null without pinned memory.
Staging* free_staging_buffer() {
  if (no_pinned_memory) return nullptr;
  Staging& b = staging[next_staging % kStagingBuffers];
  if (!b.host) {
    if (cudaMallocHost(&b.host, kStagingBytes) != cudaSuccess) {
      cudaGetLastError();  // not sticky: clear it, or the next launch check would report it
      b.host = nullptr;
      no_pinned_memory = true;
      return nullptr;
    }
    AG_CUDA_CHECK(cudaEventCreateWithFlags(&b.copied, cudaEventDisableTiming));
  } else if (b.queued) {
    const cudaError_t status = cudaEventQuery(b.copied);
    if (status == cudaErrorNotReady) {
      cudaGetLastError();  // "not ready" is no error: clear it, or the next launch check would report it
      ++waits;
      AG_CUDA_CHECK(cudaEventSynchronize(b.copied));
    } else {
      AG_CUDA_CHECK(status);
    }
  }
  ++next_staging;
  return &b;
}
}  // namespace

void copy_host_to_device(void* dst, const void* src, size_t nbytes) {
  if (nbytes == 0) return;
  const cudaStream_t s = context().stream;
  if (nbytes <= kStagingBytes && !capturing(s)) {
    const std::lock_guard<std::mutex> lock(staging_mutex);
    if (Staging* b = free_staging_buffer()) {
      std::memcpy(b->host, src, nbytes);
      AG_CUDA_CHECK(cudaMemcpyAsync(dst, b->host, nbytes, cudaMemcpyHostToDevice, s));
      AG_CUDA_CHECK(cudaEventRecord(b->copied, s));
      b->queued = true;
      return;
    }
  }
  AG_CUDA_CHECK(cudaMemcpyAsync(dst, src, nbytes, cudaMemcpyHostToDevice, s));
  wait_for_stream();  // the host buffer is free again
}

void copy_device_to_host(void* dst, const void* src, size_t nbytes) {
  if (nbytes == 0) return;
  AG_CUDA_CHECK(cudaMemcpyAsync(dst, src, nbytes, cudaMemcpyDeviceToHost, context().stream));
  synchronize();
}

}  // namespace ag::cuda
