// The --device option of every char_lm command and of the lab, part of their
// option tables, and the check each makes of it before any work.
#pragma once
#include "core/error.h"
#include "cuda/context.h"

#define AG_DEVICE_OPTION(X) \
  X(Local, Device, device, Device::CPU, 0, 0, "where the model (and in training the optimizer state and batches) live")

namespace ag {
// Throws, saying why, when --device names a device this machine lacks.
inline void require_device(Device device) {
  AG_CHECK(device == Device::CPU || cuda::available(), "--device cuda: " << cuda::describe_device());
}
}  // namespace ag
