#include "examples/common/program_header.h"

#include "core/threads.h"
#include "cuda/context.h"

namespace ag::cli {

std::string header(const nn::GPTConfig& model, Device device, Precision precision) {
  const std::string where = device == Device::CPU
                                ? "cpu, "
                                : "cuda (" + cuda::describe_device() + "), precision " + name_of(precision) + "; host ";
  return "model: " + nn::describe(model) + "\nruns on: " + where + cpu_runtime_summary();
}

}  // namespace ag::cli
