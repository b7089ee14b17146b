// Writing a file so that no reader sees half of it (char_lm's SVGs, reports and
// loss chart; the lab's results and report).
#pragma once
#include <string>

namespace ag {

// `text` written to `path`, replacing it in one rename: a browser reloading it never reads half a file.
void replace_file(const std::string& path, const std::string& text);

}  // namespace ag
