// dist/communicator.h over MPI (Open MPI from Debian; any MPI-3 library works):
// MPI_COMM_WORLD is the run, and split groups of it communicators of their
// own; the processes of one on one machine share a node-local communicator
// (MPI_Comm_split_type) that gives the local rank. CPU tensors go
// through MPI; CUDA tensors through NCCL (dist/backends.h: connect_gpus).
#include <mpi.h>

#include <algorithm>
#include <chrono>
#include <climits>
#include <memory>
#include <thread>
#include <vector>

#include "core/error.h"
#include "dist/backends.h"

namespace ag::dist {

namespace {
[[noreturn]] void throw_mpi_error(const char* call, const char* file, int line, int status) {
  char text[MPI_MAX_ERROR_STRING];
  int length = 0;
  MPI_Error_string(status, text, &length);
  throw Error(std::string(call) + " failed at " + file + ":" + std::to_string(line) + ": " + std::string(text, length));
}

// MPI_COMM_WORLD returns errors (set below) instead of aborting, so each one
// becomes an ag::Error naming the call, like AG_CUDA_CHECK.
#define AG_MPI_CHECK(call)                                                          \
  do {                                                                              \
    const int ag_status_ = (call);                                                  \
    if (ag_status_ != MPI_SUCCESS) throw_mpi_error(#call, __FILE__, __LINE__, ag_status_); \
  } while (0)

MPI_Datatype mpi_type(DType dtype) {
  switch (dtype) {
    case DType::Float32: return MPI_FLOAT;
    case DType::Float64: return MPI_DOUBLE;
    case DType::Int64: return MPI_INT64_T;
  }
  throw Error("MPI: unknown dtype");
}

// Calls collective(pointer, count) over `t` in pieces of at most INT_MAX
// elements (MPI counts are ints).
template <class Collective> void in_pieces(const Tensor& t, Collective&& collective) {
  char* data = static_cast<char*>(t.raw_data());
  const size_t element = dtype_size(t.dtype());
  for (int64_t done = 0; done < t.numel();) {
    const int count = static_cast<int>(std::min<int64_t>(t.numel() - done, INT_MAX));
    collective(data + static_cast<size_t>(done) * element, count);
    done += count;
  }
}

// Adds the wall time of its scope to a communicator's collective_ms.
class CollectiveTimer {
 public:
  explicit CollectiveTimer(double& total_ms) : total_ms_(total_ms) {}
  ~CollectiveTimer() {
    total_ms_ += std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - start_).count();
  }
  CollectiveTimer(const CollectiveTimer&) = delete;
  CollectiveTimer& operator=(const CollectiveTimer&) = delete;

 private:
  double& total_ms_;
  const std::chrono::steady_clock::time_point start_ = std::chrono::steady_clock::now();
};

class MpiCommunicator final : public Communicator {
 public:
  // The run: MPI_COMM_WORLD.
  MpiCommunicator() {
    // Only the main thread calls MPI (OpenMP threads run kernels only).
    int provided = 0;
    AG_MPI_CHECK(MPI_Init_thread(nullptr, nullptr, MPI_THREAD_FUNNELED, &provided));
    AG_MPI_CHECK(MPI_Comm_set_errhandler(MPI_COMM_WORLD, MPI_ERRORS_RETURN));
    read_ranks();
  }
  // A group split from another (split), its collectives on `comm` alone.
  MpiCommunicator(MPI_Comm comm, std::unique_ptr<DeviceCollectives> gpus)
      : comm_(comm), gpus_(std::move(gpus)), owns_comm_(true) {
    read_ranks();
  }
  // Every process gets here at its normal end (the error path aborts instead);
  // the groups end before the run (world() outlives them).
  ~MpiCommunicator() override {
    if (owns_comm_)
      MPI_Comm_free(&comm_);
    else
      MPI_Finalize();
  }

  std::string describe() const override { return gpus_ ? "MPI, NCCL" : "MPI"; }

  void all_reduce_sum(const Tensor& t) override {
    const CollectiveTimer timer(collective_ms_);
    if (t.device() == Device::CUDA) return gpus().all_reduce_sum(t);
    in_pieces(t, [&](void* data, int count) {
      AG_MPI_CHECK(MPI_Allreduce(MPI_IN_PLACE, data, count, mpi_type(t.dtype()), MPI_SUM, comm_));
    });
  }

  void broadcast(const Tensor& t, int root) override {
    const CollectiveTimer timer(collective_ms_);
    if (t.device() == Device::CUDA) return gpus().broadcast(t, root);
    in_pieces(t, [&](void* data, int count) { AG_MPI_CHECK(MPI_Bcast(data, count, mpi_type(t.dtype()), root, comm_)); });
  }

  void use_device(Device device) override {
    if (device != Device::CUDA || gpus_) return;
    AG_CHECK(!owns_comm_, "dist: use_device(Device::CUDA) on a split group: call it on the run before splitting");
    gpus_ = connect_gpus(*this);
  }

  // A check every process makes alike (the grid, the block) fails on all of them, each printing why;
  // MPI_Abort from the first would kill the others before they print. So the failing processes meet
  // in a non-blocking barrier first, which completes once all have failed; a process still working
  // (or waiting in another collective) never joins it, and the abort comes after kAbortGrace.
  void abort(int code) override {
    constexpr auto kAbortGrace = std::chrono::seconds(5);
    MPI_Request all_failed;
    if (MPI_Ibarrier(MPI_COMM_WORLD, &all_failed) == MPI_SUCCESS) {
      const auto deadline = std::chrono::steady_clock::now() + kAbortGrace;
      int done = 0;
      while (MPI_Test(&all_failed, &done, MPI_STATUS_IGNORE) == MPI_SUCCESS && !done &&
             std::chrono::steady_clock::now() < deadline)
        std::this_thread::sleep_for(std::chrono::milliseconds(10));
    }
    MPI_Abort(MPI_COMM_WORLD, code);
  }

  std::unique_ptr<Communicator> split(int color, int key) override {
    const CollectiveTimer timer(collective_ms_);
    MPI_Comm group;
    AG_MPI_CHECK(MPI_Comm_split(comm_, color, key, &group));
    AG_MPI_CHECK(MPI_Comm_set_errhandler(group, MPI_ERRORS_RETURN));
    return std::make_unique<MpiCommunicator>(group, gpus_ ? gpus_->split(color, key) : nullptr);
  }

  Exchange start_exchange(const Tensor& send, int to, const Tensor& receive, int from) override {
    check_exchange(*this, send, to, receive, from);
    if (send.device() == Device::CUDA) {
      gpus().exchange(send, to, receive, from);
      return {};
    }
    auto requests = std::make_shared<std::vector<MPI_Request>>();
    const MPI_Datatype type = mpi_type(send.dtype());
    {
      const CollectiveTimer timer(collective_ms_);
      in_pieces(receive, [&](void* data, int count) {
        AG_MPI_CHECK(MPI_Irecv(data, count, type, from, kExchangeTag, comm_, &requests->emplace_back()));
      });
      in_pieces(send, [&](void* data, int count) {
        AG_MPI_CHECK(MPI_Isend(data, count, type, to, kExchangeTag, comm_, &requests->emplace_back()));
      });
    }
    return Exchange([this, requests] {
      const CollectiveTimer timer(collective_ms_);
      AG_MPI_CHECK(MPI_Waitall(static_cast<int>(requests->size()), requests->data(), MPI_STATUSES_IGNORE));
    });
  }

 private:
  static constexpr int kExchangeTag = 1;

  void read_ranks() {
    AG_MPI_CHECK(MPI_Comm_rank(comm_, &rank_));
    AG_MPI_CHECK(MPI_Comm_size(comm_, &size_));
    MPI_Comm machine;
    AG_MPI_CHECK(MPI_Comm_split_type(comm_, MPI_COMM_TYPE_SHARED, rank_, MPI_INFO_NULL, &machine));
    AG_MPI_CHECK(MPI_Comm_rank(machine, &local_rank_));
    AG_MPI_CHECK(MPI_Comm_size(machine, &local_size_));
    AG_MPI_CHECK(MPI_Comm_free(&machine));
  }

  DeviceCollectives& gpus() {
    AG_CHECK(gpus_, "dist: a collective on a CUDA tensor before use_device(Device::CUDA)");
    return *gpus_;
  }

  MPI_Comm comm_ = MPI_COMM_WORLD;
  std::unique_ptr<DeviceCollectives> gpus_;
  bool owns_comm_ = false;  // a split group's, freed with it; the world's is MPI's
};
}  // namespace

std::unique_ptr<Communicator> start_mpi() { return std::make_unique<MpiCommunicator>(); }

}  // namespace ag::dist
