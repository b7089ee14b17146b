// What every example program prints first: the model and where it runs. Kept
// apart from command_line.h, so the code that prints it need not parse CLI11.
#pragma once
#include <string>

#include "core/precision.h"
#include "core/tensor.h"
#include "nn/gpt.h"

namespace ag::cli {

// A program's header, two lines: "model: " what the model computes (nn::describe),
// "runs on: " the device, the CPU threads and OpenBLAS's kernel set (with the
// note, when OPENBLAS_CORETYPE names older kernels than the CPU runs). On CUDA
// the device is followed by the GEMMs' --precision (a training run's; the
// other commands run at fp32), as optim/train_options.h names it.
std::string header(const nn::GPTConfig& model, Device device, Precision precision = Precision::FP32);

}  // namespace ag::cli
