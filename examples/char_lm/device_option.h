// The --device option of every char_lm command, part of their option tables.
#pragma once

#define AG_CHAR_LM_DEVICE_OPTION(X) \
  X(Local, Device, device, Device::CPU, 0, 0, "where the model (and in training the optimizer state and batches) live")
