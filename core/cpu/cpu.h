// CPU kernels: plain loops (OpenMP across rows where the work is large enough)
// and OpenBLAS for products, one file per family (core/cpu/<family>.cpp). The
// list and the contracts are core/kernels.inc's; only the dispatcher calls these.
#pragma once
#include "core/kernel_args.h"

namespace ag::cpu {

using kernel::AdamHyper;
using kernel::BinaryOp;
using kernel::GeluSaved;
using kernel::GemmShape;
using kernel::ReduceDims;
using kernel::SgdHyper;
using kernel::StridedView;
using kernel::UnaryOp;

#include "core/kernels.inc"

}  // namespace ag::cpu
