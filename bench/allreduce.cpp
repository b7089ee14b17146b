// The all-reduce of a data-parallel step alone: dist::world().all_reduce_sum of
// a float32 CPU buffer of N elements (a model's flat gradient buffer), timed on
// rank 0 after the processes have met (a one-element all-reduce), so what is
// measured is the transfer and the sum, not waiting for a slower process.
// Prints the median of ROUNDS. bench/data_parallel_cpu.sh runs it.
//
//   mpirun -np 2 ./build/bench_allreduce N [ROUNDS]
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <vector>

#include "dist/communicator.h"
#include "examples/common/timing.h"  // median

int main(int argc, char** argv) {
  if (argc < 2) {
    std::fprintf(stderr, "usage: mpirun -np P bench_allreduce ELEMENTS [ROUNDS]\n");
    return 2;
  }
  const int64_t elements = std::atoll(argv[1]);
  const int rounds = argc > 2 ? std::atoi(argv[2]) : 50;
  ag::dist::Communicator& comm = ag::dist::world();
  const ag::Tensor buffer = ag::Tensor::ones({elements});
  const ag::Tensor meet = ag::Tensor::zeros({1});
  std::vector<double> ms;
  for (int i = 0; i < rounds; ++i) {
    comm.all_reduce_sum(meet);
    const auto start = std::chrono::steady_clock::now();
    comm.all_reduce_sum(buffer);
    ms.push_back(std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - start).count());
  }
  if (comm.rank() == 0)
    std::printf("all-reduce of %lld float32 over %d processes (%s): median %.3f ms\n", static_cast<long long>(elements),
                comm.size(), comm.describe().c_str(), ag::median(ms));
  return 0;
}
