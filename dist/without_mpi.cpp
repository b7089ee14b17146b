// dist/backends.h for builds without MPI: world() is this process alone, and a
// launcher's processes would each train a model of their own, so starting
// under one is an error.
#include "core/error.h"
#include "dist/backends.h"

namespace ag::dist {

std::unique_ptr<Communicator> start_mpi() {
  throw Error("an MPI launcher (mpirun) started this process, but attograd was built without MPI (CMake did not find "
              "it): install libopenmpi-dev (scripts/deps.sh does) and rebuild, or run one process without mpirun");
}

}  // namespace ag::dist
