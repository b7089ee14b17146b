// The CPU side of a process (core/threads.h): OpenBLAS's kernel set chosen from
// the CPU's features, and the default thread count on a busy machine.
#include <doctest/doctest.h>
#include <sched.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cctype>
#include <cstdlib>
#include <thread>

#include "core/threads.h"

// The file's names and using-directives stay its own in a unity build, where the test
// files compile as one translation unit (CMakeLists.txt).
namespace threads_test {

using namespace ag;

namespace {
CpuFeatures avx512() {
  CpuFeatures cpu;
  cpu.avx512f = cpu.avx512bw = cpu.avx512dq = cpu.avx512vl = true;
  cpu.avx2 = cpu.fma = cpu.avx = true;
  return cpu;
}
CpuFeatures avx2_fma() {
  CpuFeatures cpu;
  cpu.avx2 = cpu.fma = cpu.avx = true;
  return cpu;
}
std::string upper(std::string s) {
  for (char& c : s) c = static_cast<char>(std::toupper(static_cast<unsigned char>(c)));
  return s;
}
}  // namespace

TEST_CASE("blas kernels: chosen from the CPU's features when OPENBLAS_CORETYPE is unset") {
  const BlasKernelChoice skylake = choose_blas_kernels(avx512(), nullptr);
  CHECK(skylake.coretype == "SKYLAKEX");
  CHECK(skylake.chosen);
  CHECK(skylake.note.empty());
  CHECK(choose_blas_kernels(avx2_fma(), "").coretype == "HASWELL");

  CpuFeatures avx512_without_vl = avx512();
  avx512_without_vl.avx512vl = false;  // OpenBLAS's SkylakeX kernels need all four
  CHECK(choose_blas_kernels(avx512_without_vl, nullptr).coretype == "HASWELL");
  CpuFeatures avx2_without_fma = avx2_fma();
  avx2_without_fma.fma = false;
  CHECK(choose_blas_kernels(avx2_without_fma, nullptr).coretype == "SANDYBRIDGE");
  const BlasKernelChoice sse = choose_blas_kernels(CpuFeatures{}, nullptr);
  CHECK(sse.coretype.empty());  // OpenBLAS's own detection
  CHECK_FALSE(sse.chosen);
}

TEST_CASE("blas kernels: a value given is kept, with a note when it names older kernels") {
  const BlasKernelChoice haswell_on_avx512 = choose_blas_kernels(avx512(), "Haswell");
  CHECK(haswell_on_avx512.coretype == "Haswell");
  CHECK_FALSE(haswell_on_avx512.chosen);
  CHECK(haswell_on_avx512.note.find("OPENBLAS_CORETYPE=Haswell") != std::string::npos);
  CHECK(haswell_on_avx512.note.find("SKYLAKEX") != std::string::npos);

  const BlasKernelChoice prescott = choose_blas_kernels(avx2_fma(), "PRESCOTT");
  CHECK(prescott.coretype == "PRESCOTT");
  CHECK(prescott.note.find("older") != std::string::npos);

  for (const char* newest : {"SKYLAKEX", "Cooperlake", "SAPPHIRERAPIDS"}) {
    CAPTURE(newest);
    const BlasKernelChoice kept = choose_blas_kernels(avx512(), newest);
    CHECK(kept.coretype == newest);
    CHECK(kept.note.empty());
  }
  CHECK(choose_blas_kernels(avx2_fma(), "ZEN").note.empty());  // Zen runs the AVX2 kernels
}

TEST_CASE("blas kernels: a value naming kernels the CPU cannot run is replaced, with a note") {
  // OpenBLAS would run them and die of an illegal instruction at the first GEMM.
  const BlasKernelChoice choice = choose_blas_kernels(avx2_fma(), "SkylakeX");
  CHECK(choice.coretype == "HASWELL");
  CHECK(choice.chosen);
  CHECK(choice.note.find("OPENBLAS_CORETYPE=SkylakeX") != std::string::npos);
  CHECK(choice.note.find("cannot run") != std::string::npos);
}

TEST_CASE("blas kernels: this process runs the kernel set chosen as it started") {
  const BlasKernelChoice& choice = blas_kernel_choice();
  MESSAGE("this process: " << cpu_runtime_summary());
  if (!choice.coretype.empty()) CHECK(upper(blas_kernels()) == upper(choice.coretype));
  // The choice is the one the features give unless the environment named a set.
  if (choice.chosen) CHECK(choice.coretype == choose_blas_kernels(this_cpu_features(), nullptr).coretype);
  // libgomp's spin is bounded unless the environment set a policy of its own.
  CHECK((std::getenv("GOMP_SPINCOUNT") != nullptr || std::getenv("OMP_WAIT_POLICY") != nullptr));
}

TEST_CASE("threads: the default leaves out a CPU that another job keeps busy") {
  const int machine = static_cast<int>(std::thread::hardware_concurrency());
  std::atomic<bool> stop{false};
  std::thread busy([&stop] {
    while (!stop.load(std::memory_order_relaxed)) {
    }
  });
  std::this_thread::sleep_for(std::chrono::milliseconds(20));  // let it get a CPU
  const int threads = default_num_threads(1);
  stop = true;
  busy.join();
  CHECK(threads >= 1);
  CHECK(threads <= std::max(1, machine - 1));
  // Processes an MPI launcher started here, unbound, share the CPUs without measuring.
  cpu_set_t allowed;
  const bool bound = sched_getaffinity(0, sizeof allowed, &allowed) == 0 && CPU_COUNT(&allowed) < machine;
  if (machine >= 2 && !bound) CHECK(default_num_threads(2) == machine / 2);
}

}  // namespace threads_test
