// char_lm mask's options, one line each (core/options.h explains the columns).
#pragma once

//  kind   type     name   default  min  max      help
#define AG_CHAR_LM_MASK_OPTIONS(X) \
  X(Local, int64_t, layer, 0,       0,   1023,    "the layer whose mask to print (random blocks differ by layer)") \
  X(Local, int64_t, head,  0,       0,   1023,    "the head whose mask to print (random blocks differ by head)")
