// Options every example program takes (core/options.h explains the columns).
#pragma once

//  kind   type     name     default  min  max   help
#define AG_PROCESS_OPTIONS(X) \
  X(Local, int64_t, threads, 0,       0,   4096, "CPU threads for OpenMP and OpenBLAS (0: of the CPUs this process may run on (taskset, mpirun's binding), those idle over 60 ms at its start, so a job already running keeps its cores, one started later is not noticed; processes mpirun started on this machine take their bound CPUs, or unbound share the machine's)")
