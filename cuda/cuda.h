// CUDA kernels: one .cu file per family, with the basenames of core/cpu/ (the
// CPU kernel beside each is its reference, and tests/test_cuda.cpp compares
// them). The list and the contracts are core/kernels.inc's, as for ag::cpu::;
// only the dispatcher calls these. Every tensor argument lives on the device;
// work is queued on cuda::stream() and the functions return without waiting,
// except where a result or an error must reach the host: cross_entropy and
// embedding (their index checks), sum_of_squares (its result), and the copies.
// Builds without nvcc get cuda/disabled.cpp, whose stubs, generated from the
// same list, throw "built without CUDA".
#pragma once
#include "core/kernel_args.h"

namespace ag::cuda {

using kernel::AdamHyper;
using kernel::BinaryOp;
using kernel::GeluSaved;
using kernel::GemmShape;
using kernel::ReduceDims;
using kernel::SgdHyper;
using kernel::StridedView;
using kernel::UnaryOp;

#include "core/kernels.inc"

}  // namespace ag::cuda
