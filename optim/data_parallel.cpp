#include "optim/data_parallel.h"

#include "core/context_parallel.h"
#include "core/ops.h"

namespace ag::optim {

void replicate(const std::vector<Tensor>& parameters, dist::Communicator& comm) {
  for (const Tensor& p : parameters) comm.broadcast(p, 0);
}

void check_divisible(int64_t batch_size, const dist::Communicator& comm) {
  AG_CHECK(batch_size % comm.size() == 0, "--batch-size " << batch_size << ": each batch's sequences are split evenly "
                                                          << "among the " << comm.size()
                                                          << " processes, so it must be a multiple of " << comm.size());
}

Tensor shard(const Tensor& batch, const dist::Communicator& comm) {
  if (comm.size() == 1) return batch;
  const int64_t B = batch.shape().at(0);
  check_divisible(B, comm);
  const int64_t rows = B / comm.size();
  return slice(batch, 0, comm.rank() * rows, (comm.rank() + 1) * rows);
}

void make_data_parallel(TrainStep& step, dist::Communicator& comm) {
  // One process: nothing to sum, and a step without hooks can run as a CUDA graph (optim/train_step.h).
  if (comm.size() == 1) return;
  step.total_scored = [&comm](int64_t scored_here) { return dist::sum(comm, scored_here); };
  step.after_backward = [&comm](Optimizer& optimizer) {
    for (const Tensor& gradients : optimizer.gradient_buffers()) comm.all_reduce_sum(gradients);
  };
}

uint64_t replica_seed(uint64_t seed, const dist::Communicator& comm) {
  return comm.rank() == 0 ? seed : random_bits(seed, static_cast<uint64_t>(comm.rank()));
}

namespace {
int64_t checked_group_size(int processes, int64_t P) {
  AG_CHECK(P >= 1 && processes % P == 0, "--context-parallel " << P << ": the " << processes
                                                               << " processes do not form groups of " << P
                                                               << " (start a multiple of " << P << ")");
  return P;
}
}  // namespace

ProcessGrid::ProcessGrid(dist::Communicator& world, int64_t context_parallel) : world_(world) {
  const int64_t P = checked_group_size(world.size(), context_parallel);
  if (P == 1) return;
  data_ = world.split(static_cast<int>(world.rank() % P), world.rank());
  context_ = world.split(static_cast<int>(world.rank() / P), world.rank());
}

void ProcessGrid::check(int processes, int64_t P, int64_t batch_size, int64_t T) {
  const int64_t dp = processes / checked_group_size(processes, P);
  AG_CHECK(batch_size % dp == 0, "--batch-size " << batch_size << ": each batch's sequences are split evenly among the "
                                                 << dp << (P == 1 ? " processes" : " data-parallel groups")
                                                 << ", so it must be a multiple of " << dp);
  AG_CHECK(P == 1 || T % (2 * P) == 0, "--context-parallel " << P << ": --block-size " << T
                                                             << " does not split into 2·P = " << 2 * P
                                                             << " equal chunks (make it a multiple of " << 2 * P << ")");
}

Tensor ProcessGrid::part(const Tensor& batch) const {
  const Tensor rows = shard(batch, data());
  if (!context_) return rows;
  const ZigzagSplit split(batch.size(1), context_->size(), context_->rank());
  const int64_t c = split.chunk();
  return concat({slice(rows, 1, split.chunk_of(0) * c, (split.chunk_of(0) + 1) * c),
                 slice(rows, 1, split.chunk_of(1) * c, (split.chunk_of(1) + 1) * c)},
                1);
}

std::string ProcessGrid::describe() const {
  return std::to_string(data().size()) + " data-parallel × " + std::to_string(context_parallel()) + " context-parallel";
}

}  // namespace ag::optim
