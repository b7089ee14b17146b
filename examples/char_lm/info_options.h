// char_lm info's options, one line each (core/options.h explains the columns).
#pragma once

//  kind   type         name  default  min  max  help
#define AG_CHAR_LM_INFO_OPTIONS(X) \
  X(Local, std::string, ckpt, "",      0,   0,   "a run directory, a ckpt-N/ unit or RUN/best (without it: only what this machine runs)")
