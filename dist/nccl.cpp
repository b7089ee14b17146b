// dist/backends.h's device collectives over NCCL (it ships with the CUDA
// toolkit): one GPU per process, chosen by the process's rank on its machine (or
// the one GPU CUDA_VISIBLE_DEVICES shows it); MPI only carries NCCL's id from rank
// 0 to the others, once.
#include <nccl.h>

#include <cstdlib>
#include <cstring>

#include "cuda/check.h"
#include "cuda/context.h"
#include "dist/backends.h"

namespace ag::dist {

namespace {
#define AG_NCCL_CHECK(call)                                                                     \
  do {                                                                                          \
    const ncclResult_t ag_status_ = (call);                                                     \
    if (ag_status_ != ncclSuccess)                                                              \
      ::ag::cuda::throw_cuda_error(#call, __FILE__, __LINE__,                                   \
                                   std::string(ncclGetErrorString(ag_status_)) + " " + ncclGetLastError(nullptr)); \
  } while (0)

ncclDataType_t nccl_type(DType dtype) {
  switch (dtype) {
    case DType::Float32: return ncclFloat32;
    case DType::Float64: return ncclFloat64;
    case DType::Int64: return ncclInt64;
  }
  throw Error("NCCL: unknown dtype");
}

cudaStream_t stream() { return static_cast<cudaStream_t>(cuda::stream()); }

class Nccl final : public DeviceCollectives {
 public:
  explicit Nccl(Communicator& host) {
    int gpus = 0;
    AG_CUDA_CHECK(cudaGetDeviceCount(&gpus));
    // One GPU per process: the process's local rank among the machine's GPUs, or, where a launcher
    // shows each process one GPU through CUDA_VISIBLE_DEVICES (Slurm's --gpus-per-task=1), that one
    // (the same one for two processes is refused below).
    const bool shown_one = gpus == 1 && std::getenv("CUDA_VISIBLE_DEVICES") != nullptr;
    AG_CHECK(shown_one || host.local_size() <= gpus,
             "--device cuda: " << host.local_size() << " processes on this machine share " << gpus
                               << " GPU(s); start at most one process per GPU");
    // Before any other CUDA call of this process: the stream, the allocator
    // and cuBLAS (cuda/context.cu) are then made on this GPU.
    AG_CUDA_CHECK(cudaSetDevice(shown_one ? 0 : host.local_rank()));
    refuse_shared_gpus(host);

    ncclUniqueId id;
    static_assert(sizeof id % 8 == 0, "ncclUniqueId travels as int64 elements");
    const Tensor packed = Tensor::zeros({static_cast<int64_t>(sizeof id / 8)}, DType::Int64);
    if (host.rank() == 0) {
      AG_NCCL_CHECK(ncclGetUniqueId(&id));
      std::memcpy(packed.raw_data(), &id, sizeof id);
    }
    host.broadcast(packed, 0);
    std::memcpy(&id, packed.raw_data(), sizeof id);
    AG_NCCL_CHECK(ncclCommInitRank(&comm_, host.size(), id, host.rank()));
  }
  explicit Nccl(ncclComm_t comm) : comm_(comm) {}

  // Two processes of the run on one GPU (a CUDA_VISIBLE_DEVICES exported alike to all of them, say)
  // would fail later, in NCCL's init, with a message of its own: each process puts its GPU's UUID
  // in its slot of a table summed over the processes, and every process reads the same table, so
  // all refuse alike.
  static void refuse_shared_gpus(Communicator& host) {
    int device = 0;
    AG_CUDA_CHECK(cudaGetDevice(&device));
    cudaDeviceProp properties{};
    AG_CUDA_CHECK(cudaGetDeviceProperties(&properties, device));
    static_assert(sizeof properties.uuid.bytes == 16, "a GPU's UUID travels as two int64 elements");
    const int P = host.size();
    const Tensor uuids = Tensor::zeros({P, 2}, DType::Int64);
    auto* slot = static_cast<int64_t*>(uuids.raw_data());
    std::memcpy(slot + 2 * host.rank(), properties.uuid.bytes, 16);
    host.all_reduce_sum(uuids);  // each slot has one writer: the sum is its value
    for (int a = 1; a < P; ++a)
      for (int b = 0; b < a; ++b)
        AG_CHECK(slot[2 * a] != slot[2 * b] || slot[2 * a + 1] != slot[2 * b + 1],
                 "--device cuda: processes " << b << " and " << a << " of this run were given the same GPU "
                     "(CUDA_VISIBLE_DEVICES showing each the same one?); start at most one process per GPU");
  }
  // Like the CUDA context, never destroyed: the process's exit releases it, and
  // nothing calls into NCCL or CUDA while they shut down.

  void all_reduce_sum(const Tensor& t) override {
    AG_NCCL_CHECK(ncclAllReduce(t.raw_data(), t.raw_data(), static_cast<size_t>(t.numel()), nccl_type(t.dtype()),
                                ncclSum, comm_, stream()));
  }

  void broadcast(const Tensor& t, int root) override {
    AG_NCCL_CHECK(ncclBroadcast(t.raw_data(), t.raw_data(), static_cast<size_t>(t.numel()), nccl_type(t.dtype()), root,
                                comm_, stream()));
  }

  void exchange(const Tensor& send, int to, const Tensor& receive, int from) override {
    const size_t count = static_cast<size_t>(send.numel());
    AG_NCCL_CHECK(ncclGroupStart());
    // The group ends however the calls inside it do: left open, it would hold this thread's later
    // NCCL calls unlaunched.
    struct EndGroup {
      bool ended = false;
      ~EndGroup() {
        if (!ended) ncclGroupEnd();
      }
    } group;
    AG_NCCL_CHECK(ncclSend(send.raw_data(), count, nccl_type(send.dtype()), to, comm_, stream()));
    AG_NCCL_CHECK(ncclRecv(receive.raw_data(), count, nccl_type(receive.dtype()), from, comm_, stream()));
    group.ended = true;
    AG_NCCL_CHECK(ncclGroupEnd());
  }

  std::unique_ptr<DeviceCollectives> split(int color, int key) override {
    ncclComm_t group = nullptr;
    AG_NCCL_CHECK(ncclCommSplit(comm_, color, key, &group, nullptr));
    return std::make_unique<Nccl>(group);
  }

 private:
  ncclComm_t comm_ = nullptr;
};
}  // namespace

std::unique_ptr<DeviceCollectives> connect_gpus(Communicator& host) { return std::make_unique<Nccl>(host); }

}  // namespace ag::dist
