// cuda/context.h and cuda/cuda.h for builds without CUDA: no device, and a clear
// error for anything that needs one. The kernels are only reachable through the
// dispatcher with a CUDA tensor, which cannot exist in such a build, so their
// error is a backstop.
#include "core/error.h"
#include "cuda/context.h"
#include "cuda/cuda.h"

namespace ag::cuda {

std::string describe_device() {
  return "no CUDA device found: attograd was built without CUDA (nvcc was not found at configure time)";
}

namespace {
[[noreturn]] void built_without_cuda(const char* what) { throw Error(std::string("cuda::") + what + ": " + describe_device()); }
bool tf32_allowed = false;
}  // namespace

// The body of every function below that needs a device.
#define AG_WITHOUT_CUDA { built_without_cuda(__func__); }

// --- context ---------------------------------------------------------------------------
bool available() { return false; }
void* allocate(size_t) AG_WITHOUT_CUDA
void deallocate(void*, size_t) {}
MemoryStats memory_stats() { return {}; }
int64_t synchronizations() { return 0; }
void empty_cache() {}
void copy_host_to_device(void*, const void*, size_t) AG_WITHOUT_CUDA
void copy_device_to_host(void*, const void*, size_t) AG_WITHOUT_CUDA
void synchronize() AG_WITHOUT_CUDA
void wait_for_queue() AG_WITHOUT_CUDA
void* stream() AG_WITHOUT_CUDA
void* cublas_handle() AG_WITHOUT_CUDA
bool cublas_loaded() { return false; }
void set_allow_tf32(bool allow) { tf32_allowed = allow; }
bool allow_tf32() { return tf32_allowed; }

// --- kernels (cuda/cuda.h) ------------------------------------------------------------
void copy_strided(const Tensor&, const StridedView&, Tensor&, const StridedView&, const Shape&) AG_WITHOUT_CUDA
void fill(Tensor&, double) AG_WITHOUT_CUDA
void cast(const Tensor&, Tensor&) AG_WITHOUT_CUDA

void unary(UnaryOp, const Tensor&, Tensor&) AG_WITHOUT_CUDA
void unary_backward(UnaryOp, const Tensor&, const Tensor&, Tensor&) AG_WITHOUT_CUDA
void affine(const Tensor&, double, double, Tensor&) AG_WITHOUT_CUDA
void pow_scalar(const Tensor&, double, Tensor&) AG_WITHOUT_CUDA
void binary(BinaryOp, const Tensor&, const Tensor&, Tensor&) AG_WITHOUT_CUDA
void bias_activation(UnaryOp, const Tensor&, const Tensor&, Tensor&, Tensor*) AG_WITHOUT_CUDA
void bias_activation_backward(const Tensor&, const Tensor&, Tensor&, Tensor&) AG_WITHOUT_CUDA

void sum_to_shape(const Tensor&, Tensor&) AG_WITHOUT_CUDA
void max_dim(const Tensor&, const ReduceDims&, Tensor&, Tensor&) AG_WITHOUT_CUDA
void max_dim_backward(const Tensor&, const Tensor&, const ReduceDims&, Tensor&) AG_WITHOUT_CUDA

void gemm(const GemmShape&, const Tensor&, const Tensor&, Tensor&) AG_WITHOUT_CUDA

void softmax(const Tensor&, Tensor&) AG_WITHOUT_CUDA
void softmax_backward(const Tensor&, const Tensor&, Tensor&) AG_WITHOUT_CUDA
void log_softmax(const Tensor&, Tensor&) AG_WITHOUT_CUDA
void log_softmax_backward(const Tensor&, const Tensor&, Tensor&) AG_WITHOUT_CUDA
void cross_entropy(const Tensor&, const Tensor&, int64_t, Tensor&, Tensor&, Tensor&) AG_WITHOUT_CUDA
void cross_entropy_backward(const Tensor&, const Tensor&, const Tensor&, int64_t, const Tensor&, Tensor&) AG_WITHOUT_CUDA

void attention_softmax(const Tensor&, const AttentionMask&, Tensor&, Tensor&) AG_WITHOUT_CUDA
void attention_softmax_backward(const Tensor&, const Tensor&, Tensor&) AG_WITHOUT_CUDA
void flash_attention(const Tensor&, const Tensor&, const Tensor&, const AttentionShape&, Tensor&, Tensor&) AG_WITHOUT_CUDA
void flash_attention_backward(const Tensor&, const Tensor&, const Tensor&, const Tensor&, const Tensor&,
                              const AttentionShape&, Tensor&, Tensor&, Tensor&) AG_WITHOUT_CUDA

void attention_features(const Tensor&, const Tensor&, FeatureMap, Tensor&) AG_WITHOUT_CUDA
void attention_features_backward(const Tensor&, const Tensor&, FeatureMap, const Tensor&, const Tensor&,
                                 Tensor&) AG_WITHOUT_CUDA
void linear_attention_product(const Tensor&, const Tensor&, const Tensor&, const PrefixProduct&, Tensor&) AG_WITHOUT_CUDA

void layer_norm(const Tensor&, const Tensor&, const Tensor&, double, Tensor&, Tensor&, Tensor&) AG_WITHOUT_CUDA
void add_layer_norm(const Tensor&, const Tensor&, const Tensor&, const Tensor&, double, Tensor&, Tensor&, Tensor&,
                    Tensor&) AG_WITHOUT_CUDA
void layer_norm_backward(const Tensor&, const Tensor&, const Tensor&, const Tensor&, const Tensor&, Tensor&, Tensor&,
                         Tensor&) AG_WITHOUT_CUDA

void embedding(const Tensor&, const Tensor&, Tensor&) AG_WITHOUT_CUDA
void embedding_backward(const Tensor&, const Tensor&, Tensor&) AG_WITHOUT_CUDA

void dropout(const Tensor&, double, uint64_t, uint64_t, Tensor&) AG_WITHOUT_CUDA

void adam_step(Tensor&, const Tensor&, Tensor&, Tensor&, const kernel::AdamHyper&) AG_WITHOUT_CUDA
void sgd_step(Tensor&, const Tensor&, Tensor&, const kernel::SgdHyper&) AG_WITHOUT_CUDA
void sum_of_squares(const Tensor&, Tensor&) AG_WITHOUT_CUDA
void clip_by_norm(Tensor&, const Tensor&, double) AG_WITHOUT_CUDA

}  // namespace ag::cuda
