// libFuzzer target for ag::load_safetensors, the loader every checkpoint goes
// through. Run it with scripts/fuzz.sh (seeds from fuzz/make_seeds.py, tokens
// from fuzz/safetensors.dict).
//
// Each input is a file's bytes, loaded twice: as is, and with the demands a
// checkpoint makes (float32 and finite weights, int64 counters). What must
// hold, beyond what ASan and UBSan watch (no memory error, leak or undefined
// behaviour, and no allocation larger than libFuzzer's -rss_limit_mb):
//   - the loader throws nothing but ag::Error, and its message names the file;
//   - loading with demands succeeds only where loading without them does, and
//     then gives the same tensors.
#include <sys/mman.h>  // memfd_create
#include <unistd.h>

#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>

#include "core/safetensors.h"

namespace {

// The input as a file, without touching the disk: a memory-backed file that
// the loader opens through /proc like any other path.
const std::string& file_holding(const uint8_t* data, size_t size) {
  static const int fd = memfd_create("fuzz.safetensors", 0);
  static const std::string path = "/proc/self/fd/" + std::to_string(fd);
  if (fd < 0 || ftruncate(fd, 0) != 0 || pwrite(fd, data, size, 0) != static_cast<ssize_t>(size)) {
    std::perror("fuzz_load_safetensors: cannot write the input to a memfd");
    std::abort();
  }
  return path;
}

[[noreturn]] void fail(const std::string& what) {
  std::fprintf(stderr, "fuzz_load_safetensors: %s\n", what.c_str());
  std::abort();
}

// A checkpoint's demands: counters are int64, everything else float32 and finite.
ag::TensorRequirements checkpoint_requirements(const std::string& name) {
  if (name == "iter" || name.starts_with("rng.") || name.starts_with("optim.step.")) return {.dtype = ag::DType::Int64};
  return {.dtype = ag::DType::Float32, .finite = true};
}

// Loads `path`; false (and `error` set) on an ag::Error, which must name the file.
bool load(const std::string& path, const ag::RequirementsOf& requirements, ag::SafetensorsFile& file,
          std::string& error) {
  try {
    file = ag::load_safetensors(path, requirements);
    return true;
  } catch (const ag::Error& e) {
    error = e.what();
    if (error.find(path) == std::string::npos) fail("an error message does not name the file: " + error);
    return false;
  }
}

bool same_tensor(const ag::Tensor& a, const ag::Tensor& b) {
  return a.shape() == b.shape() && a.dtype() == b.dtype() &&
         std::memcmp(a.raw_data(), b.raw_data(), a.numel() * ag::dtype_size(a.dtype())) == 0;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string& path = file_holding(data, size);
  ag::SafetensorsFile plain, checked;
  std::string error;
  const bool plain_ok = load(path, {}, plain, error);
  const bool checked_ok = load(path, checkpoint_requirements, checked, error);
  if (checked_ok && !plain_ok) fail("loads with demands but not without them");
  if (!checked_ok) return 0;
  if (checked.tensors.size() != plain.tensors.size() || checked.metadata != plain.metadata)
    fail("demands changed what was loaded");
  for (size_t i = 0; i < plain.tensors.size(); ++i)
    if (checked.tensors[i].name != plain.tensors[i].name || !same_tensor(checked.tensors[i].tensor, plain.tensors[i].tensor))
      fail("demands changed tensor \"" + plain.tensors[i].name + "\"");
  return 0;
}
