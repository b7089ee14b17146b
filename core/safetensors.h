// Checkpoints in the safetensors format (https://github.com/huggingface/safetensors),
// so that weights move between attograd and PyTorch/NumPy without pickle.
//
// Layout of a file:
//   [8 bytes]  N, the header length, a little-endian uint64
//   [N bytes]  a JSON object, padded with spaces to a multiple of 8 bytes:
//                {"__metadata__": {"step": "1000", ...},
//                 "blocks.0.attn.w_q.weight": {"dtype": "F32", "shape": [C, C],
//                                              "data_offsets": [begin, end]}, ...}
//   [rest]     the tensors' raw little-endian bytes; [begin, end) counts from the
//              first byte after the header. Shape [] is a scalar (one element).
//
// attograd writes F32, F64 and I64. It reads those, and widens three narrower
// dtypes that other tools write, exactly: I32 (token ids) to Int64, F16 and
// BF16 (half-precision weights) to Float32, every value of which is a float.
// Any other dtype is refused.
#pragma once
#include <functional>
#include <map>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "core/tensor.h"

namespace ag {

using Metadata = std::map<std::string, std::string>;

// Writes `tensors` (any device; copied to the CPU) in the given order, with
// `metadata` under "__metadata__". Atomic: the bytes go to PATH.tmp-<pid>, are
// flushed to disk, then renamed over PATH, so a crash mid-write leaves the old
// file (or none), never a broken one. Throws ag::Error naming the file on any
// I/O failure, and on duplicate or reserved names.
void save_safetensors(const std::string& path, const std::vector<NamedTensor>& tensors,
                      const Metadata& metadata = {});

struct SafetensorsFile {
  std::vector<NamedTensor> tensors;  // CPU tensors, in the order of their bytes in the file
  Metadata metadata;
  std::string path;  // where it was loaded from, for error messages

  // The tensor called `name`; throws ag::Error naming the file and `name` if absent.
  const Tensor& at(const std::string& name) const;
  bool contains(const std::string& name) const;
};

// What a caller demands of one tensor beyond a well-formed file: a checkpoint
// knows its parameters are float32 and finite, the file format does not.
struct TensorRequirements {
  std::optional<DType> dtype;  // the dtype it must load as (I32 on disk loads as Int64, F16 and BF16 as Float32)
  bool finite = false;         // no NaN or ±Inf among its elements
};
// The requirements of the tensor called `name`; {} demands nothing.
using RequirementsOf = std::function<TensorRequirements(const std::string& name)>;

// Reads the whole file, treating it as untrusted. A file that is not exactly a
// safetensors file gives an ag::Error naming the file and the problem, never a
// crash or an allocation out of proportion to the file (the loaded tensors take
// at most twice its bytes, a widened dtype's share): missing or truncated; a header
// over 100 MB, nested deeper than a header is, not JSON, or with a key twice;
// an unknown dtype; offsets that disagree with the shape or do not tile the data
// region exactly (sorted, contiguous, no overlap, no hole, no trailing byte).
// `requirements` adds the caller's demands, checked for every tensor: a wrong
// dtype before anything is read, non-finite values as they are read.
SafetensorsFile load_safetensors(const std::string& path, const RequirementsOf& requirements = {});
// The same for a file's bytes already in memory; `name` stands for the file in
// the messages and in SafetensorsFile::path. The tensors are copies: `bytes`
// need not outlive the call. (The loader's fuzzer calls this: fuzz/load_safetensors.cpp.)
SafetensorsFile load_safetensors_from_memory(std::string_view bytes, const std::string& name,
                                             const RequirementsOf& requirements = {});

}  // namespace ag
