#include "dist/communicator.h"

#include <cstdlib>
#include <cstring>
#include <nlohmann/json.hpp>

#include "core/dispatch.h"
#include "dist/backends.h"

namespace ag::dist {

void check_exchange(const Communicator& comm, const Tensor& send, int to, const Tensor& receive, int from) {
  AG_CHECK(to >= 0 && to < comm.size() && from >= 0 && from < comm.size(),
           "dist: an exchange with processes " << to << " and " << from << " of " << comm.size());
  AG_CHECK(send.dtype() == receive.dtype() && send.numel() == receive.numel() && send.device() == receive.device(),
           "dist: an exchange sends and receives tensors of one dtype, size and device, not " << describe(send) << " and "
                                                                                                << describe(receive));
}

namespace {
// This process alone: a sum over one process is its own value, and what it
// sends round a ring of one it receives.
class Alone final : public Communicator {
 public:
  std::string describe() const override { return "alone"; }
  void all_reduce_sum(const Tensor&) override {}
  void broadcast(const Tensor&, int) override {}
  void use_device(Device) override {}
  void abort(int) override {}
  std::unique_ptr<Communicator> split(int, int) override { return std::make_unique<Alone>(); }
  Exchange start_exchange(const Tensor& send, int to, const Tensor& receive, int from) override {
    check_exchange(*this, send, to, receive, from);
    Tensor into = receive;
    if (send.raw_data() != receive.raw_data()) kernel::cast(send, into);
    return {};
  }
};

Communicator* made = nullptr;  // world(), once made

// True when an MPI launcher started this process (its environment says so):
// Open MPI's mpirun; MPICH's and Intel's mpiexec (PMI); Slurm's srun and other PMIx launchers.
bool started_by_mpi_launcher() {
  for (const char* variable : {"OMPI_COMM_WORLD_SIZE", "PMI_SIZE", "PMIX_RANK"})
    if (std::getenv(variable)) return true;
  return false;
}
}  // namespace

Communicator& world() {
  static const std::unique_ptr<Communicator> the_world =
      started_by_mpi_launcher() ? start_mpi() : std::unique_ptr<Communicator>(new Alone());
  made = the_world.get();
  return *the_world;
}

void end_run_on_error(int code) {
  if (made) made->abort(code);
}

std::string process_label() {
  if (!made || made->size() == 1) return "";
  return " (rank " + std::to_string(made->rank()) + " of " + std::to_string(made->size()) + ")";
}

int64_t sum(Communicator& comm, int64_t value) {
  const Tensor t = Tensor::from_indices({value}, {1});
  comm.all_reduce_sum(t);
  return t.to_indices()[0];
}

std::string broadcast(Communicator& comm, const std::string& text, int root) {
  const Tensor length = Tensor::from_indices({static_cast<int64_t>(text.size())}, {1});
  comm.broadcast(length, root);
  std::string received(static_cast<size_t>(length.to_indices()[0]), '\0');
  // The bytes travel packed into int64 elements, the last one zero-padded.
  const Tensor packed = Tensor::zeros({static_cast<int64_t>((received.size() + 7) / 8)}, DType::Int64);
  if (comm.rank() == root) std::memcpy(packed.raw_data(), text.data(), text.size());
  comm.broadcast(packed, root);
  std::memcpy(received.data(), packed.raw_data(), received.size());
  return received;
}

void check_same_on_every_process(Communicator& comm, const Metadata& description, const std::string& what) {
  const std::string mine = nlohmann::json(description).dump();
  const Metadata root = nlohmann::json::parse(broadcast(comm, mine, 0)).get<Metadata>();
  std::string differences;
  const auto value_in = [](const Metadata& m, const std::string& key) {
    const auto found = m.find(key);
    return found == m.end() ? std::string("(none)") : found->second;
  };
  Metadata keys = root;
  keys.insert(description.begin(), description.end());
  for (const auto& [key, unused] : keys)
    if (value_in(description, key) != value_in(root, key))
      differences += "\n  " + key + ": " + value_in(description, key) + " here, " + value_in(root, key) + " on rank 0";
  AG_CHECK(differences.empty(), what << ": this process was given another run than rank 0 (every "
                                        "process of a run needs the same options and data):"
                                     << differences);
}

uint64_t fingerprint(const std::string& bytes) {
  uint64_t hash = 0xcbf29ce484222325ull;
  for (const char c : bytes) hash = (hash ^ static_cast<unsigned char>(c)) * 0x100000001b3ull;
  return hash;
}

}  // namespace ag::dist
