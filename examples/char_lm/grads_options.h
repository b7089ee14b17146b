// char_lm grads' options, one line each (core/options.h explains the columns).
#pragma once
#include "examples/common/device_option.h"

//  kind   type         name     default  min  max  help
#define AG_CHAR_LM_GRADS_OPTIONS(X) \
  X(Local, std::string, weights, "",      0,   0,   "model weights with the model's options in __metadata__ (e.g. a checkpoint's model.safetensors)") \
  X(Local, std::string, batch,   "",      0,   0,   "tensors idx and targets, int64 or int32 [B, T]") \
  X(Local, std::string, out,     "",      0,   0,   "where to write the loss and the gradients") \
  AG_DEVICE_OPTION(X)
