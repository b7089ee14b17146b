// char_lm compare's options, one line each (core/options.h explains the
// columns); the run directories are its positional arguments.
#pragma once

//  kind   type         name  default        min  max  help
#define AG_CHAR_LM_COMPARE_OPTIONS(X) \
  X(Local, std::string, out,  "compare.svg", 0,   0,   "the chart (one SVG)")
