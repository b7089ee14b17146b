// The kernel list, core/kernels.inc: every entry has a definition for each
// device in the files its family names, and passes its parameters on in order.
//
// The linker already refuses a kernel without a cpu:: or cuda:: definition
// (core/dispatch.cpp references both for every entry), but a build without nvcc
// links cuda/disabled.cpp's generated stubs instead of cuda/*.cu: the first test
// sees a missing CUDA kernel there too, and checks that the family (the
// profiler's first column) is the basename of the files that implement it.
#include <regex>

#include "tests/helpers.h"

// The file's names and using-directives stay its own in a unity build, where the test
// files compile as one translation unit (CMakeLists.txt).
namespace kernels_test {

namespace {

struct KernelEntry {
  std::string family;
  std::string name;
  std::string params;  // "(const Tensor& x, Tensor& y)"
  std::string args;    // "(x, y)"
};

const std::vector<KernelEntry>& kernel_entries() {
#define AG_KERNEL(family, name, params, args) {#family, #name, #params, #args},
  static const std::vector<KernelEntry> entries{
#include "core/kernels.inc"
  };
  return entries;
}

// The comma-separated items of "(a, b<c, d>, e)", without the parentheses and spaces around each.
std::vector<std::string> list_items(std::string list) {
  REQUIRE(list.size() >= 2);
  list = list.substr(1, list.size() - 2);
  std::vector<std::string> items(1);
  int depth = 0;
  for (char c : list) {
    if (c == '<' || c == '(' || c == '[') ++depth;
    if (c == '>' || c == ')' || c == ']') --depth;
    if (c == ',' && depth == 0) items.emplace_back();
    else items.back() += c;
  }
  for (std::string& item : items) item = std::regex_replace(item, std::regex("^\\s+|\\s+$"), "");
  return items;
}

}  // namespace

TEST_CASE("kernels: every core/kernels.inc entry is defined in core/cpu/<family>.cpp and cuda/<family>.cu") {
  REQUIRE(kernel_entries().size() > 30);
  for (const KernelEntry& k : kernel_entries()) {
    for (const std::string& file : {"core/cpu/" + k.family + ".cpp", "cuda/" + k.family + ".cu"}) {
      INFO("kernel ", k.name, " in ", file);
      const std::string source = ag::test::read_file(std::string(ATTOGRAD_SOURCE_DIR) + "/" + file);
      CHECK(source.find("\nvoid " + k.name + "(") != std::string::npos);
    }
  }
}

TEST_CASE("kernels: each entry's arguments are its parameters' names, in order") {
  // A swapped pair of same-typed arguments would still compile in the forwarder.
  for (const KernelEntry& k : kernel_entries()) {
    INFO("kernel ", k.name, ": ", k.params, " forwarded as ", k.args);
    std::vector<std::string> names;
    for (const std::string& param : list_items(k.params)) {
      std::smatch name;
      REQUIRE(std::regex_search(param, name, std::regex("(\\w+)$")));
      names.push_back(name[1]);
    }
    CHECK(names == list_items(k.args));
  }
}

}  // namespace kernels_test
