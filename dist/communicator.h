// The processes of a data-parallel run and the collectives they call together
// (optim/data_parallel.h builds training on them).
//
// world() is the run this process belongs to:
//   - started by an MPI launcher (mpirun -np N, mpirun -H host1,host2, srun):
//     all the processes it started, over MPI (dist/mpi.cpp); CUDA tensors go
//     through NCCL (dist/nccl.cpp), MPI only carrying NCCL's id at the start;
//   - otherwise this process alone: every collective leaves its tensor as it is
//     (a sum over one process is its own value).
// So a program calls the same collectives whether it runs alone or on many
// processes, and holds no #ifdef: a build without MPI (dist/without_mpi.cpp)
// runs alone, and refuses to start under a launcher.
//
// MPI's rule holds for every collective: all processes call it, in the same
// order, with tensors of the same dtype, number of elements and device. A
// process that cannot go on must end the whole run (end_run_on_error), or the
// others wait for it forever.
#pragma once
#include <functional>
#include <memory>
#include <string>
#include <utility>

#include "core/safetensors.h"  // Metadata
#include "core/tensor.h"

namespace ag::dist {

// A point-to-point exchange under way (Communicator::start_exchange): its
// tensors must stay alive and untouched until wait() returns. wait() is called
// once; the destructor waits for an exchange nobody waited for.
class Exchange {
 public:
  Exchange() = default;
  explicit Exchange(std::function<void()> finish) : finish_(std::move(finish)) {}
  Exchange(Exchange&& other) noexcept : finish_(std::exchange(other.finish_, nullptr)) {}
  Exchange& operator=(Exchange&& other) noexcept {
    if (this != &other) {
      wait();
      finish_ = std::exchange(other.finish_, nullptr);
    }
    return *this;
  }
  ~Exchange() { wait(); }
  void wait() {
    if (finish_) std::exchange(finish_, nullptr)();
  }

 private:
  std::function<void()> finish_;
};

class Communicator {
 public:
  virtual ~Communicator() = default;
  Communicator(const Communicator&) = delete;
  Communicator& operator=(const Communicator&) = delete;

  int rank() const { return rank_; }              // this process, 0 .. size() - 1
  int size() const { return size_; }              // processes in the run
  int local_rank() const { return local_rank_; }  // among the run's processes on this machine
  int local_size() const { return local_size_; }
  // "MPI" or "alone", for progress lines.
  virtual std::string describe() const = 0;

  // Sums `t` (float32, float64 or int64) over the processes, in place: each
  // process then holds the same sum. MPI for CPU tensors, NCCL for CUDA tensors.
  virtual void all_reduce_sum(const Tensor& t) = 0;
  // Overwrites `t` on every process with root's `t`.
  virtual void broadcast(const Tensor& t, int root) = 0;
  // Readies collectives on `device`. For CUDA: binds this process to GPU
  // local_rank() (one GPU per process; the only one, where CUDA_VISIBLE_DEVICES
  // shows it one) and joins the processes' NCCL communicator. A collective;
  // call it before any other CUDA work.
  virtual void use_device(Device device) = 0;
  // Ends every process of the run with `code` (MPI_Abort), at once when every process is ending
  // this way, else within a few seconds (dist/mpi.cpp says why it waits). Alone: returns.
  virtual void abort(int code) = 0;

  // The processes that pass the same `color`, ranked by `key` (ties by rank):
  // a communicator of their own (MPI_Comm_split), whose collectives involve
  // only them. A collective of this communicator. For CUDA tensors call
  // use_device first: the group's NCCL communicator is split from this one's.
  virtual std::unique_ptr<Communicator> split(int color, int key) = 0;
  // Sends `send` to process `to` and receives into `receive` (the sender's
  // dtype, element count and device) from process `from`, without waiting for
  // either: the caller computes, then waits on the returned exchange. Every
  // process that is sent to must post the matching receive. CPU tensors over
  // MPI (the time wait() blocks counts in collective_ms); CUDA tensors over
  // NCCL on the kernels' stream, where wait() has nothing to wait for (what
  // reads `receive` is queued after it). Alone, to = from = 0: a copy.
  virtual Exchange start_exchange(const Tensor& send, int to, const Tensor& receive, int from) = 0;

  // Milliseconds spent in collectives so far, host time. CPU collectives wait
  // for every process, so this includes waiting for the slowest; CUDA ones are
  // only queued on the stream (their launch is all the host sees).
  double collective_ms() const { return collective_ms_; }

 protected:
  Communicator() = default;
  int rank_ = 0, size_ = 1, local_rank_ = 0, local_size_ = 1;
  double collective_ms_ = 0;
};

// The run this process belongs to (see the top), made on first call.
Communicator& world();

// For a process that cannot go on (main's catch): in a run of several
// processes, ends them all (the others would otherwise wait forever in their
// next collective); alone, or before world() was made, returns.
void end_run_on_error(int code);

// " (rank 1 of 2)" when world() has several processes, else "": for messages.
std::string process_label();

// --- collectives on host values, built on the two above ---------------------------------
int64_t sum(Communicator& comm, int64_t value);
std::string broadcast(Communicator& comm, const std::string& text, int root);

// Throws on each process whose `description` (of what must be the same on all
// processes: options, data) differs from rank 0's, naming the keys that differ.
// `what` says which run ("train").
void check_same_on_every_process(Communicator& comm, const Metadata& description, const std::string& what);

// A 64-bit FNV-1a hash of `bytes`: the same on every machine, for describing
// data in check_same_on_every_process.
uint64_t fingerprint(const std::string& bytes);

}  // namespace ag::dist
