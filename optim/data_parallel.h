// Data-parallel training over the processes of a dist::Communicator (MPI
// processes, one GPU each on CUDA): every process holds the whole model and
// optimizer and computes the gradient of its shard of each batch; the gradients
// are summed over the processes, so every process applies the same update and
// the replicas stay equal.
//
//   replicate(parameters)       rank 0's weights on every process, at the start
//   shard(batch)                process r's rows [r·B/N, (r+1)·B/N) of the batch
//                               every process drew alike (same generator, same seed)
//   make_data_parallel(step)    in every step of the training step (optim/train_step.h):
//     n = Σ_r n_r                 the whole batch's count of scored targets: each
//                                 process divides its shard's summed loss by it
//     g = Σ_r g_r                 after the backward, one all-reduce of each flat
//                                 gradient buffer (MPI_Allreduce, or ncclAllReduce)
//
// Why a sum, and the whole batch's n: process r's gradient is
// g_r = ∇(Σ over shard r's targets of ℓ) / n, so Σ_r g_r = ∇(Σ over all targets of ℓ) / n,
// the one-process gradient of the batch's mean loss, whatever number of targets
// each shard scores (ignore_index). Averaging each process's own mean,
// (1/N) Σ_r ∇(Σ_r ℓ) / n_r, would weight a target by 1/n_r: the
// gradient-accumulation bug again, across processes. Likewise each process's
// StepResult::loss is its share Σ_r ℓ / n, and the shares sum to the mean loss.
// The result differs from one process's only in the order of float additions.
#pragma once
#include <memory>
#include <string>
#include <vector>

#include "dist/communicator.h"
#include "optim/train_step.h"

namespace ag::optim {

// Copies rank 0's values into every process's parameters (a broadcast each).
void replicate(const std::vector<Tensor>& parameters, dist::Communicator& comm);

// Throws unless the communicator's processes divide a batch of `batch_size` rows evenly.
void check_divisible(int64_t batch_size, const dist::Communicator& comm);
// This process's rows [r·B/N, (r+1)·B/N) of `batch` [B, ...] (itself when alone).
Tensor shard(const Tensor& batch, const dist::Communicator& comm);

// Makes `step` this process's part of a data-parallel step (see the top): sets
// its total_scored and after_backward hooks (none on one process, which has nothing
// to sum). `comm` must outlive the step.
void make_data_parallel(TrainStep& step, dist::Communicator& comm);

// A random stream of each process's own (its dropout masks): rank 0 keeps
// `seed`, so a run on one process draws what it draws alone.
uint64_t replica_seed(uint64_t seed, const dist::Communicator& comm);

// Context parallelism beside it (issue 26; core/context_parallel.h): the N
// processes form a dp × P grid. Ranks kP … kP + P − 1 are context-parallel
// group k, which shares each of its sequences, every process holding the
// zigzag chunks of its rank in the group; the processes of equal rank in
// their groups form a data-parallel group of dp, which splits each batch's
// sequences. Every process draws each whole batch alike and keeps its part.
// The gradients still sum over all N processes (make_data_parallel on the
// world): each holds the loss terms of its own positions.
class ProcessGrid {
 public:
  // Throws unless P ≥ 1 divides the processes. With P > 1 a collective (two
  // splits); with P = 1 the grid is the world's data parallelism, and makes nothing.
  ProcessGrid(dist::Communicator& world, int64_t context_parallel);
  // Throws unless `processes` form a dp × P grid that splits batches of B
  // sequences of T positions: P divides them, dp = processes / P divides B,
  // and (P > 1) 2P divides T. Not a collective: a run calls it before any, so
  // that every process of a run that cannot start says why.
  static void check(int processes, int64_t context_parallel, int64_t batch_size, int64_t T);

  dist::Communicator& world() const { return world_; }
  // The dp processes of this one's rank in its group (the world when P = 1).
  dist::Communicator& data() const { return data_ ? *data_ : world_; }
  // The P processes of this one's context-parallel group, that the model's attention runs its ring
  // over; null when P = 1 (nothing to split).
  dist::Communicator* ring() const { return context_.get(); }
  int64_t context_parallel() const { return context_ ? context_->size() : 1; }
  // This process's part of a batch [B, T] that every process drew alike: its
  // rows (shard over data()), and of each its zigzag chunks of the T positions.
  Tensor part(const Tensor& batch) const;
  // "2 data-parallel × 2 context-parallel", for the progress line.
  std::string describe() const;

 private:
  dist::Communicator& world_;
  std::unique_ptr<dist::Communicator> data_, context_;
};

}  // namespace ag::optim
