// Memory a run holds at its peak, as the kernel reports it (Linux): the extra
// resident memory of one run, from the high-water mark VmHWM, reset to the
// current resident size through /proc/self/clear_refs before the run. Blocks of
// 1 MB or more go back to the system when freed, so memory freed by an earlier
// run cannot hide a peak. The lab's cells and the benchmarks (bench/measure.h) measure so.
#pragma once
#include <malloc.h>

#include <cstdint>
#include <fstream>
#include <string>

namespace ag {

// glibc otherwise raises its mmap threshold after the first large free and
// keeps later large blocks on the heap, resident after they are freed.
inline void return_freed_memory_to_the_system() {
  mallopt(M_MMAP_THRESHOLD, 1 << 20);
  mallopt(M_TRIM_THRESHOLD, 1 << 20);
}

// A field of /proc/self/status in kB ("VmRSS", "VmHWM"); -1 if absent.
inline int64_t status_kb(const std::string& field) {
  std::ifstream status("/proc/self/status");
  for (std::string line; std::getline(status, line);)
    if (line.rfind(field + ":", 0) == 0) return std::stoll(line.substr(field.size() + 1));
  return -1;
}

// Peak resident memory above the level at construction, in MB; -1 where the
// kernel does not let the high-water mark be reset.
class PeakMemory {
 public:
  PeakMemory() {
    std::ofstream clear("/proc/self/clear_refs");
    clear << "5";  // VmHWM := VmRSS
    clear.flush();
    resettable_ = clear.good();
    baseline_kb_ = status_kb("VmRSS");
  }
  double extra_mb() const { return resettable_ ? (status_kb("VmHWM") - baseline_kb_) / 1024.0 : -1; }

 private:
  bool resettable_ = false;
  int64_t baseline_kb_ = 0;
};

}  // namespace ag
