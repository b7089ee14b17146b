// Files the reference implementation wrote (PyPI safetensors, committed in
// tests/golden/safetensors/ by scripts/safetensors_roundtrip.sh, whose
// expected.json says what each holds) read by ag::load_safetensors: each loads
// with its names in data order, its shapes, its exact values widened by
// attograd's rule and its __metadata__, or, for a dtype attograd does not read,
// is refused with an ag::Error that names the file and the reason.
#include <doctest/doctest.h>

#include <algorithm>
#include <cmath>
#include <fstream>
#include <map>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "core/safetensors.h"
#include "tests/helpers.h"

// The file's names and using-directives stay its own in a unity build, where the test
// files compile as one translation unit (CMakeLists.txt).
namespace safetensors_library_test {

namespace {

using ag::DType;
using nlohmann::json;

const std::string kFixtures = std::string(ATTOGRAD_SOURCE_DIR) + "/tests/golden/safetensors/";

// What each dtype on disk loads as; a dtype not here must be refused.
const std::map<std::string, DType> kLoadsAs = {
    {"F32", DType::Float32}, {"F64", DType::Float64}, {"I64", DType::Int64},
    {"I32", DType::Int64},   {"F16", DType::Float32}, {"BF16", DType::Float32},
};

json expected_files() {
  std::ifstream in(kFixtures + "expected.json");
  REQUIRE(in.good());
  return json::parse(in).at("files");
}

// One expected value, a number or "nan", "inf", "-inf", against a loaded float or double.
void check_float(const json& expected, double got, const std::string& where) {
  INFO(where << ": expected " << expected.dump() << ", got " << got);
  if (expected.is_string()) {
    const std::string s = expected.get<std::string>();
    if (s == "nan") {
      CHECK(std::isnan(got));
    } else {
      REQUIRE((s == "inf" || s == "-inf"));
      CHECK(got == (s == "inf" ? INFINITY : -INFINITY));
    }
    return;
  }
  const double want = expected.get<double>();
  CHECK(got == want);
  CHECK(std::signbit(got) == std::signbit(want));  // -0 stays -0
}

void check_loaded(const std::string& path, const json& file) {
  const ag::SafetensorsFile loaded = ag::load_safetensors(path);
  CHECK(json(loaded.metadata) == file.at("metadata"));
  const json& tensors = file.at("tensors");
  REQUIRE(loaded.tensors.size() == tensors.size());
  for (size_t i = 0; i < tensors.size(); ++i) {
    const json& want = tensors[i];
    const std::string name = want.at("name").get<std::string>(), dtype = want.at("dtype").get<std::string>();
    const ag::Tensor& t = loaded.tensors[i].tensor;
    CAPTURE(name);
    CHECK(loaded.tensors[i].name == name);  // in the file's data order
    CHECK(t.dtype() == kLoadsAs.at(dtype));
    REQUIRE(t.shape() == want.at("shape").get<ag::Shape>());
    const json& values = want.at("values");
    REQUIRE(values.size() == size_t(t.numel()));
    for (int64_t k = 0; k < t.numel(); ++k) {
      const std::string where = name + "[" + std::to_string(k) + "] (" + dtype + ")";
      if (t.dtype() == DType::Int64)
        CHECK_MESSAGE(t.data<int64_t>()[k] == values[k].get<int64_t>(), where);
      else if (t.dtype() == DType::Float32)
        check_float(values[k], t.data<float>()[k], where);
      else
        check_float(values[k], t.data<double>()[k], where);
    }
  }
}

}  // namespace

TEST_CASE("safetensors library: every file the reference implementation wrote loads exactly, or is refused by name") {
  const json files = expected_files();
  std::map<std::string, int> seen_dtypes;
  int refused = 0;
  for (const json& file : files) {
    const std::string path = kFixtures + file.at("file").get<std::string>();
    CAPTURE(path);
    std::string unread_dtype, unread_name;
    for (const json& t : file.at("tensors")) {
      ++seen_dtypes[t.at("dtype").get<std::string>()];
      if (!kLoadsAs.count(t.at("dtype").get<std::string>())) {
        unread_dtype = t.at("dtype").get<std::string>();
        unread_name = t.at("name").get<std::string>();
      }
    }
    if (unread_dtype.empty()) {
      check_loaded(path, file);
      continue;
    }
    ++refused;
    try {
      ag::load_safetensors(path);
      FAIL("loaded " << path << ", which holds " << unread_dtype);
    } catch (const ag::Error& e) {
      const std::string message = e.what();
      INFO("message: " << message);
      CHECK(message.find(path) != std::string::npos);
      CHECK(message.find("tensor \"" + unread_name + "\": unsupported dtype \"" + unread_dtype + "\"") != std::string::npos);
    }
  }
  // The cases the fixtures exist for are all there (a fixture set that lost one would pass silently).
  for (const char* dtype : {"F32", "F64", "I32", "I64", "F16", "BF16", "BOOL"}) {
    CAPTURE(dtype);
    CHECK(seen_dtypes[dtype] > 0);
  }
  CHECK(refused == 1);
}

TEST_CASE("safetensors library: non-ASCII metadata and names, empty tensors, data order apart from name order") {
  // The same files as above, by name, for what each is there to show.
  const ag::SafetensorsFile meta = ag::load_safetensors(kFixtures + "metadata.safetensors");
  CHECK(meta.metadata.at("note") == "naïve — 日本語");
  CHECK(meta.metadata.at("emoji") == "🙂 is four bytes in UTF-8");
  CHECK(meta.metadata.at("quoted") == "a \"quoted\" word,\nthen a new line");
  CHECK(meta.metadata.at("empty").empty());
  CHECK(meta.at("café.weight").to_vector() == std::vector<double>{1, 2});

  const ag::SafetensorsFile empty = ag::load_safetensors(kFixtures + "empty.safetensors");
  CHECK(empty.at("empty").shape() == ag::Shape{0, 3});
  CHECK(empty.at("no_ids").shape() == ag::Shape{0});
  CHECK(empty.at("no_ids").dtype() == DType::Int64);
  CHECK(empty.at("w").to_vector() == std::vector<double>{1.5, -2.5});

  const ag::SafetensorsFile order = ag::load_safetensors(kFixtures + "order.safetensors");
  std::vector<std::string> names;
  for (const ag::NamedTensor& t : order.tensors) names.push_back(t.name);
  std::vector<std::string> sorted = names;
  std::sort(sorted.begin(), sorted.end());
  CHECK(names != sorted);  // the library put the data in another order than the names'
  CHECK(order.at("c").to_vector() == std::vector<double>{4, 5});  // F16
  CHECK(order.at("e").to_indices() == std::vector<int64_t>{7});   // I32
}

}  // namespace safetensors_library_test
