#pragma once
#include <string>

#include "core/dtype.h"
#include "core/options.h"
#include "examples/char_lm/grads_options.h"
#include "nn/gpt.h"

namespace ag::char_lm {

// char_lm grads' options, from the table in examples/char_lm/grads_options.h.
struct GradsOptions {
  AG_DECLARE_OPTIONS(AG_CHAR_LM_GRADS_OPTIONS)
};

// Loads a model (config from the file's __metadata__; `settings` gives the
// attention implementation) and a batch (tensors `idx` and `targets`, int64 or
// int32, [B, T]), runs forward and backward once in float64 on `device`, and
// writes `loss` (F64, shape []) and every parameter's gradient under the
// parameter's own name (F64: nothing rounded away) to `out_path`. Returns the loss.
double compute_grads(const std::string& weights_path, const std::string& batch_path, const std::string& out_path,
                     Device device = Device::CPU, const nn::GPTConfig& settings = {});

}  // namespace ag::char_lm
