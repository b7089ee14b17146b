// How the benchmark programs measure, the same way for every case (Linux):
//   time:   wall clock, the median of repeats (the machine may be shared: the
//           median resists a slow outlier);
//   memory: the peak extra resident memory of one run, from the kernel's
//           high-water mark VmHWM, reset to the current resident size through
//           /proc/self/clear_refs before the run. Each case runs in a process of
//           its own, and blocks of 1 MB or more go back to the system when
//           freed, so memory freed by an earlier run cannot hide a peak.
#pragma once
#include <algorithm>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <ctime>
#include <fstream>
#include <memory>
#include <string>
#include <vector>

#include "core/error.h"
#include "examples/common/memory.h"
#include "examples/common/timing.h"

namespace bench {

// Memory is measured as the lab measures its cells (examples/common/memory.h).
using ag::PeakMemory;
using ag::return_freed_memory_to_the_system;
using ag::status_kb;

// CPU time of the whole process (every thread), in ms.
inline double process_cpu_ms() {
  timespec t{};
  clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &t);
  return 1e3 * static_cast<double>(t.tv_sec) + 1e-6 * static_cast<double>(t.tv_nsec);
}

inline double elapsed_ms(std::chrono::steady_clock::time_point since) {
  return std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - since).count();
}

// What a timing reads: wall time, or the process's CPU time (every thread). On
// a busy machine a one-thread run's CPU time still measures its work, where
// wall time also counts the waits for a core.
enum class Clock { Wall, Cpu };
inline double now_ms(Clock clock) {
  return clock == Clock::Cpu ? process_cpu_ms()
                             : std::chrono::duration<double, std::milli>(
                                   std::chrono::steady_clock::now().time_since_epoch()).count();
}

// The median time of f() on `clock` over at least min_reps runs and until
// budget_ms of wall time have passed (at most max_reps).
template <class F> double median_ms(F&& f, Clock clock, int min_reps, int max_reps, double budget_ms) {
  std::vector<double> times;
  const auto start = std::chrono::steady_clock::now();
  while (static_cast<int>(times.size()) < max_reps &&
         (static_cast<int>(times.size()) < min_reps || elapsed_ms(start) < budget_ms)) {
    const double t0 = now_ms(clock);
    f();
    times.push_back(now_ms(clock) - t0);
  }
  return ag::median(std::move(times));
}

// How many [B, H, T, T] float32 tensors an attention implementation holds at
// its peak, roughly (to skip the cases that would not fit): composed keeps S,
// its scaled copy, S + M, A and their gradients; dense A and dS; flash none.
inline double attention_matrices(const std::string& impl) {
  return impl == "composed" ? 7 : impl == "dense" ? 2 : 0;
}

// The standard output of `command` (one of our own processes), or "" if it failed.
inline std::string run_and_capture(const std::string& command) {
  std::unique_ptr<FILE, int (*)(FILE*)> pipe(popen(command.c_str(), "r"), pclose);
  if (!pipe) return "";
  std::string out;
  char buffer[4096];
  while (size_t n = std::fread(buffer, 1, sizeof buffer, pipe.get())) out.append(buffer, n);
  return out;
}

}  // namespace bench
