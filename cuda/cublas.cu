// cuda/cublas.h: why cuBLAS is opened, not linked.
#include <cuda_runtime.h>
#include <dlfcn.h>

#include <atomic>
#include <optional>
#include <string>

#include "core/error.h"
#include "cuda/context.h"
#include "cuda/cublas.h"

namespace ag::cuda {

namespace {
std::atomic<bool> opened{false};

// The soname of the major version this build was compiled against.
const std::string kLibraryName = "libcublas.so." + std::to_string(CUBLAS_VER_MAJOR);

template <class Function> void resolve(void* library, const char* symbol, Function& slot) {
  void* address = dlsym(library, symbol);
  AG_CHECK(address != nullptr, kLibraryName << " has no " << symbol << ": " << dlerror());
  slot = reinterpret_cast<Function>(address);
}

// The loader's search (RUNPATH, LD_LIBRARY_PATH, ld.so.cache), then the folder
// libcudart was loaded from: the toolkit keeps the two side by side.
void* open_cublas() {
  // RTLD_LOCAL: its symbols stay out of the global namespace (nothing else links them).
  if (void* library = dlopen(kLibraryName.c_str(), RTLD_NOW | RTLD_LOCAL)) return library;
  const std::string search_error = dlerror();
  Dl_info cudart{};
  if (dladdr(reinterpret_cast<void*>(&cudaGetDeviceCount), &cudart) != 0 && cudart.dli_fname != nullptr) {
    const std::string path = cudart.dli_fname;
    const std::string beside = path.substr(0, path.rfind('/') + 1) + kLibraryName;
    if (void* library = dlopen(beside.c_str(), RTLD_NOW | RTLD_LOCAL)) return library;
  }
  throw Error("cannot open cuBLAS (" + kLibraryName + "), which CUDA tensors need: " + search_error);
}

CublasLibrary open_library() {
  void* library = open_cublas();
  CublasLibrary table{};
  // The exported names: cublas_v2.h maps cublasCreate and cublasSetStream to their _v2 symbols.
  resolve(library, "cublasCreate_v2", table.create);
  resolve(library, "cublasSetStream_v2", table.set_stream);
  resolve(library, "cublasSetMathMode", table.set_math_mode);
  resolve(library, "cublasSetWorkspace_v2", table.set_workspace);
  resolve(library, "cublasSgemmStridedBatched", table.sgemm_strided_batched);
  resolve(library, "cublasDgemmStridedBatched", table.dgemm_strided_batched);
  resolve(library, "cublasGemmStridedBatchedEx", table.gemm_strided_batched_ex);
  resolve(library, "cublasGetStatusString", table.status_string);
  opened = true;
  return table;
}
}  // namespace

const CublasLibrary& cublas() {
  static const CublasLibrary table = open_library();  // never closed: the handle lives to exit
  return table;
}

bool cublas_loaded() { return opened; }

// --- cuBLASLt ----------------------------------------------------------------------------
namespace {
const std::string kLtLibraryName = "libcublasLt.so." + std::to_string(CUBLAS_VER_MAJOR);

// As open_cublas, without throwing: null when the library is not there.
void* open_cublas_lt() {
  if (void* library = dlopen(kLtLibraryName.c_str(), RTLD_NOW | RTLD_LOCAL)) return library;
  Dl_info cudart{};
  if (dladdr(reinterpret_cast<void*>(&cudaGetDeviceCount), &cudart) == 0 || cudart.dli_fname == nullptr) return nullptr;
  const std::string path = cudart.dli_fname;
  return dlopen((path.substr(0, path.rfind('/') + 1) + kLtLibraryName).c_str(), RTLD_NOW | RTLD_LOCAL);
}

template <class Function> bool resolve_lt(void* library, const char* symbol, Function& slot) {
  slot = reinterpret_cast<Function>(dlsym(library, symbol));
  return slot != nullptr;
}

std::optional<CublasLtLibrary> open_lt_library() {
  void* library = open_cublas_lt();
  if (library == nullptr) return std::nullopt;
  CublasLtLibrary table{};
  const bool complete =
      resolve_lt(library, "cublasLtCreate", table.create) &&
      resolve_lt(library, "cublasLtMatmulDescCreate", table.desc_create) &&
      resolve_lt(library, "cublasLtMatmulDescDestroy", table.desc_destroy) &&
      resolve_lt(library, "cublasLtMatmulDescSetAttribute", table.desc_set) &&
      resolve_lt(library, "cublasLtMatrixLayoutCreate", table.layout_create) &&
      resolve_lt(library, "cublasLtMatrixLayoutDestroy", table.layout_destroy) &&
      resolve_lt(library, "cublasLtMatmulPreferenceCreate", table.preference_create) &&
      resolve_lt(library, "cublasLtMatmulPreferenceDestroy", table.preference_destroy) &&
      resolve_lt(library, "cublasLtMatmulPreferenceSetAttribute", table.preference_set) &&
      resolve_lt(library, "cublasLtMatmulAlgoGetHeuristic", table.heuristic) &&
      resolve_lt(library, "cublasLtMatmul", table.matmul);
  if (!complete || table.create(&table.handle) != CUBLAS_STATUS_SUCCESS) return std::nullopt;
  return table;
}
}  // namespace

const CublasLtLibrary* cublas_lt() {
  static const std::optional<CublasLtLibrary> table = open_lt_library();  // tried once; never closed
  return table ? &*table : nullptr;
}

}  // namespace ag::cuda
