// The LSTM mixer (AttentionFunction::Lstm, not an attention function: its own
// op, lstm(), core/ops/lstm.cpp): float64 gradcheck of the op over the input
// and every weight, PyTorch's nn.LSTM with copied weights (tests/golden/
// lstm.safetensors, written by scripts/make_golden_lstm.py), decoding from
// (h, c) against the whole sequence, the CPU against CUDA, the module's
// initialisation, a GPT generating from its cache, errors, and char_lm.
#include <cmath>

#include "core/autograd.h"
#include "core/gradcheck.h"
#include "core/ops.h"
#include "core/safetensors.h"
#include "examples/common/checkpoint.h"
#include "examples/common/sample.h"
#include "examples/common/train.h"
#include "examples/lab/cell.h"
#include "examples/lab/grid.h"
#include "nn/gpt.h"
#include "nn/lstm.h"
#include "tests/char_lm_helpers.h"
#include "tests/own_mixer_helpers.h"
#include "tests/helpers.h"

// The file's names and using-directives stay its own in a unity build, where the test
// files compile as one translation unit (CMakeLists.txt).
namespace lstm_test {

using namespace ag;
using ag::test::random;

namespace {

// {X [B, T, C], W_ih, W_hh [C, 4C], b_ih, b_hh [4C]}: weights about 0.5, so that the gates are neither
// saturated nor linear and c carries across the steps.
std::vector<Tensor> lstm_inputs(int64_t B, int64_t T, int64_t C, uint64_t seed) {
  const auto half = [](const Tensor& t) { return (t * 0.5).detach().requires_grad_(); };
  return {random({B, T, C}, seed), half(random({C, 4 * C}, seed + 1)), half(random({C, 4 * C}, seed + 2)),
          half(random({4 * C}, seed + 3)), half(random({4 * C}, seed + 4))};
}
Tensor lstm_of(const std::vector<Tensor>& x) { return lstm(x[0], x[1], x[2], x[3], x[4]); }

nn::GPTConfig lstm_model() {
  nn::GPTConfig config = test::gpt_sizes(11, 20, 2, 2, 16);
  config.attention = AttentionFunction::Lstm;
  return config;
}

}  // namespace

TEST_CASE("lstm: float64 gradcheck of X, W_ih, W_hh, b_ih and b_hh (T 1, 2 and 6, B 1 and 3)") {
  for (const Shape& s : {Shape{1, 1, 3}, Shape{3, 2, 2}, Shape{2, 6, 4}}) {
    CAPTURE(to_string(s));
    CHECK_GRADCHECK(lstm_of, lstm_inputs(s[0], s[1], s[2], 7));
  }
}

TEST_CASE("lstm: float32 agrees with float64, output and every gradient (T 40: the carried dh and dc)") {
  ag::test::check_float32_matches_float64(lstm_of, lstm_inputs(3, 40, 8, 11));
}

// PyTorch's nn.LSTM(5, 5) in float64 with the weights the file holds (transposed to [in, out]):
// output, the final (h, c) and every gradient of sum(out ∘ R) to ≤ 1e-12 (normwise relative).
TEST_CASE("lstm: matches torch.nn.LSTM with copied weights (golden file, float64 ≤ 1e-12)") {
  const SafetensorsFile golden = load_safetensors(ATTOGRAD_SOURCE_DIR "/tests/golden/lstm.safetensors");
  std::vector<Tensor> x;
  for (const char* name : {"x", "weight_ih", "weight_hh", "bias_ih", "bias_hh"})
    x.push_back(golden.at(name).clone().requires_grad_());
  LstmState state;
  const Tensor out = lstm(x[0], x[1], x[2], x[3], x[4], &state);
  sum(out * golden.at("R")).backward();
  CHECK_CLOSE(out, golden.at("out"), 1e-12);
  CHECK_CLOSE(state.h, golden.at("h_n"), 1e-12);
  CHECK_CLOSE(state.c, golden.at("c_n"), 1e-12);
  CHECK_CLOSE(x[0].grad(), golden.at("grad.x"), 1e-12);
  CHECK_CLOSE(x[1].grad(), golden.at("grad.weight_ih"), 1e-12);
  CHECK_CLOSE(x[2].grad(), golden.at("grad.weight_hh"), 1e-12);
  CHECK_CLOSE(x[3].grad(), golden.at("grad.bias_ih"), 1e-12);
  CHECK_CLOSE(x[4].grad(), golden.at("grad.bias_hh"), 1e-12);
}

TEST_CASE_EVERY_DEVICE("lstm: decoding from (h, c) gives the whole sequence's rows — and every device agrees with the CPU") {
  const std::vector<Tensor> x = lstm_inputs(3, 12, 8, 21);
  if (device != Device::CPU) {
    ag::test::check_device_matches_cpu(device, lstm_of, x, 1e-12, DType::Float64);
    ag::test::check_device_matches_cpu(device, lstm_of, x, 1e-5, DType::Float32);
  }
  std::vector<Tensor> on;
  for (const Tensor& t : x) on.push_back(t.to(device));
  NoGradGuard no_grad;
  const Tensor whole = lstm_of(on).to(Device::CPU);
  LstmState state;
  std::vector<Tensor> rows = {lstm(slice(on[0], 1, 0, 4), on[1], on[2], on[3], on[4], &state)};  // a prefill
  for (int64_t t = 4; t < 12; ++t) rows.push_back(lstm(slice(on[0], 1, t, t + 1), on[1], on[2], on[3], on[4], &state));
  CHECK_CLOSE(concat(rows, 1).to(Device::CPU), whole, 1e-12);
  CHECK_CLOSE(state.h.to(Device::CPU), slice(whole, 1, 11, 12).reshape({3, 8}), 1e-12);
}

TEST_CASE("lstm: the module — PyTorch's names, the forget bias 1, kept by the GPT's init, gradcheck") {
  Generator gen(2);
  nn::LstmMixer mixer({.C = 4}, &gen);
  std::vector<std::string> names;
  for (const NamedTensor& p : mixer.named_parameters()) names.push_back(p.name);
  CHECK(names == std::vector<std::string>{"weight_ih", "weight_hh", "bias_ih", "bias_hh"});
  const std::vector<double> b_ih = mixer.named_parameters()[2].tensor.to_vector();
  for (int64_t j = 4; j < 8; ++j) CHECK(b_ih[j] == 1.0);
  CHECK(mixer.state_floats(1) == 8);
  CHECK(mixer.state_floats(1000) == 8);
  ag::test::check_module_gradients(mixer, random({2, 5, 4}, 3), [&](const Tensor& x) { return mixer.forward(x); });

  nn::GPT model(lstm_model(), gen);
  std::map<std::string, Tensor> p;
  for (const NamedTensor& t : model.named_parameters()) p[t.name] = t.tensor;
  const std::vector<double> kept = p.at("blocks.1.attn.bias_ih").to_vector();
  for (int64_t j = 16; j < 32; ++j) CHECK(kept[j] == 1.0);
  CHECK(p.at("blocks.0.attn.weight_hh").shape() == Shape{16, 64});
}

TEST_CASE("lstm: a GPT generating token by token from (h, c) in its KV cache gives the full forward's logits") {
  Generator gen(1);
  nn::GPT model(lstm_model(), gen);
  model.to(DType::Float64);
  ag::test::check_decode_from_state(model, 2 * (2 * 16 * 8));  // two layers of (h, c) [2, 1, C] in float64
}

TEST_CASE("lstm: the lab names it as a mixer and reports its state, (h, c) per layer whatever the positions") {
  nn::GPTConfig model = test::gpt_sizes(64, 256, 2, 2, 64);
  lab::apply_mixer("lstm", model);
  CHECK(model.attention == AttentionFunction::Lstm);
  CHECK(lab::state_floats(model) == model.n_layer * 2 * model.n_embd);
  model.block_size = 1024;
  CHECK(lab::state_floats(model) == model.n_layer * 2 * model.n_embd);
}

TEST_CASE("lstm: bad input is a clear error naming the option or the tensor") {
  const std::vector<Tensor> x = lstm_inputs(2, 3, 4, 1);
  CHECK_THROWS_WITH_AS(lstm(x[0], x[2].reshape({4, 2, 8}).reshape({8, 8}), x[2], x[3], x[4]),
                       doctest::Contains("the weights must be [C, 4C]"), Error);
  CHECK_THROWS_WITH_AS(lstm(slice(x[0], 1, 0, 0), x[1], x[2], x[3], x[4]), doctest::Contains("T, C >= 1"), Error);
  LstmState wrong{.h = Tensor::zeros({2, 3}, DType::Float64), .c = Tensor::zeros({2, 3}, DType::Float64)};
  CHECK_THROWS_WITH_AS(lstm(x[0], x[1], x[2], x[3], x[4], &wrong), doctest::Contains("state h"), Error);
  CHECK_THROWS_WITH_AS(nn::LstmMixer({.C = 0}), doctest::Contains("hidden size C = n_embd 0"), Error);

  Generator gen(1);
  const auto build_error = [&](const nn::GPTConfig& c) { return ag::test::error_of([&] { nn::GPT model(c, gen); }); };
  nn::GPTConfig bad = lstm_model();
  bad.position = PositionEncoding::Rope;
  CHECK(build_error(bad).find("--attention lstm has none") != std::string::npos);
  bad = lstm_model();
  bad.position = PositionEncoding::Alibi;
  CHECK(build_error(bad).find("alibi") != std::string::npos);
  bad = lstm_model();
  bad.ssd_conv = 2;
  CHECK(build_error(bad).find("is an option of ssd attention") != std::string::npos);
  bad = lstm_model();
  bad.head_mask = "10/11";
  CHECK(build_error(bad).find("head_mask") != std::string::npos);

  const ag::test::TempDir dir("lstm_checkpoints");
  nn::GPT model(lstm_model(), gen);
  const std::string good = dir.file("good.safetensors");
  char_lm::save_model(good, model, text::Tokenizer::from_text("abcdefghijk"), 0);
  const SafetensorsFile file = load_safetensors(good);
  std::vector<NamedTensor> tensors;
  for (const NamedTensor& t : file.tensors)
    if (t.name != "blocks.1.attn.weight_hh") tensors.push_back(t);
  const std::string path = dir.file("edited.safetensors");
  save_safetensors(path, tensors, file.metadata);
  CHECK_THROWS_WITH_AS(char_lm::load_model(path), doctest::Contains("has no tensor 'blocks.1.attn.weight_hh'"), Error);
}

TEST_CASE("lstm: char_lm trains an lstm model — its metadata — greedy text the same from (h, c) as recomputed — grads, eval") {
  const ag::test::TempDir dir("lstm_char_lm");
  char_lm::TrainConfig c = ag::test::tiny_run(dir.path());
  c.model.attention = AttentionFunction::Lstm;
  c.run.max_iters = 4;
  char_lm::train(c);
  const std::string path = char_lm::model_path(char_lm::find_checkpoint(dir.path()));
  const SafetensorsFile file = load_safetensors(path);
  CHECK(file.metadata.at("attention") == "lstm");
  CHECK(file.contains("blocks.0.attn.weight_ih"));
  CHECK(!file.contains("blocks.0.attn.w_q.weight"));
  ag::test::check_own_mixer_programs(dir, c.run.data, "--attention lstm",
                                     {"blocks.0.attn.weight_ih", "blocks.0.attn.weight_hh", "blocks.0.attn.bias_ih"});
  int status = 0;
  std::string output;
  // no weights over positions to draw: a clear error, not an empty map
  std::tie(status, output) =
      ag::test::run_char_lm("attention --ckpt '" + dir.path() + "' --prompt 'the' --out '" + dir.file("maps") + "'");
  CHECK(status != 0);
  CHECK(output.find("--attention lstm has no attention weights to look at") != std::string::npos);
}

}  // namespace lstm_test
