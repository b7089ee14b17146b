// What dist/communicator.cpp builds world() from. Each is implemented in one
// of two files, chosen by CMake: with MPI found, dist/mpi.cpp, else
// dist/without_mpi.cpp; with NCCL found too, dist/nccl.cpp, else
// dist/without_nccl.cpp.
#pragma once
#include <memory>

#include "dist/communicator.h"

namespace ag::dist {

// The communicator over every process the MPI launcher started (MPI_Init).
std::unique_ptr<Communicator> start_mpi();

// Collectives on CUDA tensors, on the stream every kernel runs on, so they are
// ordered after the kernels that wrote their tensor and before those that read it.
class DeviceCollectives {
 public:
  virtual ~DeviceCollectives() = default;
  virtual void all_reduce_sum(const Tensor& t) = 0;
  virtual void broadcast(const Tensor& t, int root) = 0;
  // Queued on the stream; nothing for the host to wait for.
  virtual void exchange(const Tensor& send, int to, const Tensor& receive, int from) = 0;
  // The group of Communicator::split, among the same GPUs.
  virtual std::unique_ptr<DeviceCollectives> split(int color, int key) = 0;
};

// Communicator::start_exchange's argument checks (every implementation's).
void check_exchange(const Communicator& comm, const Tensor& send, int to, const Tensor& receive, int from);

// Binds this process to GPU host.local_rank() and joins the processes of
// `host` in one NCCL communicator, its id sent from rank 0 over `host`.
std::unique_ptr<DeviceCollectives> connect_gpus(Communicator& host);

}  // namespace ag::dist
