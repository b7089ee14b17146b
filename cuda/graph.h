// One CUDA graph: the work a function queues on the stream (cuda/context.h),
// captured once and replayed whole by one launch (cudaGraphLaunch). A training
// step is a few hundred to a few thousand small kernels; launched one by one,
// each costs the host several microseconds, and at a small model that cost is
// the step (issue 48: a lab cell at 1.49 ms/step, mostly launches). A replay
// launches them all with one call.
//
// What a replay repeats is what the capture recorded: the same kernels with the
// same arguments, reading and writing the same addresses. So
//   - every value the host computes per step reaches the kernels through device
//     memory the host writes before each replay (optim/train_step.h's step
//     constants; dropout's counters: core/counter_shifts.h);
//   - the memory the captured work allocates comes from a private pool of the
//     caching allocator (core/caching_allocator.h) that serves nothing else while
//     the graph exists;
//   - nothing in the captured work may wait for the device or copy from the
//     host (a synchronize, a tensor read, an upload): the capture fails.
// A failed capture is not an error: capture() ends it, keeps nothing, and says
// why, and its caller runs the work eagerly.
//
// Index checks (cuda/context.h's deferred errors): the captured work's checks are
// deferred again after each replay and read at the next synchronisation. Each
// replay writes the same check buffers, so a synchronisation sees the last replay's
// result: an out-of-range index in an earlier replay since the last read goes
// unreported (eager steps report each one). A training run reads at log intervals.
//
// cuBLAS has a workspace of its own set on the handle (cuda/context.cu), so a
// captured GEMM allocates nothing; cuFFT plans are made by the eager steps
// before a capture (cuda/s4.cu keeps them), and a captured transform's work
// area comes from the graph's pool, as any scratch.
//
// Without CUDA (cuda/disabled.cpp) capture() answers that the build has none.
#pragma once
#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "cuda/context.h"

namespace ag::cuda {

// How many StepGraphs hold a captured graph now: while one does, device memory it
// was captured with must not be freed (core/ops/attention.cpp's mask cache asks).
int64_t live_graphs();
// Whether a StepGraph's capture is running its work now: what must not run only once,
// at the capture (an activation hook, nn/module.cpp), refuses then.
bool capturing_graph();

class StepGraph {
 public:
  StepGraph() = default;
  ~StepGraph();  // destroys the graph (after its queued replays) and releases its pool
  StepGraph(const StepGraph&) = delete;
  StepGraph& operator=(const StepGraph&) = delete;

  // Captures what `work` queues on the stream (cudaStreamCaptureModeRelaxed), with
  // the allocator serving it from a new private pool, and instantiates the graph.
  // Nothing runs: the first replay() does the work. Returns "" when the graph is
  // ready, else why not (the CUDA error's text, or the exception `work` threw),
  // with the capture ended, the device's error state cleared and nothing kept.
  std::string capture(const std::function<void()>& work);
  // Queues the whole graph on the stream. The index checks the captured work
  // deferred (cuda/context.h) are deferred again for this replay.
  void replay();
  bool ready() const { return exec_ != nullptr; }
  // Destroys the graph and releases its pool (before a capture of new shapes),
  // after waiting for a replay still queued.
  void reset();

 private:
  void* graph_ = nullptr;  // cudaGraph_t
  void* exec_ = nullptr;   // cudaGraphExec_t
  uint64_t pool_ = 0;      // the allocator's private pool (0: none)
  int64_t replays_ = 0;
  std::vector<PendingIndexCheck> checks_;  // the index checks the captured work deferred
};

}  // namespace ag::cuda
