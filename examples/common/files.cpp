#include "examples/common/files.h"

#include <filesystem>
#include <fstream>

#include "core/error.h"

namespace ag {

void replace_file(const std::string& path, const std::string& text) {
  const std::string tmp = path + ".tmp";
  {
    std::ofstream out(tmp, std::ios::binary | std::ios::trunc);
    AG_CHECK(out, "cannot write '" << tmp << "'");
    out << text;
    AG_CHECK(out.flush(), "writing '" << tmp << "' failed");
  }
  std::filesystem::rename(tmp, path);
}

}  // namespace ag
