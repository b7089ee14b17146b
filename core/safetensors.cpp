// Reading and writing safetensors files; the format is described in safetensors.h.
//
// The loader treats the file as untrusted: every length and offset is checked
// against the file's real size before anything is allocated or read, so a
// corrupt header gives an ag::Error instead of a crash or a terabyte allocation.
#include "core/safetensors.h"

#include <unistd.h>  // getpid, fsync

#include <algorithm>
#include <bit>
#include <cerrno>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <limits>
#include <nlohmann/json.hpp>
#include <optional>
#include <set>
#include <string_view>
#include <tuple>

#include "core/error.h"

namespace ag {
namespace {

// Tensors are copied byte for byte between memory and the little-endian file.
static_assert(std::endian::native == std::endian::little,
              "safetensors I/O copies raw bytes and assumes a little-endian host");

// ordered_json keeps keys in insertion order, so the header lists the tensors
// in the order the caller gave them (plain json would sort them by name).
using Json = nlohmann::ordered_json;

constexpr const char* kMetadataKey = "__metadata__";
// The reference implementation's limit (N_MAX). A larger length means the file
// is not a safetensors file, and must not turn into an allocation.
constexpr uint64_t kMaxHeaderBytes = 100'000'000;

// IEEE binary16 to binary32. Exact: every half is a float. The exponent is
// rebiased (15 -> 127) and the 10-bit significand moved to the top of the
// 23-bit one; a subnormal half, significand · 2^-24, is a normal float; an
// infinity stays one, and a NaN keeps its sign and payload (quiet bit included).
float float_from_f16(uint16_t h) {
  const uint32_t sign = uint32_t(h & 0x8000u) << 16, exponent = (h >> 10) & 0x1fu, significand = h & 0x3ffu;
  if (exponent == 0x1f) return std::bit_cast<float>(sign | 0x7f800000u | significand << 13);
  if (exponent != 0) return std::bit_cast<float>(sign | (exponent + 127 - 15) << 23 | significand << 13);
  return std::bit_cast<float>(sign | std::bit_cast<uint32_t>(float(significand) * 0x1p-24f));  // 0 or subnormal
}
// bfloat16 is the top half of a float32's bits, so widening is a shift (NaN payloads kept).
float float_from_bf16(uint16_t b) { return std::bit_cast<float>(uint32_t(b) << 16); }
int64_t int64_from_i32(int32_t i) { return i; }

// Converts n elements from their bytes on disk to the loaded type, one by one.
template <class Disk, class Loaded, Loaded (*convert)(Disk)>
void widen(const char* disk, int64_t n, void* loaded) {
  Loaded* out = static_cast<Loaded*>(loaded);
  for (int64_t i = 0; i < n; ++i) {
    Disk d;
    std::memcpy(&d, disk + i * sizeof(Disk), sizeof(Disk));
    out[i] = convert(d);
  }
}

// One dtype as stored on disk, and the attograd dtype it loads as. Narrower
// dtypes are widened exactly, so a file from another tool loads with every
// value it holds: I32 token ids as int64, F16 and BF16 weights as float32.
// Other dtypes (BOOL, U8, F8_E4M3, U64, ...) are refused: a U64 may not fit in
// int64, and booleans and bytes are no tensor attograd computes with.
struct FileDType {
  const char* name;
  size_t size;  // bytes per element on disk
  DType dtype;
  void (*widen)(const char* disk, int64_t n, void* loaded);  // null: the bytes are the loaded dtype's
};
constexpr FileDType kFileDTypes[] = {
    {"F32", 4, DType::Float32, nullptr},
    {"F64", 8, DType::Float64, nullptr},
    {"I64", 8, DType::Int64, nullptr},
    {"I32", 4, DType::Int64, widen<int32_t, int64_t, int64_from_i32>},  // attograd indices are int64
    {"F16", 2, DType::Float32, widen<uint16_t, float, float_from_f16>},
    {"BF16", 2, DType::Float32, widen<uint16_t, float, float_from_bf16>},
};

// "F32, F64, ... and BF16", for the message that refuses any other dtype.
std::string file_dtype_names() {
  std::string names;
  for (size_t i = 0; i < std::size(kFileDTypes); ++i)
    names += (i == 0 ? "" : i + 1 == std::size(kFileDTypes) ? " and " : ", ") + std::string(kFileDTypes[i].name);
  return names;
}

// The file dtype a tensor is written as: the row that stores it unwidened.
const char* file_dtype_name(DType t) {
  for (const FileDType& d : kFileDTypes)
    if (d.dtype == t && !d.widen) return d.name;
  throw Error("save_safetensors: no file dtype stores " + std::string(dtype_name(t)));
}

// --- writing ---------------------------------------------------------------------------------

// The JSON header, padded with spaces to a multiple of 8 bytes as the reference
// implementation does, so the data after it starts 8-byte aligned.
std::string make_header(const std::string& where, const std::vector<NamedTensor>& tensors,
                        const Metadata& metadata) {
  Json header = Json::object();
  if (!metadata.empty()) header[kMetadataKey] = metadata;
  uint64_t offset = 0;
  for (const NamedTensor& nt : tensors) {
    const uint64_t nbytes = nt.tensor.numel() * dtype_size(nt.tensor.dtype());
    header[nt.name] = {{"dtype", file_dtype_name(nt.tensor.dtype())},
                       {"shape", nt.tensor.shape()},
                       {"data_offsets", {offset, offset + nbytes}}};
    offset += nbytes;
  }
  std::string text;
  try {
    text = header.dump();
  } catch (const Json::exception& e) {  // the only failure: a name or value that is not UTF-8
    throw Error(where + "a tensor name or metadata string is not valid UTF-8 (" + e.what() + ")");
  }
  text.append((8 - text.size() % 8) % 8, ' ');
  return text;
}

// Writes the file's bytes to `tmp` and flushes them to disk. The fsync matters:
// without it, after a power cut the rename can reach the disk before the data
// and leave PATH empty.
void write_bytes(const std::string& where, const std::string& tmp, const std::string& header,
                 const std::vector<Tensor>& host) {
  std::FILE* f = std::fopen(tmp.c_str(), "wb");
  AG_CHECK(f, where << "cannot create " << tmp << ": " << std::strerror(errno));
  auto fail = [&](const char* what) {
    const std::string reason = std::strerror(errno);
    std::fclose(f);
    std::remove(tmp.c_str());
    throw Error(where + what + " " + tmp + " failed: " + reason);
  };
  const uint64_t header_len = header.size();
  if (std::fwrite(&header_len, sizeof header_len, 1, f) != 1) fail("writing");
  if (std::fwrite(header.data(), 1, header.size(), f) != header.size()) fail("writing");
  for (const Tensor& t : host) {
    const size_t nbytes = t.numel() * dtype_size(t.dtype());
    if (std::fwrite(t.raw_data(), 1, nbytes, f) != nbytes) fail("writing");
  }
  if (std::fflush(f) != 0 || fsync(fileno(f)) != 0) fail("flushing");
  if (std::fclose(f) != 0) {
    const std::string reason = std::strerror(errno);
    std::remove(tmp.c_str());
    throw Error(where + "closing " + tmp + " failed: " + reason);
  }
}

// --- reading ---------------------------------------------------------------------------------

// One tensor's header entry, checked against the file.
struct Entry {
  std::string name;
  Shape shape;
  const FileDType* file_dtype;
  uint64_t begin, end;  // relative to the first data byte
  TensorRequirements requirements;
};

// Where a file's bytes come from: the open file, read where asked (a checkpoint's
// tensors go straight into their storage), or bytes already in memory.
struct Bytes {
  std::ifstream* file;       // or null: `memory` holds them
  std::string_view memory;
  uint64_t size;

  void read(void* dst, uint64_t nbytes, uint64_t pos, const std::string& where) const {
    if (!file) {  // the caller checked [pos, pos + nbytes) against size; checked again, as a file's read is
      AG_CHECK(pos <= size && nbytes <= size - pos,
               where << "truncated: could not read " << nbytes << " bytes at byte " << pos);
      if (nbytes) std::memcpy(dst, memory.data() + pos, nbytes);  // an empty tensor may have no storage
      return;
    }
    file->seekg(static_cast<std::streamoff>(pos));
    file->read(static_cast<char*>(dst), static_cast<std::streamsize>(nbytes));
    // The sizes were checked against the file, so this fails only if the file
    // changed under us or the disk did.
    AG_CHECK(*file && static_cast<uint64_t>(file->gcount()) == nbytes,
             where << "truncated: could not read " << nbytes << " bytes at byte " << pos);
  }
};

// nlohmann's parser is iterative, but dump(), copies and comparisons of the
// parsed value recurse: a header nested 10^6 deep overflowed the stack. So the
// nesting is checked on the raw text, before parsing. A valid header nests 3
// deep (the header, a tensor's entry, its shape); the margin keeps the precise
// messages for slightly wrong entries such as "shape": [[2]].
constexpr int kMaxNesting = 8;

void check_nesting(const std::string& where, const std::string& text) {
  int depth = 0;
  bool in_string = false, escaped = false;
  for (char c : text) {
    if (in_string) {
      if (escaped)
        escaped = false;
      else if (c == '\\')
        escaped = true;
      else if (c == '"')
        in_string = false;
    } else if (c == '"') {
      in_string = true;
    } else if (c == '[' || c == '{') {
      AG_CHECK(++depth <= kMaxNesting, where << "header nests arrays and objects deeper than " << kMaxNesting
                                             << " levels (a safetensors header nests 3): not a safetensors file");
    } else if (c == ']' || c == '}') {
      --depth;
    }
  }
}

// Parses the header, refusing a key given twice in one object: nlohmann keeps
// the last one silently, so two tensors could share a name, or a field be
// given twice with the first value ignored.
Json parse_header(const std::string& where, const std::string& text) {
  check_nesting(where, text);
  std::vector<std::set<std::string>> keys_of_open_objects;
  const Json::parser_callback_t refuse_duplicate_keys = [&](int, Json::parse_event_t event, Json& parsed) {
    if (event == Json::parse_event_t::object_start) keys_of_open_objects.emplace_back();
    if (event == Json::parse_event_t::object_end) keys_of_open_objects.pop_back();
    if (event == Json::parse_event_t::key)
      AG_CHECK(keys_of_open_objects.back().insert(parsed.get<std::string>()).second,
               where << "key " << parsed.dump() << " appears twice in one JSON object of the header");
    return true;
  };
  constexpr bool allow_exceptions = false;  // a malformed header is reported below, with the file's name
  const Json header = Json::parse(text, refuse_duplicate_keys, allow_exceptions);
  AG_CHECK(!header.is_discarded(), where << "not a safetensors file (header is not valid JSON)");
  AG_CHECK(header.is_object(), where << "not a safetensors file (header is not a JSON object)");
  return header;
}

Metadata parse_metadata(const std::string& where, const Json& j) {
  AG_CHECK(j.is_object(), where << "\"" << kMetadataKey << "\" is not a JSON object");
  Metadata metadata;
  for (const auto& item : j.items()) {
    AG_CHECK(item.value().is_string(), where << "\"" << kMetadataKey << "\" value for \""
                                             << item.key() << "\" is not a string");
    metadata[item.key()] = item.value().get<std::string>();
  }
  return metadata;
}

Entry parse_entry(const std::string& where, const std::string& name, const Json& j, uint64_t data_size,
                  const RequirementsOf& requirements_of) {
  const std::string at = where + "tensor \"" + name + "\": ";
  AG_CHECK(j.is_object(), at << "entry is not a JSON object");
  for (const char* key : {"dtype", "shape", "data_offsets"})
    AG_CHECK(j.contains(key), at << "missing \"" << key << "\"");
  Entry e{name, {}, nullptr, 0, 0, requirements_of ? requirements_of(name) : TensorRequirements{}};

  const Json& dtype = j.at("dtype");
  AG_CHECK(dtype.is_string(), at << "\"dtype\" is not a string");
  for (const FileDType& d : kFileDTypes)
    if (dtype.get<std::string>() == d.name) e.file_dtype = &d;
  AG_CHECK(e.file_dtype, at << "unsupported dtype " << dtype.dump() << " (attograd reads " << file_dtype_names() << ")");
  const std::optional<DType> required = e.requirements.dtype;
  AG_CHECK(!required || *required == e.file_dtype->dtype,
           at << "dtype " << e.file_dtype->name << " (loads as " << e.file_dtype->dtype
              << ") where the tensor must be " << *required);

  const Json& shape = j.at("shape");
  AG_CHECK(shape.is_array(), at << "\"shape\" is not an array of integers");
  for (const Json& dim : shape) {
    AG_CHECK(dim.is_number_integer(), at << "\"shape\" is not an array of integers: " << shape.dump());
    AG_CHECK(dim.is_number_unsigned(), at << "negative dim in shape " << shape.dump());
    AG_CHECK(dim.get<uint64_t>() <= uint64_t(std::numeric_limits<int64_t>::max()),
             at << "mis-shaped: dim " << dim.dump() << " does not fit in int64");
    e.shape.push_back(dim.get<int64_t>());
  }

  const Json& offsets = j.at("data_offsets");
  AG_CHECK(offsets.is_array() && offsets.size() == 2 && offsets[0].is_number_unsigned() &&
               offsets[1].is_number_unsigned(),
           at << "\"data_offsets\" is not a pair of non-negative integers: " << offsets.dump());
  e.begin = offsets[0].get<uint64_t>();
  e.end = offsets[1].get<uint64_t>();
  AG_CHECK(e.begin <= e.end, at << "mis-shaped: data_offsets " << offsets.dump() << " end before they begin");

  // The shape must be one a tensor can have once loaded (byte_size fits in
  // int64 at the loaded dtype's width, at least the file's), and its bytes in
  // the file must be what the offsets span.
  std::optional<uint64_t> needed;
  try {
    byte_size(e.shape, dtype_size(e.file_dtype->dtype));
    needed = uint64_t(numel(e.shape)) * e.file_dtype->size;
  } catch (const Error&) {  // needed stays empty: the shape is too large for any file
  }
  AG_CHECK(needed && *needed == e.end - e.begin,
           at << "mis-shaped: shape " << shape.dump() << " of " << e.file_dtype->name << " needs "
              << (needed ? std::to_string(*needed) : std::string("over 2^63")) << " bytes but data_offsets "
              << offsets.dump() << " span " << e.end - e.begin);
  AG_CHECK(e.end <= data_size, at << "truncated: data_offsets " << offsets.dump()
                                  << " run past the end of the data (" << data_size << " bytes)");
  return e;
}

// The format requires the tensors' bytes to tile the data region exactly: in
// the order of their offsets each begins where the previous one ends, the
// first at 0 and the last at the end of the file. A file that breaks this is
// not what its header says (a header length off by one shifts every tensor by
// a byte; offsets may point into another tensor's bytes), and reading it
// anyway would give wrong values silently. `sorted` is in offset order.
void check_tiling(const std::string& where, const std::vector<Entry>& sorted, uint64_t data_size) {
  uint64_t covered = 0;  // bytes [0, covered) belong to the tensors checked so far
  const Entry* previous = nullptr;
  for (const Entry& e : sorted) {
    const std::string at = where + "tensor \"" + e.name + "\": ";
    AG_CHECK(e.begin >= covered, at << "data_offsets [" << e.begin << "," << e.end << "] overlap those of tensor \""
                                    << previous->name << "\" [" << previous->begin << "," << previous->end << "]");
    AG_CHECK(e.begin == covered, at << "data_offsets [" << e.begin << "," << e.end << "] leave a hole: bytes ["
                                    << covered << "," << e.begin << ") belong to no tensor");
    covered = e.end;
    previous = &e;
  }
  AG_CHECK(covered == data_size, where << "trailing bytes: the tensors end at byte " << covered << " of a "
                                       << data_size << "-byte data region, and the rest belongs to no tensor"
                                       << " (a header length or offsets that are off?)");
}

void check_finite(const std::string& at, const Tensor& t) {
  visit_floating(t.dtype(), "load_safetensors", [&](auto zero) {
    using T = decltype(zero);
    const T* values = t.data<T>();
    for (int64_t i = 0; i < t.numel(); ++i)
      AG_CHECK(std::isfinite(values[i]), at << "element " << i << " is " << values[i] << ", and the tensor must be finite");
  });
}

Tensor read_tensor(const Bytes& bytes, const Entry& e, uint64_t data_start, const std::string& where) {
  const std::string at = where + "tensor \"" + e.name + "\": ";
  Tensor t = Tensor::empty(e.shape, e.file_dtype->dtype);
  const uint64_t pos = data_start + e.begin, nbytes = e.end - e.begin;
  if (!e.file_dtype->widen) {
    bytes.read(t.raw_data(), nbytes, pos, at);
  } else {  // no larger than the file: nbytes was checked against it
    std::vector<char> disk(nbytes);
    bytes.read(disk.data(), nbytes, pos, at);
    e.file_dtype->widen(disk.data(), t.numel(), t.raw_data());
  }
  if (e.requirements.finite && is_floating(t.dtype())) check_finite(at, t);
  return t;
}

}  // namespace

void save_safetensors(const std::string& path, const std::vector<NamedTensor>& tensors,
                      const Metadata& metadata) {
  const std::string where = "save_safetensors: " + path + ": ";
  std::set<std::string> seen;
  std::vector<Tensor> host;
  for (const NamedTensor& nt : tensors) {
    AG_CHECK(nt.tensor.defined(), where << "tensor \"" << nt.name << "\" is undefined");
    AG_CHECK(nt.name != kMetadataKey, where << "\"" << kMetadataKey << "\" is reserved, not a tensor name");
    AG_CHECK(seen.insert(nt.name).second, where << "tensor name \"" << nt.name << "\" appears twice");
    host.push_back(nt.tensor.to(Device::CPU));
  }
  const std::string header = make_header(where, tensors, metadata);
  // The pid keeps two processes saving to the same path from sharing a temp file.
  const std::string tmp = path + ".tmp-" + std::to_string(getpid());
  write_bytes(where, tmp, header, host);
  if (std::rename(tmp.c_str(), path.c_str()) != 0) {
    const std::string reason = std::strerror(errno);
    std::remove(tmp.c_str());
    throw Error(where + "renaming " + tmp + " over it failed: " + reason);
  }
}

namespace {

// The file's bytes, parsed and checked (load_safetensors' contract); `where`
// names the file in every message.
SafetensorsFile parse_file(const std::string& where, const std::string& path, const Bytes& bytes,
                           const RequirementsOf& requirements_of) {
  const uint64_t file_size = bytes.size;
  AG_CHECK(file_size >= 8, where << "too short (" << file_size
                                 << " bytes) to hold the 8-byte header length: not a safetensors file");
  uint64_t header_len = 0;
  bytes.read(&header_len, sizeof header_len, 0, where);
  AG_CHECK(header_len <= kMaxHeaderBytes, where << "header length " << header_len
                                                << " is absurd (limit 100 MB): not a safetensors file");
  AG_CHECK(header_len <= file_size - 8, where << "header length " << header_len << " exceeds the "
                                              << file_size - 8 << " bytes after it: truncated or not a safetensors file");
  std::string text(header_len, '\0');
  bytes.read(text.data(), header_len, 8, where);
  const Json header = parse_header(where, text);

  SafetensorsFile file;
  file.path = path;
  const uint64_t data_start = 8 + header_len, data_size = file_size - data_start;
  std::vector<Entry> entries;
  for (const auto& item : header.items()) {
    if (item.key() == kMetadataKey)
      file.metadata = parse_metadata(where, item.value());
    else
      entries.push_back(parse_entry(where, item.key(), item.value(), data_size, requirements_of));
  }
  // File order is the order save_safetensors was given, whatever order other
  // writers put the header's keys in. An empty tensor sorts before a tensor
  // starting at its offset, so the tiling check sees them in a valid order;
  // stable, so empty tensors at one offset keep the header's order.
  std::stable_sort(entries.begin(), entries.end(),
                   [](const Entry& a, const Entry& b) { return std::tie(a.begin, a.end) < std::tie(b.begin, b.end); });
  check_tiling(where, entries, data_size);
  for (const Entry& e : entries) file.tensors.push_back({e.name, read_tensor(bytes, e, data_start, where)});
  return file;
}

}  // namespace

SafetensorsFile load_safetensors(const std::string& path, const RequirementsOf& requirements_of) {
  const std::string where = "load_safetensors: " + path + ": ";
  std::error_code ec;
  AG_CHECK(std::filesystem::exists(path, ec), where << "does not exist");
  const uint64_t file_size = std::filesystem::file_size(path, ec);  // also rejects directories
  AG_CHECK(!ec, where << "cannot open: " << ec.message());
  std::ifstream in(path, std::ios::binary);
  AG_CHECK(in, where << "cannot open: " << std::strerror(errno));
  return parse_file(where, path, Bytes{&in, {}, file_size}, requirements_of);
}

SafetensorsFile load_safetensors_from_memory(std::string_view bytes, const std::string& name,
                                             const RequirementsOf& requirements_of) {
  return parse_file("load_safetensors: " + name + ": ", name, Bytes{nullptr, bytes, bytes.size()}, requirements_of);
}

bool SafetensorsFile::contains(const std::string& name) const {
  return std::any_of(tensors.begin(), tensors.end(), [&](const NamedTensor& nt) { return nt.name == name; });
}

const Tensor& SafetensorsFile::at(const std::string& name) const {
  for (const NamedTensor& nt : tensors)
    if (nt.name == name) return nt.tensor;
  // A few of the names that do exist usually show the mismatch (a missing prefix, a typo).
  std::string some;
  for (size_t i = 0; i < tensors.size() && i < 5; ++i) some += (i ? ", " : "") + tensors[i].name;
  if (tensors.size() > 5) some += ", ...";
  throw Error("SafetensorsFile::at: no tensor \"" + name + "\" in " + path + " (it holds " +
              std::to_string(tensors.size()) + " tensors: " + some + ")");
}

}  // namespace ag
