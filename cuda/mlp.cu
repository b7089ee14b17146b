// The MLP's products on CUDA (core/kernels.inc, "the MLP's products"; the op is
// core/ops/mlp.cpp, the reference core/cpu/mlp.cpp): cuBLASLt GEMMs whose
// epilogues do the elementwise work the unfused kernels would do in a pass of
// their own over an [N, F] product (F = 4C):
//   mlp_fc          G = gelu(X W_fc + b_fc), U = X W_fc + b_fc kept    GELU_AUX_BIAS (GELU_BIAS without a backward)
//   mlp_dgelu       dU = (dY W_projᵀ) ∘ gelu'(U), db_fc = Σ_rows dU     DGELU_BGRAD (U read back from the aux)
//   gemm_bias_grad  dW = Gᵀ dY, db = Σ_rows dY                          BGRADA
// cuBLASLt's GELU is the tanh approximation, 0.5·x·(1 + tanh(√(2/π)(x + 0.044715x³))),
// so the GELU epilogues serve GeluApprox::Tanh only, and only under TF32 and BF16:
// cuBLASLt does not say how it evaluates tanh (the hardware's tanh.approx.f32 is
// off by up to 2^-11, the GELU kernels here by 2^-21), which those precisions'
// rounded inputs (2^-10, 2^-8) swamp and FP32's promise (within 1e-5 of the CPU, as
// every op: tests/test_mlp.cpp) would not survive. The exact GELU (erf, the default),
// and the tanh GELU under FP32, take cuda::gemm and then bias_activation /
// bias_activation_backward, the kernels the unfused ops ran; their weight products
// still take BGRADA. So does float64, and any product cuBLASLt
// declines (no algorithm for that shape, alignment or precision; or no
// libcublasLt at all, cuda/cublas.h): each unsupported configuration is found
// once, remembered, and then goes straight to the unfused kernels, silently.
//
// Row-major to column-major as in cuda/matmul.cu: a row-major [R, C] matrix is
// the column-major [C, R] one, so each row-major product C = A·B is given to
// cuBLASLt as Cᵀ = Bᵀ·Aᵀ, and an epilogue's per-row vector of D (the bias, the
// bias gradient) runs along our columns: one entry per output feature.
//
// Precision (cuda/context.h, gemm_precision) as cuda::gemm: FP32 computes in
// CUBLAS_COMPUTE_32F, TF32 in CUBLAS_COMPUTE_32F_FAST_TF32, BF16 multiplies bf16
// copies of A and B (rounded to nearest even, as cuda/matmul.cu's) with float32
// accumulation, and the epilogue works on the float32 accumulator: bias, GELU,
// GELU' and U in float32, D in float32. BGRADA sums cuBLASLt's A operand, which
// under BF16 would be the rounded copy: there the bias gradient is summed from
// float32 dY by sum_to_shape instead (reductions stay float32: docs/backprop.md,
// "Mixed precision").
//
// cuBLASLt gets a workspace of its own, 32 MiB (cuBLAS's advice for Hopper; some
// plans split K or reduce a bias gradient across thread blocks there), allocated
// at the first product and kept: every call, and a CUDA graph that captured one,
// sees the same buffer, and on the one stream they run one after another.
#include <cuda_bf16.h>

#include <array>
#include <atomic>
#include <map>
#include <mutex>
#include <optional>

#include "cuda/bf16.cuh"
#include "cuda/cublas.h"
#include "cuda/cuda.h"
#include "cuda/launch.cuh"

namespace ag::cuda {

// Named, not anonymous: the unity build makes every .cu one translation unit.
namespace mlp_epilogue {

// One cuBLASLt product in its own, column-major, terms:
//   D [m, n] = epilogue(alpha · op(A) [m, k] · op(B) [k, n] + beta · D)
// A stored [m, k] column-major with leading dim lda ([k, m] when trans_a), B
// likewise. bias: the bias [m] the epilogue adds (GELU_BIAS, GELU_AUX_BIAS), or
// where it writes a bias gradient [m] (DGELU_BGRAD: Σ over n of D; BGRADA: Σ
// over k of A). aux: U [m, n], leading dim ld_aux, written by GELU_AUX_BIAS,
// read by DGELU_BGRAD.
struct Product {
  cublasLtEpilogue_t epilogue = CUBLASLT_EPILOGUE_DEFAULT;
  int64_t m = 0, n = 0, k = 0;
  const float* a = nullptr;
  int64_t lda = 0;
  bool trans_a = false;
  const float* b = nullptr;
  int64_t ldb = 0;
  bool trans_b = false;
  float* d = nullptr;
  int64_t ldd = 0;
  float alpha = 1, beta = 0;
  void* bias = nullptr;
  void* aux = nullptr;
  int64_t ld_aux = 0;
};

// The largest power of two, up to 256, that divides the address: what cuBLASLt's
// plan may assume of each pointer (its default assumption is 256).
int64_t alignment(const void* p) {
  const auto address = reinterpret_cast<uintptr_t>(p);
  return address == 0 ? 256 : std::min<int64_t>(256, static_cast<int64_t>(address & (~address + 1)));
}

constexpr uint64_t kWorkspaceBytes = uint64_t{32} << 20;
void* workspace() {
  static void* const buffer = allocate(kWorkspaceBytes);  // never freed: lives as long as the process's plans
  return buffer;
}

// The descriptors of one call, destroyed with it.
struct Descriptors {
  const CublasLtLibrary& lt;
  cublasLtMatmulDesc_t desc = nullptr;
  cublasLtMatrixLayout_t a = nullptr, b = nullptr, d = nullptr;
  cublasLtMatmulPreference_t preference = nullptr;
  ~Descriptors() {
    if (preference) lt.preference_destroy(preference);
    if (d) lt.layout_destroy(d);
    if (b) lt.layout_destroy(b);
    if (a) lt.layout_destroy(a);
    if (desc) lt.desc_destroy(desc);
  }
  template <class V> void set(cublasLtMatmulDescAttributes_t attribute, const V& value) {
    AG_CUBLAS_CHECK(lt.desc_set(desc, attribute, &value, sizeof value));
  }
  template <class V> void prefer(cublasLtMatmulPreferenceAttributes_t attribute, const V& value) {
    AG_CUBLAS_CHECK(lt.preference_set(preference, attribute, &value, sizeof value));
  }
};

// What a plan depends on: the epilogue, the precision, the sizes, the layouts and
// the pointers' alignments. Its algorithm, or none when cuBLASLt declined it.
using PlanKey = std::array<int64_t, 17>;
std::mutex plans_mutex;
std::map<PlanKey, std::optional<cublasLtMatmulAlgo_t>> plans;
std::atomic<int64_t> products_run{0};  // epilogue_products()

// Runs the product and returns true, or returns false (having launched nothing)
// when cuBLASLt is missing or declines this configuration; the caller then runs
// its unfused kernels.
bool run(const Product& p) {
  const CublasLtLibrary* lt = cublas_lt();
  if (lt == nullptr || p.m <= 0 || p.n <= 0 || p.k <= 0) return false;
  // The GELU input matrix's leading dim must be a multiple of 8 (cublasLt.h, EPILOGUE_AUX_LD);
  // the epilogue vectors are read in 16-byte pieces.
  if (p.aux && (p.ld_aux % 8 != 0 || alignment(p.aux) < 16)) return false;
  if (p.bias && alignment(p.bias) < 16) return false;
  const Precision precision = gemm_precision();
  const bool bf16 = precision == Precision::BF16;
  const int64_t a_rows = p.trans_a ? p.k : p.m, a_cols = p.trans_a ? p.m : p.k;
  const int64_t b_rows = p.trans_b ? p.n : p.k, b_cols = p.trans_b ? p.k : p.n;
  // bf16 copies of the column-major operands, gaps included so that lda and ldb carry over;
  // rounded only once the product is known to run.
  std::optional<Bf16Span> a16, b16;
  if (bf16) {
    a16.emplace(p.a, (a_cols - 1) * p.lda + a_rows);
    b16.emplace(p.b, (b_cols - 1) * p.ldb + b_rows);
  }
  const void* a = bf16 ? static_cast<const void*>(a16->data()) : p.a;
  const void* b = bf16 ? static_cast<const void*>(b16->data()) : p.b;

  Descriptors s{*lt};
  const cublasComputeType_t compute =
      precision == Precision::TF32 ? CUBLAS_COMPUTE_32F_FAST_TF32 : CUBLAS_COMPUTE_32F;
  AG_CUBLAS_CHECK(lt->desc_create(&s.desc, compute, CUDA_R_32F));
  s.set(CUBLASLT_MATMUL_DESC_TRANSA, static_cast<int32_t>(p.trans_a ? CUBLAS_OP_T : CUBLAS_OP_N));
  s.set(CUBLASLT_MATMUL_DESC_TRANSB, static_cast<int32_t>(p.trans_b ? CUBLAS_OP_T : CUBLAS_OP_N));
  s.set(CUBLASLT_MATMUL_DESC_EPILOGUE, static_cast<uint32_t>(p.epilogue));
  if (p.bias) {
    s.set(CUBLASLT_MATMUL_DESC_BIAS_POINTER, p.bias);
    s.set(CUBLASLT_MATMUL_DESC_BIAS_DATA_TYPE, static_cast<int32_t>(CUDA_R_32F));
  }
  if (p.aux) {
    s.set(CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_POINTER, p.aux);
    s.set(CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_LD, p.ld_aux);
    s.set(CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_DATA_TYPE, static_cast<int32_t>(CUDA_R_32F));
  }
  const cudaDataType input = bf16 ? CUDA_R_16BF : CUDA_R_32F;
  AG_CUBLAS_CHECK(lt->layout_create(&s.a, input, a_rows, a_cols, p.lda));
  AG_CUBLAS_CHECK(lt->layout_create(&s.b, input, b_rows, b_cols, p.ldb));
  AG_CUBLAS_CHECK(lt->layout_create(&s.d, CUDA_R_32F, p.m, p.n, p.ldd));

  const PlanKey key = {static_cast<int64_t>(p.epilogue), static_cast<int64_t>(precision), p.m, p.n, p.k, p.lda, p.ldb,
                       p.ldd, p.ld_aux, p.trans_a, p.trans_b, p.beta != 0, alignment(a), alignment(b),
                       alignment(p.d), p.bias ? alignment(p.bias) : 0, p.aux ? alignment(p.aux) : 0};
  std::optional<cublasLtMatmulAlgo_t> algo;
  {
    const std::lock_guard<std::mutex> lock(plans_mutex);
    if (auto found = plans.find(key); found != plans.end()) {
      algo = found->second;
    } else {
      AG_CUBLAS_CHECK(lt->preference_create(&s.preference));
      s.prefer(CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES, kWorkspaceBytes);
      s.prefer(CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_A_BYTES, static_cast<uint32_t>(alignment(a)));
      s.prefer(CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_B_BYTES, static_cast<uint32_t>(alignment(b)));
      s.prefer(CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_C_BYTES, static_cast<uint32_t>(alignment(p.d)));
      s.prefer(CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_D_BYTES, static_cast<uint32_t>(alignment(p.d)));
      cublasLtMatmulHeuristicResult_t result{};
      int found_count = 0;
      const cublasStatus_t status =
          lt->heuristic(lt->handle, s.desc, s.a, s.b, s.d, s.d, s.preference, 1, &result, &found_count);
      if (status == CUBLAS_STATUS_SUCCESS && found_count > 0 && result.state == CUBLAS_STATUS_SUCCESS)
        algo = result.algo;
      plans.emplace(key, algo);  // declined (any status: not supported, invalid value) is remembered too
    }
  }
  if (!algo) return false;

  if (bf16) {
    a16->round();
    b16->round();
  }
  // C = D: with beta = 1 the product adds onto D's contents (a gradient buffer).
  const cublasStatus_t status = lt->matmul(lt->handle, s.desc, &p.alpha, a, s.a, b, s.b, &p.beta, p.d, s.d, p.d, s.d,
                                           &*algo, workspace(), kWorkspaceBytes, current_stream());
  // Not supported, or an invalid value: what cublasLtMatmul returns for an aux or bias type its
  // kernels lack for these input and compute types (cublasLt.h, EPILOGUE_AUX_DATA_TYPE).
  if (status == CUBLAS_STATUS_NOT_SUPPORTED || status == CUBLAS_STATUS_INVALID_VALUE) {
    const std::lock_guard<std::mutex> lock(plans_mutex);
    plans[key] = std::nullopt;  // nothing was launched: the caller's kernels run instead, now and from now on
    return false;
  }
  AG_CUBLAS_CHECK(status);
  ++products_run;
  return true;
}

}  // namespace mlp_epilogue

int64_t epilogue_products() { return mlp_epilogue::products_run; }

// The row-major product C = alpha·op(A) op(B) + beta·C of `shape` (one product: batch 1,
// no groups, no offsets) as cuBLASLt's column-major Cᵀ = op(B)ᵀ op(A)ᵀ: its A is
// our B, its B our A, m = N and n = M, each operand's transpose flag and leading
// dim unchanged (cuda/matmul.cu). The epilogue's vector then runs along C's
// columns: N entries, one per output feature.
std::optional<mlp_epilogue::Product> as_product(cublasLtEpilogue_t epilogue, const GemmShape& shape, const Tensor& A,
                                                const Tensor& B, Tensor& C) {
  if (shape.batch != 1 || shape.groups != 1 || shape.a_offset || shape.b_offset || shape.c_offset ||
      A.dtype() != DType::Float32)
    return std::nullopt;
  mlp_epilogue::Product p;
  p.epilogue = epilogue;
  p.m = shape.N, p.n = shape.M, p.k = shape.K;
  p.a = ptr<const float>(B), p.lda = shape.row_stride_b(), p.trans_a = shape.trans_b;
  p.b = ptr<const float>(A), p.ldb = shape.row_stride_a(), p.trans_b = shape.trans_a;
  p.d = ptr<float>(C), p.ldd = shape.row_stride_c();
  p.alpha = static_cast<float>(shape.alpha), p.beta = static_cast<float>(shape.beta);
  return p;
}

// G = gelu(X W + b): Gᵀ [F, N] = Wᵀ · Xᵀ, so m = F, n = N, k = C; b runs down D's
// F rows, and U, the aux, has D's shape and leading dim F.
void mlp_fc(const GemmShape& shape, UnaryOp op, const Tensor& X, const Tensor& W, const Tensor& bias, Tensor& G,
            GeluSaved* saved) {
  // cuBLASLt's GELU is the tanh form, of unstated accuracy: the exact one, and any
  // under FP32, take the unfused kernels below (the top of the file).
  const cublasLtEpilogue_t epilogue = saved ? CUBLASLT_EPILOGUE_GELU_AUX_BIAS : CUBLASLT_EPILOGUE_GELU_BIAS;
  const bool fuse = op == UnaryOp::GeluTanh && gemm_precision() != Precision::FP32;
  if (auto p = fuse ? as_product(epilogue, shape, X, W, G) : std::nullopt) {
    p->bias = bias.raw_data();
    if (saved) p->aux = saved->values.raw_data(), p->ld_aux = p->ldd;
    if (mlp_epilogue::run(*p)) {
      if (saved) saved->pre_activation = true;
      return;
    }
  }
  // Unfused, as the CPU: X W, then G = f(U) and f'(U) with U = X W + b.
  Tensor XW = Tensor::empty(G.shape(), G.dtype(), Device::CUDA);
  gemm(shape, X, W, XW);
  bias_activation(op, XW, bias, G, saved ? &saved->values : nullptr);
  if (saved) saved->pre_activation = false;
}

// dU = (dY W_projᵀ) ∘ gelu'(U): dUᵀ [F, N] = W_proj · dYᵀ (m = F, n = N, k = C').
// DGELU_BGRAD multiplies by gelu'(U) from the aux U [F, N] and sums D over its n
// columns (our N rows) into db_fc [F].
void mlp_dgelu(const GemmShape& shape, const Tensor& dY, const Tensor& W_proj, const GeluSaved& saved, Tensor& dU,
               Tensor& dBias) {
  if (saved.pre_activation) {
    if (auto p = as_product(CUBLASLT_EPILOGUE_DGELU_BGRAD, shape, dY, W_proj, dU)) {
      p->bias = dBias.raw_data();
      p->aux = saved.values.raw_data(), p->ld_aux = p->ldd;
      if (mlp_epilogue::run(*p)) return;
    }
  }
  gemm(shape, dY, W_proj, dU);  // dG = dY W_projᵀ, into dU
  if (saved.pre_activation) {
    // The forward's epilogue kept U, and this one declined: f'(U) from U (only the tanh GELU keeps U).
    unary_backward(UnaryOp::GeluTanh, saved.values, dU, dU);
    sum_to_shape(dU, dBias);
  } else {
    bias_activation_backward(saved.values, dU, dU, dBias);
  }
}

// C [M, N] (+)= op(A) B and dBias = Σ_K B: cuBLASLt's A is our B, [N, K] column-major,
// and BGRADA sums it over k: Σ over B's K rows, dBias [N]. Not under BF16, where
// cuBLASLt's A is the rounded copy (the top of the file).
void gemm_bias_grad(const GemmShape& shape, const Tensor& A, const Tensor& B, Tensor& C, Tensor& dBias) {
  if (auto p = as_product(CUBLASLT_EPILOGUE_BGRADA, shape, A, B, C); p && !shape.trans_b && gemm_precision() != Precision::BF16) {
    p->bias = dBias.raw_data();
    if (mlp_epilogue::run(*p)) return;
  }
  gemm(shape, A, B, C);
  sum_to_shape(B, dBias);
}

}  // namespace ag::cuda
