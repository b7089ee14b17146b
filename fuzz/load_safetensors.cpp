// libFuzzer target for ag::load_safetensors, the loader every checkpoint goes
// through. Run it with scripts/fuzz.sh (seeds from fuzz/make_seeds.py, tokens
// from fuzz/safetensors.dict).
//
// Each input is a file's bytes, loaded twice by load_safetensors_from_memory,
// which checks and parses them as load_safetensors does a file's (one function,
// parse_file in core/safetensors.cpp; only where the bytes are read from differs,
// which no byte of the input decides): as is, and with the demands a
// checkpoint makes (float32 and finite weights, int64 counters). Through a file
// (a memfd opened by its /proc path) a quarter of the fuzzer's time was the
// kernel's (docs/performance.md, issue 45's section). What must
// hold, beyond what ASan and UBSan watch (no memory error, leak or undefined
// behaviour, and no allocation larger than libFuzzer's -rss_limit_mb):
//   - the loader throws nothing but ag::Error, and its message names the file;
//   - loading with demands succeeds only where loading without them does, and
//     then gives the same tensors.
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <string_view>

#include "core/safetensors.h"

namespace {

// What the messages call the input: each must name it, as a file's name the file.
const std::string kName = "fuzz-input.safetensors";

[[noreturn]] void fail(const std::string& what) {
  std::fprintf(stderr, "fuzz_load_safetensors: %s\n", what.c_str());
  std::abort();
}

// A checkpoint's demands: counters are int64, everything else float32 and finite.
ag::TensorRequirements checkpoint_requirements(const std::string& name) {
  if (name == "iter" || name.starts_with("rng.") || name.starts_with("optim.step.")) return {.dtype = ag::DType::Int64};
  return {.dtype = ag::DType::Float32, .finite = true};
}

// Loads the input; false (and `error` set) on an ag::Error, which must name it.
bool load(std::string_view bytes, const ag::RequirementsOf& requirements, ag::SafetensorsFile& file,
          std::string& error) {
  try {
    file = ag::load_safetensors_from_memory(bytes, kName, requirements);
    return true;
  } catch (const ag::Error& e) {
    error = e.what();
    if (error.find(kName) == std::string::npos) fail("an error message does not name the file: " + error);
    return false;
  }
}

bool same_tensor(const ag::Tensor& a, const ag::Tensor& b) {
  return a.shape() == b.shape() && a.dtype() == b.dtype() &&
         std::memcmp(a.raw_data(), b.raw_data(), a.numel() * ag::dtype_size(a.dtype())) == 0;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string_view bytes(reinterpret_cast<const char*>(data), size);
  ag::SafetensorsFile plain, checked;
  std::string error;
  const bool plain_ok = load(bytes, {}, plain, error);
  const bool checked_ok = load(bytes, checkpoint_requirements, checked, error);
  if (checked_ok && !plain_ok) fail("loads with demands but not without them");
  if (!checked_ok) return 0;
  if (checked.tensors.size() != plain.tensors.size() || checked.metadata != plain.metadata)
    fail("demands changed what was loaded");
  for (size_t i = 0; i < plain.tensors.size(); ++i)
    if (checked.tensors[i].name != plain.tensors[i].name || !same_tensor(checked.tensors[i].tensor, plain.tensors[i].tensor))
      fail("demands changed tensor \"" + plain.tensors[i].name + "\"");
  return 0;
}
