// What device code that a host build also compiles (the tests run it on host fibers:
// tests/cuda_on_host.h) writes instead of the two CUDA spellings such a build cannot take:
// AG_UNROLL for `#pragma unroll` (g++ warns on an unknown pragma), AG_NOINLINE for
// `__noinline__` (which glibc's headers use as an attribute name, so a host build may not
// define it). The CUDA keywords (__device__, __global__, __shared__, …) and intrinsics the
// host build defines itself.
#pragma once

#ifdef __CUDACC__
#define AG_UNROLL _Pragma("unroll")
#define AG_NOINLINE __noinline__
#else
#define AG_UNROLL
#define AG_NOINLINE __attribute__((noinline))
#endif
