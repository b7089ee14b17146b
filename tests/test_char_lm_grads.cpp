// char_lm grads (ag::char_lm::compute_grads) against PyTorch's float64 loss and
// gradients, for both GELU variants, a sparse attention pattern, a grouped-query model, a
// linear-attention model, rope, alibi and none positions, and ssd models. The golden files
// tests/golden/grads_{erf,tanh,sparse,gqa,linear_elu1,rope,rope_gqa,alibi,alibi_sparse,none,
// ssd,ssd_plain,ssd_gqa_conv3}.safetensors come from
// `/usr/bin/python3 scripts/compare_grads.py --write-golden` and hold
//   __metadata__         the model config (n_layer, n_head, n_embd, block_size, vocab_size, gelu; gqa: n_kv_head;
//                        ssd: attention, ssd_conv, ssd_gate where not the defaults)
//   weight/<name>        every parameter, F32
//   batch/idx, targets   [B, T] I64 (T < block_size: the last pos_emb row gets no gradient)
//   loss, grad/<name>    torch's float64 loss [] and gradients
// Each test writes the weights and the batch to files as a user would, runs
// the built char_lm grads on them and reads its output file back.
#include <doctest/doctest.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <set>
#include <string>
#include <vector>

#include "core/safetensors.h"
#include "core/options.h"
#include "nn/gpt.h"
#include "tests/char_lm_helpers.h"
#include "tests/helpers.h"

// The file's names and using-directives stay its own in a unity build, where the test
// files compile as one translation unit (CMakeLists.txt).
namespace char_lm_grads_test {

namespace {

namespace fs = std::filesystem;
using namespace ag;

// Normwise relative, against torch float64: both sides compute in float64 from
// the same float32 weights, and attograd writes its gradients in float64.
constexpr double kTolerance = 1e-10;

SafetensorsFile load_golden(const std::string& gelu) {
  return load_safetensors(std::string(ATTOGRAD_SOURCE_DIR) + "/tests/golden/grads_" + gelu + ".safetensors");
}

// The golden file's "prefix/<name>" tensors, under <name>.
std::vector<NamedTensor> with_prefix(const SafetensorsFile& golden, const std::string& prefix) {
  std::vector<NamedTensor> out;
  for (const NamedTensor& t : golden.tensors)
    if (t.name.starts_with(prefix)) out.push_back({t.name.substr(prefix.size()), t.tensor});
  return out;
}

// W.safetensors as a user would hand it over: the F32 weights, the model's
// options in __metadata__ (not the golden file's provenance: a weights file
// may hold only keys attograd knows).
std::string write_weights(const SafetensorsFile& golden, const ag::test::TempDir& tmp) {
  const std::string path = tmp.file("W.safetensors");
  Metadata model = golden.metadata;
  model.erase("source");
  model.erase("torch");
  save_safetensors(path, with_prefix(golden, "weight/"), model);
  return path;
}

std::string write_int64_batch(const SafetensorsFile& golden, const ag::test::TempDir& tmp) {
  const std::string path = tmp.file("B.safetensors");
  save_safetensors(path, with_prefix(golden, "batch/"));
  return path;
}

// attograd writes only I64, so the I32 file is written by hand, as another tool would.
std::string write_int32_batch(const SafetensorsFile& golden, const ag::test::TempDir& tmp) {
  nlohmann::json header = nlohmann::json::object();
  std::string data;
  for (const NamedTensor& t : with_prefix(golden, "batch/")) {
    const size_t begin = data.size();
    for (int64_t v : t.tensor.to_indices()) {
      const int32_t v32 = static_cast<int32_t>(v);
      data.append(reinterpret_cast<const char*>(&v32), sizeof v32);
    }
    header[t.name] = {{"dtype", "I32"}, {"shape", t.tensor.shape()}, {"data_offsets", {begin, data.size()}}};
  }
  std::string text = header.dump();
  text.append((8 - text.size() % 8) % 8, ' ');
  const uint64_t n = text.size();
  const std::string path = tmp.file("B_int32.safetensors");
  std::ofstream out(path, std::ios::binary);
  out.write(reinterpret_cast<const char*>(&n), sizeof n);
  out << text << data;
  REQUIRE(out.good());
  return path;
}

double max_abs(const std::vector<double>& v) {
  double m = 0;
  for (double x : v) m = std::max(m, std::abs(x));
  return m;
}

// max|a − b| / max|scale|
double error_relative_to(const Tensor& a, const Tensor& b, const Tensor& scale) {
  const std::vector<double> va = a.to_vector(), vb = b.to_vector();
  REQUIRE(va.size() == vb.size());
  std::vector<double> diff(va.size());
  for (size_t i = 0; i < va.size(); ++i) diff[i] = va[i] - vb[i];
  return max_abs(diff) / max_abs(scale.to_vector());
}

// The output file holds `loss` (F64, []) and every parameter's gradient (F64,
// the parameter's shape) under its own name, nothing else, all within
// kTolerance of torch's (normwise relative); pos_emb's unused rows get 0.
void check_matches_torch(const SafetensorsFile& golden, const std::string& out_path, double returned_loss) {
  const SafetensorsFile out = load_safetensors(out_path);
  const Tensor& loss = out.at("loss");
  CHECK(loss.dtype() == DType::Float64);
  CHECK(loss.shape() == Shape{});
  CHECK(loss.item() == returned_loss);
  CHECK_CLOSE(loss, golden.at("loss"), kTolerance);

  std::set<std::string> expected = {"loss"}, written;
  for (const NamedTensor& g : with_prefix(golden, "grad/")) {
    expected.insert(g.name);
    INFO("gradient of " << g.name);
    REQUIRE(out.contains(g.name));
    const Tensor& grad = out.at(g.name);
    CHECK(grad.dtype() == DType::Float64);
    REQUIRE(grad.shape() == g.tensor.shape());
    const bool softmax = !golden.metadata.count("attention") || golden.metadata.at("attention") == "softmax";
    if (g.name.ends_with("attn.w_k.bias") && softmax) {
      // 0 in exact arithmetic (adding q·b_k to every score of a row leaves the
      // softmax unchanged): both sides are rounding noise, measured against
      // the key weight's gradient.
      const Tensor& scale = golden.at("grad/" + g.name.substr(0, g.name.size() - 4) + "weight");
      CHECK(error_relative_to(grad, g.tensor, scale) <= kTolerance);
    } else {
      CHECK_CLOSE(grad, g.tensor, kTolerance);
    }
  }
  for (const NamedTensor& t : out.tensors) written.insert(t.name);
  CHECK(written == expected);

  if (!out.contains("pos_emb.weight")) {  // rope, alibi, none: no learned positions, in either file
    CHECK(!golden.contains("grad/pos_emb.weight"));
    CHECK(golden.metadata.at("position") != "learned");
    return;
  }
  // Rows T.. of pos_emb [block_size, C] are never looked up: exactly 0.
  const Tensor& pos = out.at("pos_emb.weight");
  const int64_t T = golden.at("batch/idx").size(1), C = pos.size(1);
  REQUIRE(T < pos.size(0));
  const std::vector<double> dpos = pos.to_vector();
  CHECK(max_abs(std::vector<double>(dpos.begin() + T * C, dpos.end())) == 0.0);
}

// `char_lm grads` run as a user (and scripts/compare_grads.py) runs it, on CPU with
// `settings`' attention implementation: the loss it prints to 17 significant
// digits (every bit of a double). A run that fails is an ag::Error holding what
// the program printed, its error message among it.
double run_grads(const std::string& weights, const std::string& batch, const std::string& out,
                 const nn::GPTConfig& settings = {}) {
  const auto [status, output] = ag::test::run_char_lm("grads --weights " + weights + " --batch " + batch + " --out " + out +
                                                      " --attn-impl " + option_to_string(settings.attn_impl));
  if (status != 0) throw Error(output);
  const size_t at = output.find("loss ");
  double loss = 0;
  AG_CHECK(at != std::string::npos && std::sscanf(output.c_str() + at, "loss %lf", &loss) == 1,
           "char_lm grads printed no loss: " << output);
  return loss;
}

// char_lm grads on the golden file's weights and int64 batch, against torch's loss and gradients.
void check_variant(const SafetensorsFile& golden, const std::string& variant, const nn::GPTConfig& settings = {}) {
  ag::test::TempDir tmp("char_lm_grads_" + variant);
  const std::string out = tmp.file("G.safetensors");
  const double loss = run_grads(write_weights(golden, tmp), write_int64_batch(golden, tmp), out, settings);
  check_matches_torch(golden, out, loss);
}

}  // namespace

TEST_CASE("char_lm grads: loss and every gradient match PyTorch float64, erf and tanh GELU, every attention impl") {
  for (const std::string gelu : {"erf", "tanh"}) {
    for (const nn::AttentionImpl impl : {nn::AttentionImpl::Composed, nn::AttentionImpl::Dense, nn::AttentionImpl::Flash}) {
      INFO("gelu " << gelu << ", attention " << name_of(impl));
      const SafetensorsFile golden = load_golden(gelu);
      REQUIRE(golden.metadata.at("gelu") == gelu);
      nn::GPTConfig settings;
      settings.attn_impl = impl;
      check_variant(golden, gelu, settings);
    }
  }
}

TEST_CASE("char_lm grads: a linear-attention (elu1) model matches PyTorch float64 too") {
  const SafetensorsFile golden = load_golden("linear_elu1");
  REQUIRE(golden.metadata.at("attention") == "linear");
  REQUIRE(golden.metadata.at("feature_map") == "elu1");
  check_variant(golden, "linear_elu1");
}

TEST_CASE("char_lm grads: ssd models (conv and gate, neither, conv 3 with gqa past block_size) match PyTorch float64") {
  // grads_ssd: the defaults ssd_conv 4, ssd_gate true; grads_ssd_plain: ssd_conv 0, ssd_gate false;
  // grads_ssd_gqa_conv3: ssd_conv 3, 4 query heads over 2 kv heads, position none, T = 11 > block_size 8.
  // ssd's key bias is not shift-invariant: compared as is. See scripts/compare_grads.py for the formulas.
  for (const std::string variant : {"ssd", "ssd_plain", "ssd_gqa_conv3"}) {
    INFO(variant);
    const SafetensorsFile golden = load_golden(variant);
    REQUIRE(golden.metadata.at("attention") == "ssd");
    check_variant(golden, variant);
  }
  const SafetensorsFile plain = load_golden("ssd_plain");
  CHECK(plain.metadata.at("ssd_conv") == "0");
  CHECK(plain.metadata.at("ssd_gate") == "false");
  CHECK(!plain.contains("weight/blocks.0.attn.conv.weight"));
  CHECK(!plain.contains("weight/blocks.0.attn.w_g.weight"));
  const SafetensorsFile defaults = load_golden("ssd");
  CHECK(defaults.contains("weight/blocks.0.attn.conv.weight"));
  CHECK(defaults.at("weight/blocks.0.attn.conv.weight").size(0) == 4);
  CHECK(defaults.contains("weight/blocks.0.attn.w_g.weight"));
  const SafetensorsFile gqa = load_golden("ssd_gqa_conv3");
  CHECK(gqa.metadata.at("ssd_conv") == "3");
  CHECK(gqa.metadata.at("n_kv_head") == "2");
  CHECK(gqa.metadata.at("position") == "none");
  CHECK(gqa.at("weight/blocks.0.attn.conv.weight").shape() == Shape{3, 16 + 2 * 8});
}

TEST_CASE("char_lm grads: a sparse pattern in the weights' metadata matches PyTorch, every implementation") {
  // grads_sparse: window 4, dilation 2, 3 global keys, 1 random block, attn_seed 5, T = 47 (see the script)
  const SafetensorsFile golden = load_golden("sparse");
  REQUIRE(golden.metadata.at("attn_random_blocks") == "1");
  for (const nn::AttentionImpl impl : {nn::AttentionImpl::Composed, nn::AttentionImpl::Dense, nn::AttentionImpl::Flash}) {
    INFO("attn_impl " << name_of(impl));
    nn::GPTConfig settings;
    settings.attn_impl = impl;
    check_variant(golden, "sparse", settings);
  }
}

TEST_CASE("char_lm grads: a grouped-query model (4 query heads over 2 kv heads) matches PyTorch float64") {
  const SafetensorsFile golden = load_golden("gqa");
  REQUIRE(golden.metadata.at("n_kv_head") == "2");
  check_variant(golden, "gqa");
}

TEST_CASE("char_lm grads: rope, alibi and none models match PyTorch float64, past block_size, every implementation") {
  // grads_rope: rope_base 10000; grads_rope_gqa: rope_base 500, 4 query heads over 2 kv heads;
  // grads_alibi_sparse: ALiBi with the sparse pattern of grads_sparse; all at T = 11 > block_size 8
  // but alibi_sparse (T = 47). See scripts/compare_grads.py for the formulas.
  for (const std::string variant : {"rope", "rope_gqa", "alibi", "alibi_sparse", "none"}) {
    const SafetensorsFile golden = load_golden(variant);
    REQUIRE(golden.metadata.count("position"));
    REQUIRE(!golden.contains("weight/pos_emb.weight"));
    for (const nn::AttentionImpl impl : {nn::AttentionImpl::Composed, nn::AttentionImpl::Dense, nn::AttentionImpl::Flash}) {
      INFO(variant << ", attn_impl " << name_of(impl));
      nn::GPTConfig settings;
      settings.attn_impl = impl;
      check_variant(golden, variant, settings);
    }
  }
  CHECK(load_golden("rope_gqa").metadata.at("rope_base") == "500");
  CHECK(load_golden("rope_gqa").metadata.at("n_kv_head") == "2");
  CHECK(load_golden("alibi_sparse").metadata.at("attn_window") == "4");
}

TEST_CASE("char_lm grads: an int32 batch gives the same loss and gradients") {
  const SafetensorsFile golden = load_golden("erf");
  ag::test::TempDir tmp("char_lm_grads_int32");
  const std::string out = tmp.file("G.safetensors");
  const double loss = run_grads(write_weights(golden, tmp), write_int32_batch(golden, tmp), out);
  check_matches_torch(golden, out, loss);
}

TEST_CASE("char_lm grads: idx and targets of different shapes are an ag::Error naming the batch file") {
  const SafetensorsFile golden = load_golden("erf");
  ag::test::TempDir tmp("char_lm_grads_mismatch");
  const Tensor& idx = golden.at("batch/idx");  // [B, T]
  const int64_t B = idx.size(0), T = idx.size(1);
  const std::vector<int64_t> ids = idx.to_indices();
  const std::string batch = tmp.file("B_mismatch.safetensors");
  save_safetensors(batch, {{"idx", idx},
                           {"targets", Tensor::from_indices(std::vector<int64_t>(ids.begin(), ids.end() - B), {B, T - 1})}});
  CHECK_THROWS_WITH_AS(run_grads(write_weights(golden, tmp), batch, tmp.file("G.safetensors")),
                       doctest::Contains(batch.c_str()), Error);
}

TEST_CASE("char_lm grads: a batch with nothing to score is an error, not a NaN loss") {
  const SafetensorsFile golden = load_golden("erf");
  ag::test::TempDir tmp("char_lm_grads_empty");
  const Tensor& idx = golden.at("batch/idx");
  const std::string ignored = tmp.file("B_ignored.safetensors");
  save_safetensors(ignored, {{"idx", idx}, {"targets", Tensor::full(idx.shape(), -100, DType::Int64)}});
  CHECK_THROWS_WITH_AS(run_grads(write_weights(golden, tmp), ignored, tmp.file("G.safetensors")),
                       doctest::Contains("no target to score"), Error);
  const std::string empty = tmp.file("B_empty.safetensors");
  save_safetensors(empty, {{"idx", Tensor::from_indices({}, {0, 4})}, {"targets", Tensor::from_indices({}, {0, 4})}});
  CHECK_THROWS_WITH_AS(run_grads(write_weights(golden, tmp), empty, tmp.file("G.safetensors")),
                       doctest::Contains("no target to score"), Error);
}

}  // namespace char_lm_grads_test
