// The CPU side of a process: how many threads run (our OpenMP loops and
// OpenBLAS alike: OpenBLAS's OpenMP build keeps its own count, which
// omp_set_num_threads alone does not reach), and which of OpenBLAS's kernel
// sets runs.
//
// Both libraries read their settings from the environment once, as they load,
// before main() and before any constructor of ours, and a setenv() then is lost
// (libc sets environ after .preinit_array). So core/threads.cpp runs one function
// from the executable's .preinit_array, before any shared library's initialiser,
// which decides what is missing and, if anything is, starts the same program
// again with it added to the environment (execve of /proc/self/exe, the same
// arguments; ATTOGRAD_CPU_SETUP records what was added, so the second start goes
// on):
//   - OPENBLAS_CORETYPE, when unset, from the CPU's features
//     (choose_blas_kernels): Debian's OpenBLAS 0.3.21 detects newer CPUs as
//     old ones (an AVX-512 Xeon as Prescott, SSE3) and runs their slower GEMMs
//     (docs/performance.md);
//   - GOMP_SPINCOUNT, when neither it nor OMP_WAIT_POLICY is set: libgomp's
//     default spins for milliseconds before an idle thread sleeps, and when
//     another job holds a core every barrier then waits for a spinning thread's
//     time slice to run out, where a sleeping one would have handed its core over.
// The library is static (CMakeLists.txt) and its link interface keeps that
// object in every program, the tests' and the installed library's users' too.
// A program that runs no GEMM and no OpenMP loop (fuzz/check_safetensors, a file
// checker the mutation campaign starts once per mutant) opts out by defining
//   extern "C" const bool ag_no_cpu_setup = true;
// and starts once (docs/performance.md, issue 45's section: the cost of a start).
#pragma once
#include <string>

namespace ag {

void set_num_threads(int n);
int num_threads();

// The default thread count, --threads 0: the CPUs this process may run on (its
// affinity mask: taskset, or mpirun's binding) that were idle over 60 ms of
// /proc/stat at the call (another job's busy CPU is not free). Processes an MPI
// launcher started on this machine (`processes_on_machine` > 1) do not measure
// (they would count each other): bound, each takes its CPUs; unbound, they share
// the machine's. At least 1.
int default_num_threads(int processes_on_machine);

// The x86 features that decide OpenBLAS's kernel set.
struct CpuFeatures {
  bool avx512f = false, avx512bw = false, avx512dq = false, avx512vl = false;
  bool avx2 = false, fma = false, avx = false;
};
CpuFeatures this_cpu_features();

// What OPENBLAS_CORETYPE should be, given the CPU's features and the variable's
// value in the environment (null when unset).
struct BlasKernelChoice {
  std::string coretype;  // the value to use: the given one, or the features' ("" leaves OpenBLAS's detection)
  bool chosen = false;   // coretype came from the features, not from the environment
  std::string note;      // empty, or why the given value is slower than the features' choice
};
// AVX-512 F/BW/DQ/VL -> SKYLAKEX, AVX2 with FMA -> HASWELL, AVX -> SANDYBRIDGE,
// else "" (OpenBLAS's own detection). A value given (OPENBLAS_CORETYPE) is kept, with a note
// when it names older kernels than the CPU runs, unless it names kernels the CPU cannot run:
// then the features' choice replaces it (OpenBLAS would die at the first GEMM), with a note.
BlasKernelChoice choose_blas_kernels(const CpuFeatures& cpu, const char* given_coretype);
// The choice made for this process as it started.
const BlasKernelChoice& blas_kernel_choice();

// OpenBLAS's kernel set for this process ("SkylakeX", "Haswell", ...).
std::string blas_kernels();
// One line for a program's header: threads, OpenBLAS's kernel set and where it
// came from, and the note when there is one, e.g.
// "2 threads, OpenBLAS 0.3.21 Haswell kernels (OPENBLAS_CORETYPE=HASWELL, from the CPU's AVX2+FMA)".
std::string cpu_runtime_summary();

}  // namespace ag
