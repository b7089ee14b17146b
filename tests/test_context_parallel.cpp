// Context parallelism (issue 26): one sequence split across processes.
//
// Cases named "context parallel (every process): ..." call collectives. CTest
// runs them alone (one process: a group of one, a ring of one); "context
// parallel: the every-process cases pass on 2 and 4 MPI processes" runs them
// again under mpirun. Without MPI that case prints [SKIP] (CTest: Skipped).
#include <algorithm>
#include <filesystem>
#include <tuple>

#include "core/context_parallel.h"
#include "dist/communicator.h"
#include "tests/helpers.h"

using namespace ag;

TEST_CASE("context parallel: the zigzag split is a permutation of the sequence, and balances the causal work") {
  constexpr int64_t kTile = 16;  // flash's tiles of positions
  for (const int64_t P : {1, 2, 3, 4, 8}) {
    CAPTURE(P);
    const int64_t T = 2 * P * 48;
    std::vector<int> held(static_cast<size_t>(T), 0);
    std::vector<int64_t> tile_pairs;  // per process: the (query tile, key tile) pairs the causal mask leaves visible
    for (int64_t r = 0; r < P; ++r) {
      const ZigzagSplit split(T, P, r);
      REQUIRE(split.local_positions() == T / P);
      for (int64_t i = 0; i < split.local_positions(); ++i) ++held[static_cast<size_t>(split.position(i))];
      CHECK(split.position(0) == r * split.chunk());
      CHECK(split.position(split.local_positions() - 1) == T - r * split.chunk() - 1);
      int64_t pairs = 0;
      for (int64_t i = 0; i < split.local_positions(); i += kTile) pairs += split.position(i) / kTile + 1;
      tile_pairs.push_back(pairs);
    }
    CHECK(held == std::vector<int>(static_cast<size_t>(T), 1));
    CHECK(*std::max_element(tile_pairs.begin(), tile_pairs.end()) == *std::min_element(tile_pairs.begin(), tile_pairs.end()));
  }
  CHECK_THROWS_WITH_AS(ZigzagSplit(100, 4, 0), doctest::Contains("100 positions do not split into 2·P = 8 equal chunks"), Error);
  CHECK_THROWS_WITH_AS(ZigzagSplit(64, 2, 2), doctest::Contains("process 2 of a group of 2"), Error);
}

TEST_CASE("context parallel (every process): split groups the processes by colour, ranked by key") {
  dist::Communicator& world = dist::world();
  const int N = world.size(), r = world.rank();
  // Two groups, even and odd ranks, each ranked in reverse.
  const std::unique_ptr<dist::Communicator> group = world.split(r % 2, -r);
  std::vector<int> members;
  for (int q = r % 2; q < N; q += 2) members.push_back(q);
  CHECK(group->size() == static_cast<int>(members.size()));
  CHECK(group->rank() == static_cast<int>(members.end() - std::find(members.begin(), members.end(), r)) - 1);
  const Tensor t = Tensor::from_vector({static_cast<double>(r + 1)}, {1}, DType::Float64);
  group->all_reduce_sum(t);
  double expected = 0;
  for (int q : members) expected += q + 1;
  CHECK(t.item() == expected);
  const Tensor mine = Tensor::from_vector({static_cast<double>(r + 1)}, {1}, DType::Float64);
  group->broadcast(mine, 0);  // from the group's rank 0: its largest world rank
  CHECK(mine.item() == members.back() + 1);
}

TEST_CASE("context parallel (every process): an exchange round the ring moves each process's tensor to the next") {
  dist::Communicator& comm = dist::world();
  const int N = comm.size(), r = comm.rank(), next = (r + 1) % N, previous = (r + N - 1) % N;
  for (const DType dtype : {DType::Float32, DType::Float64, DType::Int64}) {
    CAPTURE(dtype);
    const Tensor send = Tensor::full({3, 5}, r + 1, dtype);
    const Tensor receive = Tensor::zeros({15}, dtype);
    dist::Exchange exchange = comm.start_exchange(send, next, receive, previous);
    exchange.wait();
    CHECK(receive.to_vector() == std::vector<double>(15, previous + 1));
  }
  // Twice round, the second exchange finished by its destructor; each pass
  // sends what the last one received.
  Tensor held = Tensor::full({4}, r, DType::Float64);
  for (int pass = 0; pass < 2; ++pass) {
    const Tensor arrived = Tensor::zeros({4}, DType::Float64);
    { const dist::Exchange exchange = comm.start_exchange(held, next, arrived, previous); }
    held = arrived;
  }
  CHECK(held.to_vector() == std::vector<double>(4, (r + 2 * N - 2) % N));
  CHECK_THROWS_WITH_AS(comm.start_exchange(held, N, held, previous), doctest::Contains("processes"), Error);
  CHECK_THROWS_WITH_AS(comm.start_exchange(held, next, Tensor::zeros({5}, DType::Float64), previous),
                       doctest::Contains("one dtype, size and device"), Error);
}

TEST_CASE("context parallel: the every-process cases pass on 2 and 4 MPI processes") {
  for (const int processes : {2, 4}) {
    CAPTURE(processes);
    const std::string mpirun = ag::test::mpirun_or_skip(processes);
    if (mpirun.empty()) return;
    const std::string self = std::filesystem::read_symlink("/proc/self/exe").string();
    int status = 0;  // not a structured binding: INFO's lambda cannot capture one in clang 14
    std::string output;
    std::tie(status, output) =
        ag::test::run_command(mpirun + " " + self + " --no-colors=true '--test-case=context parallel (every process)*'");
    INFO(output);
    CHECK(status == 0);
    CHECK(ag::test::occurrences(output, "Status: SUCCESS!") == static_cast<size_t>(processes));  // doctest's summary, once per process
    CHECK(ag::test::occurrences(output, "test cases: 0 ") == 0);
  }
}
