// cuda/context.h and cuda/cuda.h for builds without CUDA: no device, and a clear
// error for anything that needs one. The kernels are only reachable through the
// dispatcher with a CUDA tensor, which cannot exist in such a build, so their
// error is a backstop.
#include "core/error.h"
#include "cuda/context.h"
#include "cuda/cuda.h"
#include "cuda/graph.h"

namespace ag::cuda {

std::string describe_device() {
  return "no CUDA device found: attograd was built without CUDA (nvcc was not found at configure time, or -DATTOGRAD_WITH_CUDA=OFF)";
}

namespace {
[[noreturn]] void built_without_cuda(const char* what) { throw Error(std::string("cuda::") + what + ": " + describe_device()); }
Precision gemm_mode = Precision::FP32;
template <typename... Args>
void unused(const Args&...) {}
}  // namespace

// The body of every function below that needs a device.
#define AG_WITHOUT_CUDA { built_without_cuda(__func__); }

// --- context ---------------------------------------------------------------------------
bool available() { return false; }
void* allocate(size_t) AG_WITHOUT_CUDA
void deallocate(void*, size_t) {}
MemoryStats memory_stats() { return {}; }
int64_t synchronizations() { return 0; }
bool sync_after_launch() { return false; }  // no launches
void empty_cache() {}
uint64_t begin_graph_pool() AG_WITHOUT_CUDA
void end_graph_pool() {}
void release_graph_pool(uint64_t) {}
std::vector<PendingIndexCheck> pending_index_checks() { return {}; }
void keep_pending_index_checks(size_t) {}
void copy_host_to_device(void*, const void*, size_t) AG_WITHOUT_CUDA
void copy_device_to_host(void*, const void*, size_t) AG_WITHOUT_CUDA
void synchronize() AG_WITHOUT_CUDA
void wait_for_queue() AG_WITHOUT_CUDA
void* stream() AG_WITHOUT_CUDA
void* cublas_handle() AG_WITHOUT_CUDA
bool cublas_loaded() { return false; }
void set_allow_tf32(bool allow) { gemm_mode = allow ? Precision::TF32 : Precision::FP32; }
bool allow_tf32() { return gemm_mode == Precision::TF32; }
void set_gemm_precision(Precision precision) { gemm_mode = precision; }
Precision gemm_precision() { return gemm_mode; }
int64_t epilogue_products() { return 0; }

// --- graphs (cuda/graph.h) -------------------------------------------------------------
int64_t live_graphs() { return 0; }
bool capturing_graph() { return false; }
StepGraph::~StepGraph() = default;
std::string StepGraph::capture(const std::function<void()>&) { return describe_device(); }
void StepGraph::replay() AG_WITHOUT_CUDA
void StepGraph::reset() {  // nothing was captured: the fields keep their empty values
  exec_ = graph_ = nullptr;
  pool_ = 0;
  replays_ = 0;
  checks_.clear();
}

// --- kernels (cuda/cuda.h): one stub per core/kernels.inc entry -------------------------
// The entries name their parameters; a stub hands them to `unused` (for -Wunused-parameter).
#define AG_KERNEL(family, name, params, args) \
  void name params {                          \
    unused args;                              \
    built_without_cuda(#name);                \
  }
#include "core/kernels.inc"

}  // namespace ag::cuda
