// The kernel profiler: while recording, every kernel:: entry point (the one
// dispatch point, core/dispatch.cpp) notes its name, its family (the basename of
// core/cpu/<family>.cpp), the shapes of its tensors and its wall time. It answers
// "where do the milliseconds of a step go" per kernel, and keeps each GEMM's
// GemmShape so that bench/profile_step.cpp can replay the step's GEMMs alone.
//
// Off by default. Off, it costs one relaxed atomic load and a branch per kernel
// call (not measurable in a training step). On, each call costs two clock reads,
// a record and a copy of its shapes (what that adds to a step is in
// docs/performance.md), and a CUDA call waits for the
// device before and after (cuda::wait_for_queue, which leaves deferred errors
// to the next synchronize()), so its time is the kernel's own; that also
// removes the overlap of host and device: profile to see where time goes, not
// to time the whole run.
//
// Switched on by start() / stop(), or for a whole program by the environment
// variable AG_PROFILE=1, which prints summary() of everything to stderr at exit.
#pragma once
#include <functional>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "core/dispatch.h"

namespace ag::profiler {

struct KernelRecord {
  const char* kernel;         // "gemm": the kernels.inc name
  const char* family;         // "matmul": core/cpu/<family>.cpp
  bool grad_mode;             // autograd's grad mode was on: a forward pass, not backward() or NoGradGuard
  std::vector<Shape> shapes;  // of the tensor arguments, in the kernel's order
  DType dtype;                // of the first tensor argument
  Device device;
  double ms;
  kernel::GemmShape gemm{};   // gemm calls only (is_gemm)
  bool is_gemm = false;

  double gemm_flops() const;  // 2·M·N·K·batch·groups for a gemm, else 0
};

void start();                       // clears the records and starts recording
std::vector<KernelRecord> stop();   // stops, and hands over what was recorded
bool recording();

// The records summed by key(record) (a kernel name, a family, a GEMM shape...),
// largest time first.
struct Total {
  std::string key;
  int64_t calls = 0;
  double ms = 0;
  double flops = 0;  // of the GEMMs among them
};
std::vector<Total> totals(const std::vector<KernelRecord>& records,
                          const std::function<std::string(const KernelRecord&)>& key);
// Rows "key  calls  ms  share  us/call" and a total; calls and ms divided by
// `per` (the number of steps recorded, for per-step figures).
std::string table(const std::vector<Total>& rows, const char* heading, double per);
// "4x4x [64,32]·[64,32]ᵀ ld 128,128,64": groups (when more than one), batch,
// op(A) and op(B) as stored shapes with ᵀ where BLAS transposes, the leading
// dims when not packed, beta when not 0.
std::string describe_gemm(const kernel::GemmShape& g);
// Per kernel, then per family (everything recorded: divide by steps yourself).
std::string summary(const std::vector<KernelRecord>& records);

// Used by the dispatch point: times one kernel call from construction to
// destruction, and is also where the call's device is chosen.
class KernelCall {
 public:
  // Checks that every tensor is on one device (an error naming `kernel`
  // otherwise) and, when recording, starts the clock. `tensors` are the
  // kernel's tensor arguments in order (core/dispatch.cpp's tensors_of). The
  // first must be defined; a later one may be null or undefined (an optional
  // argument), and is skipped.
  KernelCall(const char* family, const char* kernel, std::span<const Tensor* const> tensors,
             const kernel::GemmShape* gemm = nullptr);
  ~KernelCall();
  KernelCall(const KernelCall&) = delete;
  KernelCall& operator=(const KernelCall&) = delete;

  bool on_cpu() const { return device_ == Device::CPU; }

 private:
  Device device_;
  std::unique_ptr<KernelRecord> record_;  // only while recording
  double start_ms_ = 0;
};

}  // namespace ag::profiler
