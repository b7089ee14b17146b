// ag::Error: the one exception type attograd throws. Every message names the op
// (or function) first, then the shapes or values involved, then what is wrong.
#pragma once
#include <sstream>
#include <stdexcept>
#include <string>

namespace ag {

class Error : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

}  // namespace ag

// AG_CHECK(cond, "matmul: " << a << " x " << b << ": inner dims differ");
// Guards user input in every build type (unlike assert, which Release removes).
#define AG_CHECK(cond, message)                  \
  do {                                           \
    if (!(cond)) {                               \
      std::ostringstream ag_check_stream_;       \
      ag_check_stream_ << message;               \
      throw ::ag::Error(ag_check_stream_.str()); \
    }                                            \
  } while (0)
