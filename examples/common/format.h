// Numbers as the programs print them.
#pragma once
#include <cstdio>
#include <string>

namespace ag {

// `value` through printf's `format` (default: four decimals, as losses are printed).
inline std::string fixed(double value, const char* format = "%.4f") {
  char text[32];
  std::snprintf(text, sizeof text, format, value);
  return text;
}

}  // namespace ag
