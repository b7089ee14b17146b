// The arithmetic a training run's matrix products use (--precision): one enum,
// named once, read by the training options (optim/train_options.h) and by the
// CUDA context's GEMM switch (cuda/context.h). docs/backprop.md, "Mixed
// precision", derives what each costs in accuracy.
#pragma once
#include <utility>

#include "core/enum_names.h"

namespace ag {

enum class Precision {
  FP32,  // float32 everywhere: products and sums to float32's 24-bit significand
  TF32,  // float32 tensors; CUDA GEMMs round their inputs to TF32 (11-bit significand), accumulate in float32
  BF16,  // mixed precision: float32 weights, optimizer state and reductions; CUDA GEMMs round their inputs
         // to bfloat16 (8-bit significand) and accumulate in float32 (llm.c, PyTorch autocast)
};
template <> struct EnumNames<Precision> {
  static constexpr std::pair<Precision, const char*> values[] = {
      {Precision::FP32, "fp32"}, {Precision::TF32, "tf32"}, {Precision::BF16, "bf16"}};
};

}  // namespace ag
