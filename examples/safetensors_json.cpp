// safetensors_json: what attograd reads from a safetensors file, printed as
// JSON, so that another implementation can be held against it
// (scripts/safetensors_roundtrip.py holds it against the reference one).
//
//   safetensors_json FILE [--resave OUT]
//
// Prints one JSON object on stdout:
//   {"metadata": {KEY: VALUE, ...},
//    "tensors": [{"name": ..., "dtype": "float32", "shape": [2, 3], "hex": "0000803f..."}, ...]}
// with the tensors in the order ag::load_safetensors gives them (their bytes'
// order in the file), dtype attograd's (float32, float64, int64: NumPy's names
// too) and hex the tensor's bytes as loaded, little-endian, so that values
// compare exactly (-0 and NaN payloads included). --resave OUT also writes what
// was loaded to OUT with ag::save_safetensors, metadata included. A file
// attograd refuses gives its message on stderr and status 1.
#include <cstdio>
#include <nlohmann/json.hpp>
#include <string>

#include "core/safetensors.h"

namespace {

std::string hex_of(const ag::Tensor& t) {
  static constexpr char kDigits[] = "0123456789abcdef";
  const auto* bytes = static_cast<const unsigned char*>(t.raw_data());
  std::string hex;
  for (size_t i = 0; i < t.numel() * ag::dtype_size(t.dtype()); ++i) {
    hex += kDigits[bytes[i] >> 4];
    hex += kDigits[bytes[i] & 0xf];
  }
  return hex;
}

nlohmann::ordered_json to_json(const ag::SafetensorsFile& file) {
  nlohmann::ordered_json tensors = nlohmann::ordered_json::array();
  for (const ag::NamedTensor& t : file.tensors)
    tensors.push_back({{"name", t.name},
                       {"dtype", ag::dtype_name(t.tensor.dtype())},
                       {"shape", t.tensor.shape()},
                       {"hex", hex_of(t.tensor)}});
  return {{"metadata", file.metadata}, {"tensors", tensors}};
}

}  // namespace

int main(int argc, char** argv) {
  const bool resave = argc == 4 && std::string(argv[2]) == "--resave";
  if (argc != 2 && !resave) {
    std::fprintf(stderr, "usage: safetensors_json FILE [--resave OUT]\n");
    return 2;
  }
  try {
    const ag::SafetensorsFile file = ag::load_safetensors(argv[1]);
    if (resave) ag::save_safetensors(argv[3], file.tensors, file.metadata);
    std::printf("%s\n", to_json(file).dump().c_str());
    return 0;
  } catch (const ag::Error& e) {
    std::fprintf(stderr, "%s\n", e.what());
    return 1;
  }
}
