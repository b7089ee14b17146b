// Options every example program takes (core/options.h explains the columns).
#pragma once

//  kind   type     name     default  min  max   help
#define AG_PROCESS_OPTIONS(X) \
  X(Local, int64_t, threads, 0,       0,   4096, "CPU threads for OpenMP and OpenBLAS (0: the cores the process is bound to, else all, shared among the processes mpirun starts on the machine; on a busy machine, the cores that are free)")
