// One training step, the same for every program (char_lm, sort, and yours):
//
//   lr ← schedule(iter)                      warmup + cosine (optim/schedule.h)
//   n ← total_scored(scored targets here)    the whole step's count (a hook; unset: the count here)
//   zero_grad                                one fill of the flat gradient buffer
//   for each micro-batch m:                  --grad-accum of them
//     L_m = Σ over m's scored targets of the loss
//     backward of L_m / n                    n = scored targets in the whole step
//   after_backward()                         the hook (a data-parallel all-reduce goes here)
//   norm ← clip_grad_norm(grad_clip)         one reduction over the flat buffer
//   optimizer.step()                         one kernel per parameter group,
//                                            skipped if the loss or norm is not finite
//
// Dividing every micro-batch by the whole step's count n, not by its own,
// makes the accumulated gradient exactly the gradient of the mean loss over the
// whole batch, even when micro-batches score different numbers of targets
// (ignore_index): averaging per-micro-batch means would weight a target by
// 1/(its micro-batch's count), the classic gradient-accumulation bug.
//
// The loss and the norm come back as scalars on the model's device: on CUDA
// nothing waits for the device until the caller reads them (at log intervals).
//
// A step whose loss or gradient norm is not finite (a diverged run: too high a
// learning rate, an overflow) changes nothing: the update kernels skip it on
// the device. check_finite() then stops the run with the iteration, the
// learning rate and the first parameter whose gradient went bad; the caller
// calls it before every save, so a diverged run never overwrites a checkpoint.
//
// Step constants. The values the host computes per step reach the kernels
// through device scalars written at the start of each step: the learning rate
// (the optimizer reads it there: Optimizer::read_lr_from) and 1/n (one scalar per
// loss dtype, the operand of each micro-batch's L_m · 1/n). The same doubles as
// before, so the same bits; and a CUDA graph replayed at every step reads that
// step's values, not the ones it was captured with.
//
// One CUDA graph per step (--cuda-graph on, the default; cuda/graph.h). On CUDA,
// when the step's shapes repeat (the same micro-batch count and each one's
// [B, T]), the first two steps of those shapes run eagerly (they fill the
// optimizer's state, the allocator's cache, cuFFT's plans), the third is captured
// as one graph (zero_grad, every forward and backward, the hook-free clip, the
// guard, the update), and every later step replays it: the host copies the
// micro-batches into device tensors the graph reads, writes the step constants
// and dropout's counter shifts (core/counter_shifts.h), and launches it. New
// shapes capture again. The loss and the norm are copied out of the graph's
// outputs after each replay, so each step's stay readable until checked.
// The loss is handed the targets read on the host as always: GPT::loss counts
// the scored ones there (n, a shape of the step: a micro-batch whose count
// changes is a new shape) and finds their rows on the device from the targets
// the graph reads (kernel::scored_positions), so a replay scores its own batch's
// rows, and the losses and gradients are off's bit for bit.
// It does not apply, and the step runs eagerly, on the CPU; with an after_backward
// hook (data or context parallelism: it calls MPI or NCCL from the host); in
// anomaly mode; while the kernel profiler records (it waits for each kernel);
// with AG_CUDA_SYNC set (every launch waits for the device); when the caller says
// so (disable_cuda_graph: packed documents, whose masks are made on the host from
// each batch); and for the rest of the run after a capture fails (an op that waits
// for the device or uploads from the host, an activation hook), which prints why
// once. cuda_graph_status() says which.
#pragma once
#include <functional>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "core/options.h"
#include "optim/train_options.h"
#include "optim/optimizer.h"

namespace ag::optim {

// What check_finite throws: an ag::Error that a caller training many runs (the
// lab) can tell from the others, recording the run as diverged and going on.
class Diverged : public Error {
 public:
  using Error::Error;
};

// The training step's options, from the table in optim/train_options.h.
struct TrainOptions {
  AG_DECLARE_OPTIONS(AG_TRAIN_OPTIONS)
  // Throws unless the options fit together (ranges; warmup before the end of the decay; min_lr <= lr).
  void check() const;
};

// Throws an OptionError (about precision and device) unless `precision` runs
// on `device`: tf32 and bf16 are modes of the CUDA GEMMs, and the CPU refuses
// them, saying so, before a run writes anything.
void check_precision(Precision precision, Device device);

// While alive, the CUDA GEMMs run at `precision` (cuda::set_gemm_precision);
// the setting before comes back after, so runs in one process (the lab's) each
// keep their own. A training run holds one for its lifetime: its evaluations
// and sample use the run's precision too, as under PyTorch's autocast.
class PrecisionScope {
 public:
  explicit PrecisionScope(Precision precision);
  ~PrecisionScope();
  PrecisionScope(const PrecisionScope&) = delete;
  PrecisionScope& operator=(const PrecisionScope&) = delete;

 private:
  Precision before_;
};

// Inputs and targets of one micro-batch, int64 [B, T] on the host; a target
// equal to the step's ignore_index is not scored.
struct Batch {
  Tensor x, y;
};

struct StepResult {
  Tensor loss;       // mean loss over the step's scored targets: a scalar on the model's device
                     // (data-parallel: this process's share, Σ over its targets / n; the shares sum to the mean)
  Tensor grad_norm;  // global gradient norm before clipping: a float64 scalar on that device
  double lr = 0;
  int64_t scored = 0;  // targets that counted (n: in the whole step, total_scored's answer)
};

class TrainStep {
 public:
  // summed_loss(x, y, y_host): the loss of one micro-batch summed over its
  // scored targets (cross_entropy with Reduction::Sum), x and y on `device`;
  // y_host holds y's values as the step read them on the host to count the
  // scored targets, so that the loss need not read them again (GPT::loss takes
  // them as targets_on_host).
  using SummedLoss = std::function<Tensor(const Tensor& x, const Tensor& y, std::span<const int64_t> y_host)>;

  // Checks the options (check_precision among them) and sets the GEMMs'
  // precision for the step's lifetime (a PrecisionScope).
  TrainStep(Optimizer& optimizer, const TrainOptions& options, SummedLoss summed_loss, Device device,
            int64_t ignore_index = -100);
  ~TrainStep();  // the optimizer reads its learning rate from lr() again
  TrainStep(const TrainStep&) = delete;
  TrainStep& operator=(const TrainStep&) = delete;

  // Runs after the last micro-batch's backward, before clipping: the gradients
  // (optimizer.gradient_buffers()) are complete and may be changed in place.
  std::function<void(Optimizer&)> after_backward;
  // Turns the count of scored targets in this process's micro-batches into the
  // step's n. Unset, n is that count. In data-parallel training each process
  // holds a shard of the batch, and n must count the whole batch, on every
  // process (optim/data_parallel.h sums the counts over the processes).
  std::function<int64_t(int64_t)> total_scored;

  // Iteration `iter` (from 0) over `micro_batches` (at least one).
  StepResult run(int64_t iter, const std::vector<Batch>& micro_batches);

  // Throws Diverged for the first step run since the last check whose loss or
  // gradient norm was not finite: its iteration, learning rate and values, and
  // the first parameter (in the model's order) whose gradient holds a NaN or an
  // infinity — exact when that step is the latest, as it is when the caller
  // checks after every step. With `rerun` (that latest step's micro-batches)
  // the step's forward and backward run again in anomaly mode
  // (core/autograd.h), naming the op that first produced a non-finite value.
  // On CUDA it waits for the device once: check at log intervals and before saves.
  void check_finite(const std::vector<Batch>* rerun = nullptr);

  // The step runs eagerly from now on; `why` says so in cuda_graph_status().
  void disable_cuda_graph(const std::string& why);
  // For a run's header: "on (...)", or "off: <why>".
  std::string cuda_graph_status() const;
  // Steps replayed from a captured graph so far (tests, benchmarks).
  int64_t graph_replays() const;

 private:
  struct Unchecked {
    int64_t iter;
    double lr;
    int64_t scored;
    Tensor loss, grad_norm;
  };
  struct Outputs {
    Tensor loss, grad_norm;
  };
  struct Graph;  // the captured step and what it reads (train_step.cpp)

  // Forward and backward of every micro-batch (x and y on the device) into the
  // zeroed gradient buffer, y_host[m] holding micro-batch m's targets as read on
  // the host (null: the loss gets none, and computes its head over all rows);
  // returns the step's mean loss. Reads 1/n from the step constants.
  Tensor accumulate_gradients(const std::vector<Batch>& on_device, const std::vector<std::vector<int64_t>>* y_host);
  // zero_grad, accumulate_gradients, after_backward, clip, the update: the work of one step on the device.
  Outputs step_on_device(const std::vector<Batch>& on_device, const std::vector<std::vector<int64_t>>* y_host);
  // Writes the step constants (fill kernels, queued before the step's work).
  void write_step_constants(double lr, int64_t scored);
  // The 1/n scalar in the loss's dtype, made (and written) on first use.
  const Tensor& inverse_count(DType dtype);
  // Why the graph does not apply to this step ("" when it does).
  std::string graph_off_reason() const;
  // scored: each micro-batch's count of scored targets (from y_host).
  Outputs run_graphed(const std::vector<Batch>& micro_batches, const std::vector<std::vector<int64_t>>& y_host,
                      const std::vector<int64_t>& scored, int64_t iter);

  Optimizer& optimizer_;
  TrainOptions options_;
  SummedLoss summed_loss_;
  Device device_;
  int64_t ignore_index_;
  std::vector<Unchecked> unchecked_;
  PrecisionScope precision_;
  Tensor lr_;  // the step constant: float64 [1] on device_
  std::vector<Tensor> inverse_counts_;  // 1/n, a scalar per loss dtype met
  double inverse_count_value_ = 0;
  std::string graph_disabled_;  // disable_cuda_graph's reason, or a failed capture's
  std::unique_ptr<Graph> graph_;
};

}  // namespace ag::optim
