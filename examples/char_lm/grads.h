#pragma once
#include <string>

#include "core/dtype.h"

namespace ag::char_lm {

// Loads a model (config from the file's __metadata__) and a batch (tensors
// `idx` and `targets`, int64 or int32, [B, T]), runs forward and backward once
// in float64 on `device`, and writes `loss` (F64, shape []) and every parameter's gradient
// under the parameter's own name (F32) to `out_path`. Returns the loss.
double compute_grads(const std::string& weights_path, const std::string& batch_path, const std::string& out_path,
                     Device device = Device::CPU);

}  // namespace ag::char_lm
