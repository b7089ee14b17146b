// safetensors checkpoints: round trips are bit-exact, files written by hand in
// the reference layout load (F16 and BF16 widened to float32 exactly), every kind of corrupt file gives an ag::Error that
// names the file and the problem, and saving is atomic.
#include <doctest/doctest.h>

#include <bit>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <functional>
#include <limits>
#include <string>
#include <vector>

#include "core/safetensors.h"
#include "tests/helpers.h"

// The file's names and using-directives stay its own in a unity build, where the test
// files compile as one translation unit (CMakeLists.txt).
namespace safetensors_test {

namespace {

namespace fs = std::filesystem;
using ag::DType;
using ag::Tensor;

using ag::test::read_file;
using ag::test::write_file;

// The 8-byte little-endian header length.
std::string length_prefix(uint64_t n) {
  std::string bytes(8, '\0');
  std::memcpy(bytes.data(), &n, 8);
  return bytes;
}

// A file as another tool would write it: length, `header` verbatim, `data`.
void write_safetensors_by_hand(const std::string& path, const std::string& header,
                               const std::string& data) {
  write_file(path, length_prefix(header.size()) + header + data);
}

template <class T>
std::string bytes_of(const std::vector<T>& values) {
  return std::string(reinterpret_cast<const char*>(values.data()), values.size() * sizeof(T));
}

// Same shape, dtype and bytes (so NaN payloads and -0.0 count too).
void check_identical(const Tensor& a, const Tensor& b) {
  INFO(ag::describe(a) << " vs " << ag::describe(b));
  REQUIRE(a.shape() == b.shape());
  REQUIRE(a.dtype() == b.dtype());
  CHECK(std::memcmp(a.raw_data(), b.raw_data(), a.numel() * ag::dtype_size(a.dtype())) == 0);
}

// f() throws an ag::Error whose message names the file `path` and contains `word`.
void check_error(const std::function<void()>& f, const std::string& path, const std::string& word) {
  try {
    f();
  } catch (const ag::Error& e) {
    const std::string message = e.what();
    INFO("message: " << message);
    CHECK(message.find(path) != std::string::npos);
    CHECK(message.find(word) != std::string::npos);
    return;
  }
  FAIL("no ag::Error for " << path << " (expected \"" << word << "\")");
}

// The file is refused, and so are its bytes given from memory (the fuzzer's way in),
// with the same problem and the name given for them.
void check_load_error(const std::string& path, const std::string& word) {
  check_error([&] { ag::load_safetensors(path); }, path, word);
  if (!fs::is_regular_file(path)) return;
  const std::string bytes = read_file(path);
  check_error([&] { ag::load_safetensors_from_memory(bytes, "bytes-in-memory"); }, "bytes-in-memory", word);
}

}  // namespace

TEST_CASE("safetensors: float32, float64 and int64 tensors round trip in order") {
  ag::test::TempDir tmp("safetensors_round_trip");
  const std::string path = tmp.file("model.safetensors");
  // Names out of alphabetical order: the file must keep the caller's order.
  const std::vector<ag::NamedTensor> saved = {
      {"wte.weight", ag::test::random({5, 3}, 1, DType::Float32, false)},
      {"blocks.0.ln.bias", ag::test::random({3}, 2, DType::Float64, false)},
      {"targets", Tensor::from_indices({0, -1, 7, 1'000'000'000'000}, {2, 2})},
      {"loss_scale", Tensor::scalar(0.5)},
      {"empty", Tensor::empty({0, 4})},
  };
  ag::save_safetensors(path, saved);

  const ag::SafetensorsFile file = ag::load_safetensors(path);
  CHECK(file.path == path);
  CHECK(file.metadata.empty());
  REQUIRE(file.tensors.size() == saved.size());
  for (size_t i = 0; i < saved.size(); ++i) {
    CAPTURE(saved[i].name);
    CHECK(file.tensors[i].name == saved[i].name);
    CHECK(file.tensors[i].tensor.device() == ag::Device::CPU);
    check_identical(file.tensors[i].tensor, saved[i].tensor);
  }
  CHECK(file.at("loss_scale").shape().empty());
  CHECK(file.at("loss_scale").item() == 0.5);

  // The same bytes from memory load the same tensors, and name what they were given.
  const ag::SafetensorsFile from_memory = ag::load_safetensors_from_memory(read_file(path), "in memory");
  CHECK(from_memory.path == "in memory");
  REQUIRE(from_memory.tensors.size() == saved.size());
  for (size_t i = 0; i < saved.size(); ++i) {
    CHECK(from_memory.tensors[i].name == saved[i].name);
    check_identical(from_memory.tensors[i].tensor, saved[i].tensor);
  }
}

TEST_CASE("safetensors: special values are bit-exact") {
  ag::test::TempDir tmp("safetensors_bit_exact");
  const std::string path = tmp.file("special.safetensors");
  using F = std::numeric_limits<float>;
  using D = std::numeric_limits<double>;
  using I = std::numeric_limits<int64_t>;
  const std::vector<float> f = {0.1f, -0.0f, F::denorm_min(), F::max(), -F::infinity(), F::quiet_NaN(),
                                std::bit_cast<float>(0x7fc12345u)};  // a NaN with a payload
  const std::vector<double> d = {0.1, -0.0, D::denorm_min(), D::lowest(), D::infinity(),
                                 std::bit_cast<double>(0x7ff8000000abcdefull)};
  Tensor tf = Tensor::empty({int64_t(f.size())}, DType::Float32);
  Tensor td = Tensor::empty({int64_t(d.size())}, DType::Float64);
  std::copy(f.begin(), f.end(), tf.data<float>());
  std::copy(d.begin(), d.end(), td.data<double>());
  const Tensor ti = Tensor::from_indices({I::min(), I::max(), -1, 0}, {4});

  ag::save_safetensors(path, {{"f", tf}, {"d", td}, {"i", ti}});
  const ag::SafetensorsFile file = ag::load_safetensors(path);
  check_identical(file.at("f"), tf);
  check_identical(file.at("d"), td);
  check_identical(file.at("i"), ti);
}

TEST_CASE("safetensors: metadata round trips") {
  ag::test::TempDir tmp("safetensors_metadata");
  const std::string path = tmp.file("meta.safetensors");
  const ag::Metadata metadata = {
      {"format", "pt"}, {"step", "1000"}, {"note", "quotes \" and\nnewlines, ünïcödé"}, {"empty", ""}};
  ag::save_safetensors(path, {{"x", Tensor::ones({2})}}, metadata);
  const ag::SafetensorsFile file = ag::load_safetensors(path);
  CHECK(file.metadata == metadata);

  // Metadata alone, with no tensors, is a valid file too.
  ag::save_safetensors(path, {}, metadata);
  CHECK(ag::load_safetensors(path).metadata == metadata);
  CHECK(ag::load_safetensors(path).tensors.empty());
}

TEST_CASE("safetensors: the header has the reference layout, padded to 8 bytes") {
  ag::test::TempDir tmp("safetensors_layout");
  const std::string path = tmp.file("layout.safetensors");
  ag::save_safetensors(path, {{"x", Tensor::from_vector({1, 2}, {2})}}, {{"k", "v"}});
  const std::string bytes = read_file(path);
  REQUIRE(bytes.size() >= 8);
  uint64_t n = 0;
  std::memcpy(&n, bytes.data(), 8);
  CHECK(n % 8 == 0);
  REQUIRE(bytes.size() == 8 + n + 8);
  const std::string expected =
      R"({"__metadata__":{"k":"v"},"x":{"dtype":"F32","shape":[2],"data_offsets":[0,8]}})";
  std::string header = bytes.substr(8, n);
  CHECK(header.substr(0, expected.size()) == expected);
  CHECK(header.find_first_not_of(' ', expected.size()) == std::string::npos);
  CHECK(bytes.substr(8 + n) == bytes_of(std::vector<float>{1, 2}));
}

TEST_CASE("safetensors: files from other writers: I32 widens to int64, tensors come in data order") {
  ag::test::TempDir tmp("safetensors_foreign");
  const std::string path = tmp.file("tokens.safetensors");
  // "ids" comes first in the header but second in the data.
  const std::string header =
      R"({"ids":{"dtype":"I32","shape":[2,2],"data_offsets":[8,24]},)"
      R"("w":{"dtype":"F32","shape":[2],"data_offsets":[0,8]}})";
  const std::vector<int32_t> ids = {3, -7, 0, std::numeric_limits<int32_t>::max()};
  write_safetensors_by_hand(path, header, bytes_of(std::vector<float>{1.5f, -2}) + bytes_of(ids));

  const ag::SafetensorsFile file = ag::load_safetensors(path);
  REQUIRE(file.tensors.size() == 2);
  CHECK(file.tensors[0].name == "w");
  CHECK(file.tensors[1].name == "ids");
  const Tensor& t = file.at("ids");
  CHECK(t.dtype() == DType::Int64);
  CHECK(t.shape() == ag::Shape{2, 2});
  CHECK(t.to_indices() == std::vector<int64_t>{3, -7, 0, std::numeric_limits<int32_t>::max()});
  CHECK(file.at("w").to_vector() == std::vector<double>{1.5, -2});
}

namespace {
// The value of the IEEE binary16 with bits h, from the format's definition:
// (-1)^s · 2^(e-15) · 1.m, or 2^-14 · 0.m when e = 0 (NaN for every NaN).
double f16_value(uint16_t h) {
  const int e = (h >> 10) & 0x1f, m = h & 0x3ff;
  const double sign = (h & 0x8000) ? -1 : 1;
  if (e == 0x1f) return m == 0 ? sign * std::numeric_limits<double>::infinity() : std::numeric_limits<double>::quiet_NaN();
  return sign * (e == 0 ? std::ldexp(m, -24) : std::ldexp(1024 + m, e - 25));
}
// "0x3c00"
std::string hex16(uint32_t bits) {
  char text[8];
  std::snprintf(text, sizeof text, "0x%04x", bits);
  return text;
}
}  // namespace

TEST_CASE("safetensors: F16 and BF16 widen to float32 exactly, every one of their 65,536 values") {
  ag::test::TempDir tmp("safetensors_half");
  const std::string path = tmp.file("half.safetensors");
  std::vector<uint16_t> all(1 << 16);
  for (size_t i = 0; i < all.size(); ++i) all[i] = uint16_t(i);
  const std::string bytes = bytes_of(all);  // 128 KB, once as F16 and once as BF16
  write_safetensors_by_hand(path,
                            R"({"h":{"dtype":"F16","shape":[256,256],"data_offsets":[0,131072]},)"
                            R"("b":{"dtype":"BF16","shape":[65536],"data_offsets":[131072,262144]}})",
                            bytes + bytes);
  const ag::SafetensorsFile file = ag::load_safetensors(path);
  const Tensor &h = file.at("h"), &b = file.at("b");
  REQUIRE(h.dtype() == DType::Float32);
  REQUIRE(b.dtype() == DType::Float32);
  CHECK(h.shape() == ag::Shape{256, 256});
  CHECK(b.shape() == ag::Shape{65536});
  int wrong_f16 = 0, wrong_bf16 = 0;
  for (uint32_t bits = 0; bits < (1u << 16); ++bits) {
    const float x = h.data<float>()[bits];
    const uint32_t x_bits = std::bit_cast<uint32_t>(x);
    const double expected = f16_value(uint16_t(bits));
    // A NaN keeps its sign and payload (as NumPy's float16 -> float32 does); -0 stays -0.
    const bool ok = std::isnan(expected) ? x_bits == ((bits & 0x8000u) << 16 | 0x7f800000u | (bits & 0x3ffu) << 13)
                                         : double(x) == expected && std::signbit(x) == std::signbit(expected);
    if (!ok && ++wrong_f16 <= 5) FAIL_CHECK("F16 bits " << hex16(bits) << " load as " << x << ", not " << expected);
    // A bfloat16 is the top half of a float32's bits, by definition.
    if (std::bit_cast<uint32_t>(b.data<float>()[bits]) != bits << 16 && ++wrong_bf16 <= 5)
      FAIL_CHECK("BF16 bits " << hex16(bits) << " load as " << b.data<float>()[bits]);
  }
  CHECK(wrong_f16 == 0);
  CHECK(wrong_bf16 == 0);
  // A few by name: the largest half, the smallest subnormal, BF16's 1.0 and 3.0.
  CHECK(h.data<float>()[0x7bff] == 65504.0f);
  CHECK(h.data<float>()[0x0001] == std::ldexp(1.0f, -24));
  CHECK(h.data<float>()[0x8000] == 0.0f);
  CHECK(std::signbit(h.data<float>()[0x8000]));
  CHECK(b.data<float>()[0x3f80] == 1.0f);
  CHECK(b.data<float>()[0x4040] == 3.0f);
}

TEST_CASE("safetensors: F16 and BF16 tensors are checked like any other") {
  ag::test::TempDir tmp("safetensors_half_checks");
  const std::string path = tmp.file("half.safetensors");
  const std::string four = bytes_of(std::vector<uint16_t>{0x3c00, 0x7c00});  // F16 1.0 and +inf
  // Two elements of two bytes span 4 bytes, not 8: the width on disk counts, not the loaded one.
  write_safetensors_by_hand(path, R"({"w":{"dtype":"F16","shape":[2],"data_offsets":[0,8]}})", four + four);
  check_load_error(path, R"(tensor "w": mis-shaped: shape [2] of F16 needs 4 bytes but data_offsets [0,8] span 8)");
  write_safetensors_by_hand(path, R"({"w":{"dtype":"BF16","shape":[4],"data_offsets":[0,4]}})", four);
  check_load_error(path, R"(tensor "w": mis-shaped: shape [4] of BF16 needs 8 bytes)");
  // Widened to float32, they meet a float32 demand, and the finite one sees the infinity.
  write_safetensors_by_hand(path, R"({"w":{"dtype":"F16","shape":[2],"data_offsets":[0,4]}})", four);
  const ag::RequirementsOf float32 = [](const std::string&) { return ag::TensorRequirements{.dtype = DType::Float32}; };
  CHECK(ag::load_safetensors(path, float32).at("w").to_vector() == std::vector<double>{1, INFINITY});
  check_error([&] { ag::load_safetensors(path, [](const std::string&) { return ag::TensorRequirements{.dtype = DType::Float32, .finite = true}; }); },
              path, R"(tensor "w": element 1 is inf)");
  check_error([&] { ag::load_safetensors(path, [](const std::string&) { return ag::TensorRequirements{.dtype = DType::Int64}; }); },
              path, "dtype F16 (loads as float32) where the tensor must be int64");
  // Saving a widened tensor writes it at its loaded width: F32.
  ag::save_safetensors(path, {{"w", ag::load_safetensors(path).at("w")}});
  CHECK(read_file(path).find(R"("dtype":"F32")") != std::string::npos);
}

TEST_CASE("safetensors: corrupt files give an ag::Error naming the file and the problem") {
  ag::test::TempDir tmp("safetensors_corrupt");
  const std::string path = tmp.file("bad.safetensors");
  const std::string data = bytes_of(std::vector<float>{1, 2});  // 8 bytes
  // A header with one entry for "w" (2 floats) whose fields are given raw.
  auto entry = [](const std::string& fields) { return R"({"w":{)" + fields + "}}"; };
  const std::string dtype = R"("dtype":"F32")", shape = R"("shape":[2])",
                    offsets = R"("data_offsets":[0,8])";
  auto write_entry = [&](const std::string& fields) {
    write_safetensors_by_hand(path, entry(fields), data);
  };

  SUBCASE("the valid file these cases break loads") {
    write_entry(dtype + "," + shape + "," + offsets);
    CHECK(ag::load_safetensors(path).at("w").to_vector() == std::vector<double>{1, 2});
  }
  SUBCASE("missing file") { check_load_error(tmp.file("absent.safetensors"), "does not exist"); }
  SUBCASE("a directory") { check_load_error(tmp.dir.string(), "cannot open"); }
  SUBCASE("shorter than the 8-byte length") {
    write_file(path, std::string(5, '\x01'));
    check_load_error(path, "too short");
  }
  SUBCASE("header length larger than the file") {
    write_file(path, length_prefix(1000) + "{}");
    check_load_error(path, "exceeds");
  }
  SUBCASE("absurd header length") {
    write_file(path, length_prefix(uint64_t(1) << 40) + "{}");
    check_load_error(path, "absurd");
    write_file(path, length_prefix(std::numeric_limits<uint64_t>::max()) + "{}");
    check_load_error(path, "absurd");
  }
  SUBCASE("header not JSON") {
    write_safetensors_by_hand(path, R"({"w": {"dtype")", data);
    check_load_error(path, "not a safetensors file");
  }
  SUBCASE("header not a JSON object") {
    write_safetensors_by_hand(path, "[1, 2]", data);
    check_load_error(path, "not a safetensors file");
  }
  SUBCASE("entry missing a field") {
    write_entry(shape + "," + offsets);
    check_load_error(path, R"(missing "dtype")");
    write_entry(dtype + "," + offsets);
    check_load_error(path, R"(missing "shape")");
    write_entry(dtype + "," + shape);
    check_load_error(path, R"(missing "data_offsets")");
  }
  SUBCASE("fields of the wrong JSON type") {
    write_safetensors_by_hand(path, R"({"w": [1, 2]})", data);
    check_load_error(path, "not a JSON object");
    write_entry(R"("dtype":4,)" + shape + "," + offsets);
    check_load_error(path, R"("dtype" is not a string)");
    write_entry(dtype + R"(,"shape":"2",)" + offsets);
    check_load_error(path, R"("shape" is not an array)");
    write_entry(dtype + R"(,"shape":[2.0],)" + offsets);
    check_load_error(path, R"("shape" is not an array)");
    write_entry(dtype + "," + shape + R"(,"data_offsets":[0])");
    check_load_error(path, R"("data_offsets" is not a pair)");
    write_entry(dtype + "," + shape + R"(,"data_offsets":[-8,0])");
    check_load_error(path, R"("data_offsets" is not a pair)");
    // each part of the pair check alone: not an array, the second not a non-negative integer
    write_entry(dtype + "," + shape + R"(,"data_offsets":{"0":0,"1":8})");
    check_load_error(path, R"("data_offsets" is not a pair)");
    write_entry(dtype + "," + shape + R"(,"data_offsets":[0,-8])");
    check_load_error(path, R"("data_offsets" is not a pair)");
    write_entry(dtype + "," + shape + R"(,"data_offsets":[0,8.0])");
    check_load_error(path, R"("data_offsets" is not a pair)");
  }
  SUBCASE("unsupported dtype") {
    write_entry(R"("dtype":"BOOL",)" + shape + "," + offsets);
    check_load_error(path, "unsupported dtype \"BOOL\" (attograd reads F32, F64, I64, I32, F16 and BF16)");
  }
  SUBCASE("negative dim") {
    write_entry(dtype + R"(,"shape":[-2],)" + offsets);
    check_load_error(path, "negative dim");
  }
  SUBCASE("offsets that disagree with shape x dtype size") {
    write_entry(dtype + R"(,"shape":[3],)" + offsets);
    check_load_error(path, "mis-shaped");
    write_entry(R"("dtype":"F64",)" + shape + "," + offsets);
    check_load_error(path, "mis-shaped");
    write_entry(dtype + "," + shape + R"(,"data_offsets":[8,0])");
    check_load_error(path, "mis-shaped");
    // Dims whose product overflows must not wrap around to a small size.
    write_entry(dtype + R"(,"shape":[4611686018427387904,4611686018427387904,0],)" + offsets);
    check_load_error(path, "mis-shaped");
    write_entry(dtype + R"(,"shape":[18446744073709551615],)" + offsets);
    check_load_error(path, "mis-shaped");
  }
  SUBCASE("offsets past the end of the file") {
    write_entry(dtype + R"(,"shape":[4],"data_offsets":[0,16])");
    check_load_error(path, "truncated");
    // Huge offsets must fail before anything is allocated.
    write_entry(dtype + R"(,"shape":[1000000000000],"data_offsets":[0,4000000000000])");
    check_load_error(path, "truncated");
  }
  SUBCASE("bad metadata") {
    write_safetensors_by_hand(path, R"({"__metadata__":{"step":1000}})", "");
    check_load_error(path, "is not a string");
    write_safetensors_by_hand(path, R"({"__metadata__":["a"]})", "");
    check_load_error(path, "not a JSON object");
  }
}

TEST_CASE("safetensors: deep nesting is refused before parsing, never a stack overflow") {
  ag::test::TempDir tmp("safetensors_nesting");
  const std::string path = tmp.file("deep.safetensors");
  const std::string data = bytes_of(std::vector<float>{1, 2});
  auto nested = [](int depth) { return std::string(depth, '[') + std::string(depth, ']'); };
  // A 2 MB header nested 10^6 deep: in "shape" its message used to dump() it,
  // which recursed once per level and overflowed the stack.
  const int depth = 1'000'000;
  write_safetensors_by_hand(path, R"({"w":{"dtype":"F32","shape":)" + nested(depth) + R"(,"data_offsets":[0,8]}})", data);
  check_load_error(path, "deeper than 8 levels");
  write_safetensors_by_hand(path, R"({"w":)" + nested(depth) + "}", data);
  check_load_error(path, "deeper than 8 levels");
  write_safetensors_by_hand(path, R"({"__metadata__":{"k":)" + std::string(depth, '{') + "}", data);
  check_load_error(path, "deeper than 8 levels");

  // At the limit the JSON is parsed and the entry gets its own message.
  write_safetensors_by_hand(path, R"({"w":{"dtype":"F32","shape":)" + nested(6) + R"(,"data_offsets":[0,8]}})", data);
  check_load_error(path, R"("shape" is not an array of integers)");
  write_safetensors_by_hand(path, R"({"w":{"dtype":"F32","shape":)" + nested(7) + R"(,"data_offsets":[0,8]}})", data);
  check_load_error(path, "deeper than 8 levels");
  // Brackets inside strings, escaped quotes included, are text, not nesting.
  const std::string brackets = std::string(20, '[') + R"(\"{{{{{{{{{{)";
  write_safetensors_by_hand(path, R"({"__metadata__":{"k":")" + brackets + R"("},"w":{"dtype":"F32","shape":[2],"data_offsets":[0,8]}})", data);
  CHECK(ag::load_safetensors(path).metadata.at("k") == std::string(20, '[') + "\"{{{{{{{{{{");
}

TEST_CASE("safetensors: a key given twice in one JSON object is an error") {
  ag::test::TempDir tmp("safetensors_duplicates");
  const std::string path = tmp.file("twice.safetensors");
  const std::string data = bytes_of(std::vector<float>{1, 2, 3, 4});
  const std::string a = R"("a":{"dtype":"F32","shape":[2],"data_offsets":[0,8]})";
  const std::string b = R"("b":{"dtype":"F32","shape":[2],"data_offsets":[8,16]})";
  const std::string a_again = R"("a":{"dtype":"F32","shape":[2],"data_offsets":[8,16]})";
  write_safetensors_by_hand(path, "{" + a + "," + b + "}", data);
  CHECK(ag::load_safetensors(path).tensors.size() == 2);
  // Two tensors named "a": nlohmann would keep the last and drop the first.
  write_safetensors_by_hand(path, "{" + a + "," + a_again + "}", data);
  check_load_error(path, R"(key "a" appears twice)");
  // A field twice in one entry.
  write_safetensors_by_hand(path, R"({"a":{"dtype":"I32","dtype":"F32","shape":[4],"data_offsets":[0,16]}})", data);
  check_load_error(path, R"(key "dtype" appears twice)");
  // Metadata keys, and __metadata__ itself.
  write_safetensors_by_hand(path, R"({"__metadata__":{"n":"1","n":"2"},)" + a + "," + b + "}", data);
  check_load_error(path, R"(key "n" appears twice)");
  write_safetensors_by_hand(path, R"({"__metadata__":{"n":"1"},)" + a + R"(,"__metadata__":{"m":"2"},)" + b + "}", data);
  check_load_error(path, R"(key "__metadata__" appears twice)");
  // The same key in different objects is fine.
  write_safetensors_by_hand(path, R"({"__metadata__":{"a":"x"},)" + a + "," + b + "}", data);
  CHECK(ag::load_safetensors(path).metadata.at("a") == "x");
}

TEST_CASE("safetensors: the tensors' bytes must tile the data region exactly") {
  ag::test::TempDir tmp("safetensors_tiling");
  const std::string path = tmp.file("tiles.safetensors");
  const std::string data = bytes_of(std::vector<float>{1, 2, 3, 4});  // 16 bytes
  auto entry = [](const std::string& name, const std::string& shape, int begin, int end) {
    return "\"" + name + R"(":{"dtype":"F32","shape":)" + shape + R"(,"data_offsets":[)" + std::to_string(begin) +
           "," + std::to_string(end) + "]}";
  };
  auto write_header = [&](const std::string& entries, const std::string& bytes) {
    write_safetensors_by_hand(path, "{" + entries + "}", bytes);
  };

  SUBCASE("contiguous tensors, empty ones anywhere, load") {
    write_header(entry("b", "[2]", 8, 16) + "," + entry("e0", "[0]", 0, 0) + "," + entry("a", "[2]", 0, 8) + "," +
                     entry("e8", "[0,3]", 8, 8) + "," + entry("e16", "[0]", 16, 16),
                 data);
    const ag::SafetensorsFile file = ag::load_safetensors(path);
    std::vector<std::string> names;
    for (const ag::NamedTensor& t : file.tensors) names.push_back(t.name);
    CHECK(names == std::vector<std::string>{"e0", "a", "e8", "b", "e16"});
    CHECK(file.at("b").to_vector() == std::vector<double>{3, 4});
  }
  SUBCASE("two tensors on the same bytes") {
    write_header(entry("a", "[2]", 0, 8) + "," + entry("b", "[2]", 0, 8), data.substr(0, 8));
    check_load_error(path, R"(overlap those of tensor "a" [0,8])");
  }
  SUBCASE("overlapping offsets") {
    write_header(entry("a", "[3]", 0, 12) + "," + entry("b", "[1]", 8, 12) + "," + entry("c", "[1]", 12, 16), data);
    check_load_error(path, "overlap");
    write_header(entry("a", "[4]", 0, 16) + "," + entry("inside", "[0]", 4, 4), data);
    check_load_error(path, R"(tensor "inside": data_offsets [4,4] overlap)");
  }
  SUBCASE("a hole, at the start or between tensors") {
    write_header(entry("a", "[1]", 0, 4) + "," + entry("b", "[2]", 8, 16), data);
    check_load_error(path, "bytes [4,8) belong to no tensor");
    write_header(entry("a", "[3]", 4, 16), data);
    check_load_error(path, "bytes [0,4) belong to no tensor");
  }
  SUBCASE("trailing bytes after the last tensor") {
    write_header(entry("a", "[3]", 0, 12), data);
    check_load_error(path, "trailing bytes: the tensors end at byte 12 of a 16-byte data region");
    write_header("", data);
    check_load_error(path, "trailing bytes: the tensors end at byte 0 of a 16-byte data region");
  }
  SUBCASE("a header length off by one either way") {
    // A padded header: one byte less still parses, and would shift every
    // tensor by a byte without the tiling check.
    const std::string header = R"({"a":{"dtype":"F32","shape":[4],"data_offsets":[0,16]}}   )";
    write_file(path, length_prefix(header.size() - 1) + header + data);
    check_load_error(path, "end at byte 16 of a 17-byte data region");
    write_file(path, length_prefix(header.size() + 1) + header + data);
    check_load_error(path, "truncated");
    // One more, with the first data byte a space: valid JSON, one byte short.
    const std::string spaced = bytes_of(std::vector<uint32_t>{0x20202020u, 0, 0, 0});
    write_file(path, length_prefix(header.size() + 1) + header + spaced);
    check_load_error(path, "truncated");
  }
}

TEST_CASE("safetensors: unknown dtypes are errors") {
  ag::test::TempDir tmp("safetensors_dtypes");
  const std::string path = tmp.file("dtype.safetensors");
  for (const std::string dtype : {"BOOL", "U8", "I8", "I16", "U16", "U32", "U64", "F8_E4M3", "F8_E5M2", "f32", "F32 ",
                                  "bf16", "F16 ", ""}) {
    CAPTURE(dtype);
    write_safetensors_by_hand(path, R"({"w":{"dtype":")" + dtype + R"(","shape":[2],"data_offsets":[0,8]}})",
                              bytes_of(std::vector<float>{1, 2}));
    check_load_error(path, "unsupported dtype");
  }
}

TEST_CASE("safetensors: callers can demand a dtype and finite values per tensor") {
  ag::test::TempDir tmp("safetensors_requirements");
  const std::string path = tmp.file("req.safetensors");
  using F = std::numeric_limits<float>;
  // Float32 and finite for the weights, Int64 for the step; "free" unchecked.
  const ag::RequirementsOf checkpoint = [](const std::string& name) -> ag::TensorRequirements {
    if (name == "step") return {.dtype = DType::Int64};
    if (name == "free") return {};
    return {.dtype = DType::Float32, .finite = true};
  };
  const Tensor free = Tensor::from_vector({F::quiet_NaN()}, {1}, DType::Float64);
  ag::save_safetensors(path, {{"w", Tensor::ones({2})}, {"step", Tensor::from_indices({3}, {1})}, {"free", free}});
  CHECK(ag::load_safetensors(path, checkpoint).at("step").to_indices() == std::vector<int64_t>{3});

  SUBCASE("a dtype other than the one demanded, before reading") {
    ag::save_safetensors(path, {{"w", Tensor::ones({2}, DType::Float64)}});
    check_error([&] { ag::load_safetensors(path, checkpoint); }, path, R"(tensor "w": dtype F64 (loads as float64) where the tensor must be float32)");
    ag::save_safetensors(path, {{"step", Tensor::ones({1})}});
    check_error([&] { ag::load_safetensors(path, checkpoint); }, path, "where the tensor must be int64");
    // Moments stored as I32 would be widened to int64 and reinterpreted.
    write_safetensors_by_hand(path, R"({"w":{"dtype":"I32","shape":[2],"data_offsets":[0,8]}})",
                              bytes_of(std::vector<int32_t>{1, 2}));
    check_error([&] { ag::load_safetensors(path, checkpoint); }, path, "dtype I32 (loads as int64) where the tensor must be float32");
    // ...while I32 is the int64 it widens to.
    write_safetensors_by_hand(path, R"({"step":{"dtype":"I32","shape":[1],"data_offsets":[0,4]}})",
                              bytes_of(std::vector<int32_t>{7}));
    CHECK(ag::load_safetensors(path, checkpoint).at("step").to_indices() == std::vector<int64_t>{7});
  }
  SUBCASE("NaN and infinities where finite values are demanded") {
    for (DType dtype : {DType::Float32, DType::Float64})
      for (double bad : {double(F::quiet_NaN()), double(F::infinity()), -double(F::infinity())}) {
        CAPTURE(dtype);
        CAPTURE(bad);
        const Tensor w = Tensor::from_vector({0, 1, bad, 3}, {2, 2}, dtype);
        ag::save_safetensors(path, {{"w", w}});
        check_error([&] { ag::load_safetensors(path, [](const std::string&) { return ag::TensorRequirements{.dtype = std::nullopt, .finite = true}; }); },
                    path, R"(tensor "w": element 2 is )");
        CHECK(ag::load_safetensors(path).at("w").numel() == 4);  // not demanded: loads as is
      }
  }
}

TEST_CASE("safetensors: at() names the file and the missing tensor") {
  ag::test::TempDir tmp("safetensors_at");
  const std::string path = tmp.file("small.safetensors");
  ag::save_safetensors(path, {{"lm_head.weight", Tensor::ones({2, 2})}});
  const ag::SafetensorsFile file = ag::load_safetensors(path);
  CHECK(file.contains("lm_head.weight"));
  CHECK_FALSE(file.contains("head.weight"));
  check_error([&] { file.at("head.weight"); }, path, "\"head.weight\"");
}

TEST_CASE("safetensors: saving is atomic, overwrites, and reports failures with the path") {
  ag::test::TempDir tmp("safetensors_atomic");
  const std::string path = tmp.file("ckpt.safetensors");
  ag::save_safetensors(path, {{"x", Tensor::ones({3})}}, {{"step", "1"}});
  ag::save_safetensors(path, {{"y", Tensor::zeros({2}, DType::Float64)}}, {{"step", "2"}});

  const ag::SafetensorsFile file = ag::load_safetensors(path);
  CHECK(file.metadata.at("step") == "2");
  CHECK_FALSE(file.contains("x"));
  CHECK(file.at("y").to_vector() == std::vector<double>{0, 0});
  std::vector<std::string> names;
  for (const auto& e : fs::directory_iterator(tmp.dir)) names.push_back(e.path().filename().string());
  CHECK(names == std::vector<std::string>{"ckpt.safetensors"});  // no PATH.tmp-<pid> left behind

  const std::string unwritable = tmp.file("no_such_dir/ckpt.safetensors");
  check_error([&] { ag::save_safetensors(unwritable, {{"x", Tensor::ones({1})}}); }, unwritable, "cannot create");
}

TEST_CASE("safetensors: save rejects duplicate, reserved and undefined tensors") {
  ag::test::TempDir tmp("safetensors_save_errors");
  const std::string path = tmp.file("bad.safetensors");
  const Tensor x = Tensor::ones({1});
  check_error([&] { ag::save_safetensors(path, {{"x", x}, {"x", x}}); }, path, "twice");
  check_error([&] { ag::save_safetensors(path, {{"__metadata__", x}}); }, path, "reserved");
  check_error([&] { ag::save_safetensors(path, {{"x", Tensor()}}); }, path, "undefined");
  CHECK_FALSE(fs::exists(path));
}

TEST_CASE("safetensors: CUDA tensors are saved through the host") {
  if (!ag::test::cuda_or_skip()) return;
  ag::test::TempDir tmp("safetensors_cuda");
  const std::string path = tmp.file("cuda.safetensors");
  const Tensor host = ag::test::random({4, 3}, 7, DType::Float32, false);
  ag::save_safetensors(path, {{"w", host.to(ag::Device::CUDA)}});
  check_identical(ag::load_safetensors(path).at("w"), host);
}

}  // namespace safetensors_test
