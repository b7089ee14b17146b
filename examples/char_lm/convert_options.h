// char_lm convert's options, one line each (core/options.h explains the columns).
#pragma once

//  kind   type         name       default  min  max   help
#define AG_CHAR_LM_CONVERT_OPTIONS(X) \
  X(Local, std::string, ckpt,      "out",   0,   0,    "the run (or unit) to convert: its newest complete checkpoint") \
  X(Local, int64_t,     n_kv_head, 1,       1,   1024, "key/value heads of the converted model (a divisor of the source's)") \
  X(Local, std::string, out,       "",      0,   0,    "a new run directory for the converted checkpoint (continue it with train --resume --out)") \
  X(Local, bool,        overwrite, false,   0,   0,    "write --out even if it holds a run (which is lost)")
