// The CUDA context: the one place that owns the device's stream, its memory
// (a caching allocator) and the cuBLAS handle. Built from cuda/context.cu when
// nvcc is found, otherwise from cuda/disabled.cpp, whose functions report "no
// device" or throw a clear "built without CUDA" error, so callers never need
// #ifdefs. Everything runs on one device (0, or in a data-parallel run the GPU
// dist/nccl.cpp binds the process to), on one stream, in queue order.
#pragma once
#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "core/caching_allocator.h"
#include "core/precision.h"

namespace ag::cuda {

using ag::MemoryStats;

// True when the build has CUDA and a usable device is present. Anything but a
// successful cudaGetDeviceCount with n > 0 counts as "no device" (without a
// driver it returns error 35 and leaves n unset).
bool available();
// "NVIDIA H200 (sm_90, 139 GiB)", or why there is none.
std::string describe_device();

// --- memory: the caching allocator (core/caching_allocator.h explains it) -------
// deallocate must get the nbytes that allocate was given.
void* allocate(size_t nbytes);
void deallocate(void* ptr, size_t nbytes);
MemoryStats memory_stats();  // system_allocs counts cudaMalloc calls
void empty_cache();  // returns every cached block to the driver (a CUDA graph's pool stays)
// A CUDA graph's private pool (core/caching_allocator.h; cuda/graph.h): every
// allocation and free goes to it from begin_graph_pool() to end_graph_pool(),
// and its blocks serve nothing else until release_graph_pool().
uint64_t begin_graph_pool();
void end_graph_pool();
void release_graph_pool(uint64_t pool);

// Both copies are ordered after the work already queued; device-to-host waits
// for it (the host reads the result). Host-to-device returns without waiting when
// the bytes fit a pinned staging buffer (up to 1 MiB: a step's batches) and the
// stream is not being captured; else it waits for the copy (cuda/context.cu).
void copy_host_to_device(void* dst, const void* src, size_t nbytes);
void copy_device_to_host(void* dst, const void* src, size_t nbytes);
void synchronize();  // waits for all queued work, then raises any deferred error
// Waits for all queued work and leaves deferred errors to the next synchronize()
// (the kernel profiler times each call this way without swallowing its errors).
void wait_for_queue();
// How many times the host has waited for the device so far (synchronize, the
// copies that wait, and a staging buffer still being read): what a training
// step's cost in round trips is measured by.
int64_t synchronizations();
// AG_CUDA_SYNC set in the environment (read once): every kernel launch waits for
// the device, so a fault is reported at its own launch (cuda/launch.cuh); a
// training step then runs eagerly (a capture cannot wait: optim/train_step.h).
bool sync_after_launch();

// --- deferred errors ---------------------------------------------------------------
// Index checks (cross_entropy's targets, embedding's indices) run on the device
// without the host waiting for them: each queues a PendingIndexCheck, and the
// next synchronisation (synchronize(), or a copy to the host, which waits anyway)
// reads the checks' results and throws ag::Error with the first one's message —
// the CPU kernel's message, one synchronisation later. So a training step that
// reads its loss every few iterations never stalls on a check.
using IndexErrorMessage = std::function<std::string(int64_t position, int64_t value)>;
struct PendingIndexCheck {
  const void* first_bad;  // device int64: the first bad position, or all ones for none
  const void* indices;    // device int64 [n]: where the bad value is read from
  IndexErrorMessage describe;
  std::vector<std::shared_ptr<void>> keep_alive;  // the storages of the two above
};
void defer_index_error(PendingIndexCheck check);  // a no-op while a check of the same first_bad is pending
// The checks deferred and not yet read, oldest first (a CUDA graph keeps the ones
// its capture deferred, and defers them again after each replay: cuda/graph.h).
std::vector<PendingIndexCheck> pending_index_checks();
// Drops the deferred checks after the first `count` (a failed capture's: what they
// would read was never written).
void keep_pending_index_checks(size_t count);

// --- the stream and cuBLAS ---------------------------------------------------------
// The cudaStream_t every kernel, copy and cuBLAS call is queued on.
void* stream();
// The process's cuBLAS handle (a cublasHandle_t), bound to stream(), created on first use.
void* cublas_handle();
// Whether this process has opened the cuBLAS library: only the first use of a
// device does (cuda/cublas.h says why), so a CPU-only run never holds its ~200 MB.
bool cublas_loaded();

// TF32 tensor cores for float32 GEMMs: about 8x the FFMA rate on Hopper but a
// 10-bit mantissa in the products (relative error ~1e-3 instead of ~1e-7).
// Off by default, so CUDA float32 matches the CPU to 1e-5; turn it on for
// speed when that precision is not needed. Float64 GEMMs are unaffected.
// The same switch as set_gemm_precision(allow ? TF32 : FP32); allow_tf32() is gemm_precision() == TF32.
void set_allow_tf32(bool allow);
bool allow_tf32();

// The float32 GEMMs' arithmetic, read at the one GEMM entry (cuda/matmul.cu):
//   FP32  float32 FFMA (the default: CUDA matches the CPU to ~1e-6 relative)
//   TF32  TF32 tensor cores: inputs rounded to an 11-bit significand, float32 accumulation
//   BF16  A and B rounded to bfloat16 (8-bit significand, round to nearest even) in a
//         scratch copy, then cublasGemmStridedBatchedEx with bf16 inputs,
//         CUBLAS_COMPUTE_32F accumulation and a float32 C: each product of two
//         bf16 numbers is exact in float32, so rounding enters at the inputs and
//         the sums only (the bound: docs/backprop.md, "Mixed precision").
// A training run sets it from --precision for its lifetime (optim::PrecisionScope).
// Float64 GEMMs are unaffected; so is every other kernel (softmax, LayerNorm,
// the loss, reductions stay float32).
void set_gemm_precision(Precision precision);
Precision gemm_precision();

// How many products this process has run through cuBLASLt's fused epilogues
// (cuda/mlp.cu; the rest take its unfused kernels): for tests that must see the
// fused path run rather than its fallback. 0 without CUDA.
int64_t epilogue_products();

}  // namespace ag::cuda
