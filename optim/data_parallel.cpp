#include "optim/data_parallel.h"

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
  step.total_scored = [&comm](int64_t scored_here) { return dist::sum(comm, scored_here); };
  step.after_backward = [&comm](Optimizer& optimizer) {
    for (const Tensor& gradients : optimizer.gradient_buffers()) comm.all_reduce_sum(gradients);
  };
}

uint64_t replica_seed(uint64_t seed, const dist::Communicator& comm) {
  return comm.rank() == 0 ? seed : random_bits(seed, static_cast<uint64_t>(comm.rank()));
}

}  // namespace ag::optim
