// cuda/graph.h: one CUDA graph, captured from the stream and replayed.
#include <cuda_runtime.h>

#include <algorithm>
#include <atomic>

#include "core/error.h"
#include "cuda/check.h"
#include "cuda/graph.h"

namespace ag::cuda {

namespace {
cudaStream_t the_stream() { return static_cast<cudaStream_t>(stream()); }
std::atomic<int64_t> instantiated{0};  // StepGraphs holding a graph: live_graphs()
std::atomic<bool> capturing_now{false};  // a capture's work runs: capturing_graph()
}  // namespace

int64_t live_graphs() { return instantiated; }
bool capturing_graph() { return capturing_now; }

StepGraph::~StepGraph() {
  // A destructor throws nothing: a failure to destroy leaks the graph, no more. A replay may still
  // run: it finishes before its graph goes (as in reset()).
  if (exec_) {
    cudaStreamSynchronize(the_stream());
    cudaGraphExecDestroy(static_cast<cudaGraphExec_t>(exec_));
    --instantiated;
  }
  if (graph_) cudaGraphDestroy(static_cast<cudaGraph_t>(graph_));
  if (pool_) release_graph_pool(pool_);
}

void StepGraph::reset() {
  // A replay still queued finishes first: one wait, at a change of shapes only, rather than relying
  // on the driver to keep an executing graph alive.
  if (exec_) {
    wait_for_queue();
    const cudaError_t status = cudaGraphExecDestroy(static_cast<cudaGraphExec_t>(exec_));
    exec_ = nullptr;
    --instantiated;
    AG_CUDA_CHECK(status);
  }
  if (graph_) AG_CUDA_CHECK(cudaGraphDestroy(static_cast<cudaGraph_t>(graph_)));
  exec_ = graph_ = nullptr;
  if (pool_) release_graph_pool(pool_);
  pool_ = 0;
  replays_ = 0;
  checks_.clear();
}

std::string StepGraph::capture(const std::function<void()>& work) {
  reset();
  const cudaStream_t s = the_stream();  // made before the capture (the first use creates it)
  const size_t checks_before = pending_index_checks().size();
  // The pool first: if it throws, no capture is left open on the stream.
  pool_ = begin_graph_pool();
  // Relaxed: cudaMalloc stays legal during the capture (the allocator's misses), as in PyTorch.
  cudaError_t status = cudaStreamBeginCapture(s, cudaStreamCaptureModeRelaxed);
  if (status != cudaSuccess) {
    cudaGetLastError();
    release_graph_pool(pool_);  // ends its capture too
    pool_ = 0;
    return std::string("cudaStreamBeginCapture: ") + cudaGetErrorString(status);
  }
  std::string failure;
  capturing_now = true;
  try {
    work();
  } catch (const std::exception& e) {
    failure = e.what();
  } catch (...) {  // whatever was thrown, the capture is ended below
    failure = "an exception that is not a std::exception";
  }
  capturing_now = false;
  end_graph_pool();
  cudaGraph_t graph = nullptr;
  status = cudaStreamEndCapture(s, &graph);
  if (failure.empty() && status != cudaSuccess) failure = std::string("cudaStreamEndCapture: ") + cudaGetErrorString(status);
  if (failure.empty()) {
    cudaGraphExec_t exec = nullptr;
    status = cudaGraphInstantiate(&exec, graph, 0);
    if (status == cudaSuccess) {
      graph_ = graph;
      exec_ = exec;
      ++instantiated;
    } else {
      failure = std::string("cudaGraphInstantiate: ") + cudaGetErrorString(status);
    }
  }
  if (!failure.empty()) {
    if (graph) cudaGraphDestroy(graph);
    cudaGetLastError();  // a failed capture leaves its error behind: clear it, or the next launch check would report it
    // Nothing ran, so the checks the capture deferred would read buffers never written; and nothing the
    // capture allocated is read by anything queued: the pool goes back at once.
    keep_pending_index_checks(checks_before);
    release_graph_pool(pool_);
    pool_ = 0;
    return failure;
  }
  // The checks the captured work deferred are read after the first replay (they were queued once by the
  // capture itself); each later replay defers copies again.
  std::vector<PendingIndexCheck> pending = pending_index_checks();
  checks_.assign(pending.begin() + static_cast<std::ptrdiff_t>(std::min(checks_before, pending.size())), pending.end());
  return "";
}

void StepGraph::replay() {
  AG_CHECK(exec_, "StepGraph::replay: nothing captured");
  AG_CUDA_CHECK(cudaGraphLaunch(static_cast<cudaGraphExec_t>(exec_), the_stream()));
  if (replays_++ > 0)
    for (const PendingIndexCheck& check : checks_) defer_index_error(check);
}

}  // namespace ag::cuda
