// Options every example program takes (core/options.h explains the columns).
#pragma once

//  kind   type     name     default  min  max   help
#define AG_PROCESS_OPTIONS(X) \
  X(Local, int64_t, threads, 0,       0,   4096, "CPU threads for OpenMP and OpenBLAS (0: the CPUs this process is bound to (taskset, mpirun); unbound, the machine's CPUs shared among the processes mpirun started on it; a lone unbound process counts only the CPUs idle over 60 ms at its start, so a job already running elsewhere keeps its cores, while one started later is not noticed)")
