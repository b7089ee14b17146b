// check_safetensors: loads one file with ag::load_safetensors and says what
// happened, for scripts/mutate_checkpoints.py (one process per mutant, so a
// crash is counted instead of ending the campaign).
//
//   check_safetensors FILE [ORIGINAL]
//
// With ORIGINAL, FILE is loaded with the demands a checkpoint makes, taken
// from ORIGINAL: each tensor must have the dtype it has there, and floating
// ones finite values. One line on stdout, and the status:
//   0  accepted (and identical to ORIGINAL: names, dtypes, shapes, bytes and metadata)
//   2  accepted, but different from ORIGINAL (the line says where first)
//   3  refused with an ag::Error naming the file
//   4  refused with an error that does not name the file
//   anything else: a crash or a sanitizer finding; 64 for a usage error or an
//   ORIGINAL that does not load
#include <cstdio>
#include <cstring>
#include <map>
#include <string>

#include "core/safetensors.h"

namespace {

// The first difference between two loaded files, or "" if none.
std::string first_difference(const ag::SafetensorsFile& a, const ag::SafetensorsFile& b) {
  if (a.metadata != b.metadata) return "metadata";
  if (a.tensors.size() != b.tensors.size())
    return std::to_string(a.tensors.size()) + " tensors instead of " + std::to_string(b.tensors.size());
  for (size_t i = 0; i < a.tensors.size(); ++i) {
    const ag::Tensor &x = a.tensors[i].tensor, &y = b.tensors[i].tensor;
    const std::string& name = a.tensors[i].name;
    if (name != b.tensors[i].name) return "name of tensor " + std::to_string(i) + ": \"" + name + "\"";
    if (x.shape() != y.shape() || x.dtype() != y.dtype()) return "tensor \"" + name + "\" is " + ag::describe(x);
    if (std::memcmp(x.raw_data(), y.raw_data(), x.numel() * ag::dtype_size(x.dtype())) != 0)
      return "the values of tensor \"" + name + "\"";
  }
  return "";
}

int check(const std::string& path, const std::string& original) {
  ag::SafetensorsFile expected;
  std::map<std::string, ag::TensorRequirements> demands;
  if (!original.empty()) {
    expected = ag::load_safetensors(original);
    for (const ag::NamedTensor& t : expected.tensors)
      demands[t.name] = {.dtype = t.tensor.dtype(), .finite = ag::is_floating(t.tensor.dtype())};
  }
  const ag::RequirementsOf demands_of = [&](const std::string& name) {
    const auto it = demands.find(name);
    return it == demands.end() ? ag::TensorRequirements{} : it->second;
  };

  ag::SafetensorsFile loaded;
  try {
    loaded = ag::load_safetensors(path, demands_of);
  } catch (const ag::Error& e) {
    const std::string message = e.what();
    std::printf("refused: %s\n", message.c_str());
    return message.find(path) != std::string::npos ? 3 : 4;
  }
  const std::string difference = original.empty() ? "" : first_difference(loaded, expected);
  if (!difference.empty()) {
    std::printf("accepted, different: %s\n", difference.c_str());
    return 2;
  }
  std::printf("accepted%s\n", original.empty() ? "" : ", identical");
  return 0;
}

}  // namespace

// A file checker runs no GEMM: it starts once, not again with the CPU's
// settings (core/threads.h). The campaign starts it once per mutant.
extern "C" const bool ag_no_cpu_setup = true;

int main(int argc, char** argv) {
  if (argc < 2 || argc > 3) {
    std::fprintf(stderr, "usage: check_safetensors FILE [ORIGINAL]\n");
    return 64;
  }
  try {
    return check(argv[1], argc == 3 ? argv[2] : "");
  } catch (const ag::Error& e) {  // only ORIGINAL's load gets here
    std::fprintf(stderr, "check_safetensors: the original does not load: %s\n", e.what());
    return 64;
  }
}
