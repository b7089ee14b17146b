// The CPU thread count, for our OpenMP loops and OpenBLAS alike (OpenBLAS's
// OpenMP build keeps its own count: omp_set_num_threads alone does not reach it),
// and which of OpenBLAS's kernel sets runs.
#pragma once
#include <string>

namespace ag {

void set_num_threads(int n);
int num_threads();

// OpenBLAS's kernel set for this process ("SkylakeX", "Haswell", ...): chosen
// when the library loads, from its CPU detection or OPENBLAS_CORETYPE.
std::string blas_kernels();
// Empty, or one line of advice when the CPU has AVX-512 but OpenBLAS runs
// older kernels (an inherited OPENBLAS_CORETYPE=Haswell, or a CPU newer than
// OpenBLAS knows): OPENBLAS_CORETYPE=SKYLAKEX makes the GEMMs about 1.5x faster
// at attograd's sizes. scripts/blas_env.sh applies the same rule.
std::string blas_kernel_advice();

}  // namespace ag
