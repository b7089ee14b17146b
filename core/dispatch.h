// The kernel entry points: the one place that chooses the CPU or the CUDA
// implementation of each kernel (core/dispatch.cpp). Ops and their backward
// closures call these, never cpu:: or cuda:: directly, so a derivative written
// once serves every device.
//
// core/kernels.inc lists the kernels with their contracts, and is included
// here, in core/cpu/cpu.h and in cuda/cuda.h, so the three declare one list
// (and core/dispatch.cpp generates these entry points from it); their argument
// types are core/kernel_args.h's, which all three include.
#pragma once
#include "core/kernel_args.h"

namespace ag::kernel {

#include "core/kernels.inc"

}  // namespace ag::kernel
