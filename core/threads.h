// The CPU thread count, for our OpenMP loops and OpenBLAS alike (OpenBLAS's
// OpenMP build keeps its own count: omp_set_num_threads alone does not reach it).
#pragma once

namespace ag {

void set_num_threads(int n);
int num_threads();

}  // namespace ag
