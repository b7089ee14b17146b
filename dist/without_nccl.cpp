// dist/backends.h's connect_gpus for builds with MPI but without NCCL (no CUDA,
// or no libnccl beside it): CUDA tensors have no collectives.
#include "core/error.h"
#include "dist/backends.h"

namespace ag::dist {

std::unique_ptr<DeviceCollectives> connect_gpus(Communicator&) {
  throw Error("--device cuda on several processes needs NCCL, and attograd was built without it (CMake found no "
              "nccl.h and libnccl beside the CUDA toolkit): run on the CPU, or rebuild where NCCL is installed");
}

}  // namespace ag::dist
