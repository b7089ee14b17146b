// S4D (core/ops/s4.cpp): the kernel's generation and the long convolution as ops — float64
// gradcheck of each and of the layer; the FFT convolution against the direct sum and the
// recurrence at T ∈ {1, 2, 255, 256, 1000}, forward and backward; decoding one position at a
// time from the state; PyTorch's float64 numbers (tests/golden/s4d.safetensors, written by
// scripts/make_golden_s4.py with complex autograd); the errors; nn::S4Mixer (gradients, decoding
// from its cache); CPU against CUDA; and S4 as the model's `--attention s4` (AttentionFunction::S4):
// a GPT decoding from its cache, its options' checks, its checkpoints, char_lm and the lab.
#include <cmath>
#include <map>
#include <string>
#include <tuple>
#include <vector>

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
#include "nn/s4.h"
#include "tests/char_lm_helpers.h"
#include "tests/own_mixer_helpers.h"
#include "tests/helpers.h"

// The file's names and using-directives stay its own in a unity build, where the test
// files compile as one translation unit (CMakeLists.txt).
namespace s4_test {

using namespace ag;

namespace {

// Parameters away from S4D-Lin's exact values (so no symmetry hides a wrong term): Δ ∈ [0.01, 0.3),
// Re A around −½, Im A near πn, B and C complex normal, D normal. float64, requiring grad.
S4dParameters random_parameters(int64_t H, int64_t N2, uint64_t seed) {
  Generator gen(seed);
  const auto leaf = [](Tensor t) { return t.detach().requires_grad_(); };
  std::vector<double> im(H * N2);
  for (int64_t i = 0; i < H * N2; ++i) im[i] = M_PI * static_cast<double>(i % N2);
  S4dParameters p;
  p.log_dt = leaf(Tensor::uniform({H}, std::log(0.01), std::log(0.3), DType::Float64, &gen));
  p.log_A_re = leaf(Tensor::randn({H, N2}, DType::Float64, &gen, std::log(0.5), 0.3));
  p.A_im = leaf(Tensor::from_vector(im, {H, N2}, DType::Float64) + Tensor::randn({H, N2}, DType::Float64, &gen, 0, 0.1));
  p.B = leaf(Tensor::randn({H, N2, 2}, DType::Float64, &gen));
  p.C = leaf(Tensor::randn({H, N2, 2}, DType::Float64, &gen, 0, std::sqrt(0.5)));
  p.D = leaf(Tensor::randn({H}, DType::Float64, &gen));
  return p;
}

std::vector<Tensor> as_inputs(const S4dParameters& p) { return {p.log_dt, p.log_A_re, p.A_im, p.B, p.C, p.D}; }
S4dParameters from_inputs(const std::vector<Tensor>& x, size_t first) {
  return {x[first], x[first + 1], x[first + 2], x[first + 3], x[first + 4], x[first + 5]};
}

// The direct sums, the reference of the FFT: y_{b,t,h} = Σ_{j≤t} K_{h,t−j} u_{b,j,h}, and the
// correlations dU_{b,j,h} = Σ_{t≥j} K_{h,t−j} dY_{b,t,h}, dK_{h,ℓ} = Σ_{b,t≥ℓ} dY_{b,t,h} u_{b,t−ℓ,h}.
struct Direct {
  Tensor y, dU, dK;
};
Direct direct_convolution(const Tensor& u, const Tensor& K, const Tensor& dY) {
  const int64_t B = u.size(0), T = u.size(1), H = u.size(2);
  const std::vector<double> x = u.to_vector(), k = K.to_vector(), g = dY.to_vector();
  std::vector<double> y(B * T * H, 0.0), du(B * T * H, 0.0), dk(H * T, 0.0);
  for (int64_t b = 0; b < B; ++b)
    for (int64_t t = 0; t < T; ++t)
      for (int64_t j = 0; j <= t; ++j)
        for (int64_t h = 0; h < H; ++h) {
          const int64_t out = (b * T + t) * H + h, in = (b * T + j) * H + h, tap = h * T + t - j;
          y[out] += k[tap] * x[in];
          du[in] += k[tap] * g[out];
          dk[tap] += g[out] * x[in];
        }
  return {Tensor::from_vector(y, u.shape(), DType::Float64), Tensor::from_vector(du, u.shape(), DType::Float64),
          Tensor::from_vector(dk, K.shape(), DType::Float64)};
}

nn::GPTConfig s4_model() {
  nn::GPTConfig config = test::gpt_sizes(11, 20, 2, 2, 16);
  config.attention = AttentionFunction::S4;
  config.s4_state = 8;
  return config;
}

}  // namespace

TEST_CASE("s4d: the kernel's gradients into log Δ, A, B, C (float64 gradcheck)") {
  for (const int64_t T : {1, 2, 9}) {
    INFO("T = " << T);
    const std::vector<Tensor> x = as_inputs(random_parameters(2, 3, 1));
    const std::vector<Tensor> without_D(x.begin(), x.end() - 1);
    CHECK_GRADCHECK([T](const std::vector<Tensor>& in) { return s4d_kernel({in[0], in[1], in[2], in[3], in[4], Tensor()}, T); }, without_D);
  }
}

TEST_CASE("s4d: the long convolution's gradients (float64 gradcheck)") {
  for (const int64_t T : {1, 2, 7, 16}) {
    INFO("T = " << T);
    const std::vector<Tensor> x = {ag::test::random({2, T, 3}, 2), ag::test::random({3, T}, 3)};
    CHECK_GRADCHECK([](const std::vector<Tensor>& in) { return long_conv(in[0], in[1]); }, x);
  }
}

TEST_CASE("s4d: the layer's gradients (float64 gradcheck)") {
  std::vector<Tensor> x = {ag::test::random({2, 11, 3}, 4)};
  for (const Tensor& t : as_inputs(random_parameters(3, 2, 5))) x.push_back(t);
  CHECK_GRADCHECK([](const std::vector<Tensor>& in) { return s4d(in[0], from_inputs(in, 1)); }, x);
}

TEST_CASE("s4d: FFT convolution ≡ direct convolution ≡ the recurrence, forward and backward (float64)") {
  const S4dParameters p = random_parameters(3, 4, 6);
  for (const int64_t T : {1, 2, 255, 256, 1000}) {
    INFO("T = " << T);
    const Tensor u = ag::test::random({2, T, 3}, 7, DType::Float64, false);
    const Tensor dY = ag::test::random({2, T, 3}, 8, DType::Float64, false);
    const Tensor K = s4d_kernel(p, T).detach();
    const Direct direct = direct_convolution(u, K, dY);
    const Tensor uu = u.clone().requires_grad_(), KK = K.clone().requires_grad_();
    const Tensor y = long_conv(uu, KK);
    y.backward(dY);
    CHECK_CLOSE(y.detach(), direct.y, 1e-12);
    CHECK_CLOSE(uu.grad(), direct.dU, 1e-12);
    CHECK_CLOSE(KK.grad(), direct.dK, 1e-12);
    // The recurrence (no D in long_conv; s4d_recurrent adds D·u, as s4d does).
    Tensor state;
    const Tensor recurrent = s4d_recurrent(u, p, state);
    CHECK_CLOSE(recurrent, (direct.y + u * p.D.detach().reshape({1, 1, 3})).detach(), 1e-12);
    CHECK_CLOSE(recurrent, s4d(u, p).detach(), 1e-12);
  }
}

TEST_CASE("s4d: decoding one position at a time from the state ≡ the full forward") {
  const S4dParameters p = random_parameters(2, 3, 9);
  const Tensor u = ag::test::random({2, 40, 2}, 10, DType::Float64, false);
  const Tensor full = s4d(u, p).detach();
  Tensor state;
  std::vector<Tensor> steps;
  for (int64_t t = 0; t < 40; ++t) steps.push_back(s4d_recurrent(slice(u, 1, t, t + 1), p, state));
  CHECK(state.shape() == Shape{2, 2, 3, 2});  // constant-size: [B, H, N/2, (re, im)]
  CHECK_CLOSE(concat(steps, 1), full, 1e-12);
}

TEST_CASE("s4d: the kernel and the layer match PyTorch float64 with complex autograd (golden file)") {
  const SafetensorsFile golden = load_safetensors(ATTOGRAD_SOURCE_DIR "/tests/golden/s4d.safetensors");
  const auto leaf = [&](const char* name) { return golden.at(name).detach().clone().requires_grad_(); };
  const S4dParameters p{leaf("log_dt"), leaf("log_A_re"), leaf("A_im"), leaf("B"), leaf("C"), leaf("D")};
  const Tensor u = leaf("u");
  const int64_t T = u.size(1);
  const std::vector<const char*> names = {"log_dt", "log_A_re", "A_im", "B", "C", "D"};
  std::vector<Tensor> params = as_inputs(p);

  const Tensor K = s4d_kernel(p, T);
  CHECK_CLOSE(K.detach(), golden.at("K"), 1e-12);
  K.backward(golden.at("RK"));
  for (size_t i = 0; i + 1 < names.size(); ++i) {
    INFO("kernel gradient of " << std::string(names[i]));
    CHECK_CLOSE(params[i].grad(), golden.at(std::string("kernel_grad.") + names[i]), 1e-12);
    params[i].zero_grad();
  }
  const Tensor y = s4d(u, p);
  CHECK_CLOSE(y.detach(), golden.at("y"), 1e-12);
  y.backward(golden.at("R"));
  CHECK_CLOSE(u.grad(), golden.at("grad.u"), 1e-12);
  for (size_t i = 0; i < names.size(); ++i) {
    INFO("layer gradient of " << std::string(names[i]));
    CHECK_CLOSE(params[i].grad(), golden.at(std::string("grad.") + names[i]), 1e-12);
  }
}

TEST_CASE("s4d: S4D-Lin's initialisation, and bad sizes and Δ ranges named") {
  Generator gen(11);
  const S4dParameters p = s4d_init(4, 8, 1e-3, 1e-1, DType::Float64, &gen);
  CHECK(p.A_im.shape() == Shape{4, 4});
  CHECK(p.B.shape() == Shape{4, 4, 2});
  for (double log_dt : p.log_dt.to_vector()) CHECK((log_dt >= std::log(1e-3) && log_dt <= std::log(1e-1)));
  CHECK(p.A_im.to_vector()[3] == doctest::Approx(3 * M_PI));
  CHECK(std::exp(p.log_A_re.to_vector()[0]) == doctest::Approx(0.5));

  CHECK_THROWS_WITH_AS(s4d_init(4, 7, 1e-3, 1e-1), doctest::Contains("state size N must be even"), Error);
  CHECK_THROWS_WITH_AS(s4d_init(4, 0, 1e-3, 1e-1), doctest::Contains("state size N"), Error);
  CHECK_THROWS_WITH_AS(s4d_init(4, 8, 0.0, 1e-1), doctest::Contains("Δ range"), Error);
  CHECK_THROWS_WITH_AS(s4d_init(4, 8, 0.2, 0.1), doctest::Contains("dt_min <= dt_max"), Error);
  CHECK_THROWS_WITH_AS(s4d_init(0, 8, 1e-3, 1e-1), doctest::Contains("channel count H"), Error);

  S4dParameters bad = p;
  bad.B = Tensor::zeros({4, 3, 2}, DType::Float64);
  CHECK_THROWS_WITH_AS(s4d_kernel(bad, 5), doctest::Contains("B, C [H, N/2, 2]"), Error);
  CHECK_THROWS_WITH_AS(s4d_kernel(p, 0), doctest::Contains("length T must be >= 1"), Error);
  CHECK_THROWS_WITH_AS(s4d(Tensor::zeros({1, 5, 3}, DType::Float64), p), doctest::Contains("expected [B, T, H] with H = 4"),
                       Error);
  CHECK_THROWS_WITH_AS(long_conv(Tensor::zeros({1, 5, 3}, DType::Float64), Tensor::zeros({3, 6}, DType::Float64)),
                       doctest::Contains("expected u [B, T, H] and K [H, T]"), Error);
  Tensor state = Tensor::zeros({1, 4, 3, 2}, DType::Float64);
  CHECK_THROWS_WITH_AS(s4d_recurrent(Tensor::zeros({1, 5, 4}, DType::Float64), p, state),
                       doctest::Contains("expected [B, H, N/2, 2]"), Error);
}

TEST_CASE("s4d: S4Mixer — gradients (float64 gradcheck), decoding from the cache ≡ forward, its state") {
  Generator gen(14);
  nn::S4Mixer mixer({.C = 3, .N = 4, .dt_min = 1e-2, .dt_max = 0.3}, &gen);
  std::vector<std::string> names;
  for (const NamedTensor& p : mixer.named_parameters()) names.push_back(p.name);
  CHECK(names == std::vector<std::string>{"log_dt", "log_A_re", "A_im", "B", "C", "D", "w_o.weight", "w_o.bias"});
  CHECK(mixer.keeps_own_init("log_A_re"));
  CHECK(!mixer.keeps_own_init("w_o.weight"));
  CHECK(mixer.state_floats(10) == 3 * 4);
  CHECK(mixer.state_floats(100000) == 3 * 4);
  const Tensor x = ag::test::random({2, 9, 3}, 15);
  ag::test::check_module_gradients(mixer, x, [&](const Tensor& in) { return mixer.forward(in); });

  const Tensor full = mixer.forward(x.detach()).detach();
  LayerKVCache cache;
  std::vector<Tensor> rows = {mixer.forward_cached(slice(x.detach(), 1, 0, 4), cache)};  // a prefix, then one at a time
  for (int64_t t = 4; t < 9; ++t) rows.push_back(mixer.forward_cached(slice(x.detach(), 1, t, t + 1), cache));
  CHECK(cache.length == 9);
  CHECK(cache.state.shape() == Shape{2, 3, 2, 2});
  CHECK_CLOSE(concat(rows, 1), full, 1e-12);

  CHECK_THROWS_WITH_AS(nn::S4Mixer({.C = 3, .N = 5}), doctest::Contains("state size N must be even"), Error);
  CHECK_THROWS_WITH_AS(nn::S4Mixer({.C = 3, .N = 4, .dt_min = 0.5, .dt_max = 0.1}), doctest::Contains("Δ range"), Error);
  CHECK_THROWS_WITH_AS(mixer.set_head_gates(Tensor::ones({3})), doctest::Contains("no heads"), Error);
}

// The cuFFT convolution, the kernel's generation and its backward, and the recurrence, on the
// device against the CPU in float64 (T = 300: a non-trivial FFT length, 1024).
TEST_CASE_EVERY_DEVICE("s4d: the layer and the recurrence, CPU against the device") {
  if (device == Device::CPU) return;  // the CPU is the reference (the cases above)
  std::vector<Tensor> x = {ag::test::random({2, 300, 3}, 12)};
  for (const Tensor& t : as_inputs(random_parameters(3, 4, 13))) x.push_back(t);
  ag::test::check_device_matches_cpu(device, [](const std::vector<Tensor>& in) { return s4d(in[0], from_inputs(in, 1)); },
                                     x, 1e-12, DType::Float64);
  Tensor cpu_state, device_state;
  const Tensor cpu = s4d_recurrent(x[0].detach(), from_inputs(x, 1), cpu_state);
  std::vector<Tensor> on_device;
  for (const Tensor& t : x) on_device.push_back(t.detach().to(device));
  const Tensor gpu = s4d_recurrent(on_device[0], from_inputs(on_device, 1), device_state);
  CHECK_CLOSE(gpu.to(Device::CPU), cpu, 1e-12);
  CHECK_CLOSE(device_state.to(Device::CPU), cpu_state, 1e-12);
}

TEST_CASE("s4: a GPT generating token by token from the modes' state in its KV cache gives the full forward's logits") {
  Generator gen(1);
  nn::GPT model(s4_model(), gen);
  model.to(DType::Float64);
  ag::test::check_decode_from_state(model, 2 * (16 * 8 * 8));  // two layers of the state [1, C, N/2, 2] in float64
}

TEST_CASE("s4: the GPT's parameters — S4D's keep S4D-Lin's init, W_O takes the GPT's — and the lab's state, C·N per layer") {
  Generator gen(2);
  nn::GPT model(s4_model(), gen);
  std::map<std::string, Tensor> p;
  for (const NamedTensor& t : model.named_parameters()) p[t.name] = t.tensor;
  CHECK(p.at("blocks.1.attn.log_A_re").shape() == Shape{16, 4});
  CHECK(p.at("blocks.1.attn.B").shape() == Shape{16, 4, 2});
  CHECK(p.at("blocks.0.attn.A_im").to_vector()[3] == doctest::Approx(3 * M_PI));  // A_n = −½ + iπn, kept
  CHECK(!p.count("blocks.0.attn.w_q.weight"));

  nn::GPTConfig config = test::gpt_sizes(64, 256, 2, 2, 64);
  lab::apply_mixer("s4:s4-state=16", config);
  CHECK(config.attention == AttentionFunction::S4);
  CHECK(lab::state_floats(config) == config.n_layer * 16 * config.n_embd);
  config.block_size = 1024;
  CHECK(lab::state_floats(config) == config.n_layer * 16 * config.n_embd);
  CHECK(nn::training_step_flops(config, 2, 256) > 0);
}

TEST_CASE("s4: bad options and a checkpoint missing an S4 tensor are clear errors naming the option or the tensor") {
  Generator gen(1);
  const auto build_error = [&](const nn::GPTConfig& c) { return ag::test::error_of([&] { nn::GPT model(c, gen); }); };
  nn::GPTConfig bad = s4_model();
  bad.s4_state = 7;
  CHECK(build_error(bad).find("--s4-state 7 is odd") != std::string::npos);
  bad = s4_model();
  bad.s4_state = 0;
  CHECK(build_error(bad).find("--s4-state must be in [2, 4096], got 0") != std::string::npos);
  bad = s4_model();
  bad.s4_dt_min = 0.2;
  bad.s4_dt_max = 0.1;
  CHECK(build_error(bad).find("--s4-dt-min 0.2 is above --s4-dt-max 0.1") != std::string::npos);
  bad = s4_model();
  bad.s4_dt_min = 0;
  CHECK(build_error(bad).find("--s4-dt-min 0 must be > 0") != std::string::npos);
  bad = s4_model();
  bad.position = PositionEncoding::Rope;
  CHECK(build_error(bad).find("--attention s4 has none") != std::string::npos);
  bad = s4_model();
  bad.position = PositionEncoding::Alibi;
  CHECK(build_error(bad).find("alibi") != std::string::npos);
  bad = s4_model();
  bad.attn_window = 4;
  CHECK(build_error(bad).find("is an option of softmax attention") != std::string::npos);
  nn::GPTConfig softmax = test::gpt_sizes(11, 20, 2, 2, 16);
  softmax.s4_state = 16;
  CHECK(build_error(softmax).find("--s4-state 16 is an option of s4 attention") != std::string::npos);

  const ag::test::TempDir dir("s4_checkpoints");
  nn::GPT model(s4_model(), gen);
  const std::string good = dir.file("good.safetensors");
  char_lm::save_model(good, model, text::Tokenizer::from_text("abcdefghijk"), 0);
  const SafetensorsFile file = load_safetensors(good);
  CHECK(file.metadata.at("attention") == "s4");
  CHECK(file.metadata.at("s4_state") == "8");
  CHECK(char_lm::load_model(good).model->config().s4_state == 8);
  nn::GPT softmax_model(test::gpt_sizes(11, 20, 2, 2, 16), gen);  // other models' files keep their keys of before s4
  char_lm::save_model(dir.file("softmax.safetensors"), softmax_model, text::Tokenizer::from_text("abcdefghijk"), 0);
  CHECK(!load_safetensors(dir.file("softmax.safetensors")).metadata.count("s4_state"));
  CHECK(load_safetensors(dir.file("softmax.safetensors")).metadata.count("ssd_conv"));
  for (const std::string missing : {"blocks.1.attn.B", "blocks.0.attn.log_dt", "blocks.0.attn.w_o.weight"}) {
    std::vector<NamedTensor> tensors;
    for (const NamedTensor& t : file.tensors)
      if (t.name != missing) tensors.push_back(t);
    const std::string path = dir.file("edited.safetensors");
    save_safetensors(path, tensors, file.metadata);
    const std::string message = "has no tensor '" + missing + "'";
    CHECK_THROWS_WITH_AS(char_lm::load_model(path), doctest::Contains(message.c_str()), Error);
  }
  Metadata other_state = file.metadata;
  other_state["s4_state"] = "16";  // the tensors' N is 8
  save_safetensors(dir.file("state.safetensors"), file.tensors, other_state);
  CHECK_THROWS_WITH_AS(char_lm::load_model(dir.file("state.safetensors")),
                       doctest::Contains("'blocks.0.attn.log_A_re' is [16,4] but __metadata__ (n_embd, s4_state) says [16,8]"),
                       Error);
}

TEST_CASE("s4: char_lm trains an s4 model, resumes it, samples the same text from the state as recomputed — grads, eval") {
  const ag::test::TempDir dir("s4_char_lm");
  char_lm::TrainConfig c = ag::test::tiny_run(dir.path());
  c.model.attention = AttentionFunction::S4;
  c.model.s4_state = 8;
  c.run.max_iters = 4;
  char_lm::train(c);
  char_lm::TrainConfig resumed = c;
  resumed.run.max_iters = 6;
  resumed.run.resume = true;
  CHECK(char_lm::train(resumed).batch_losses.size() == 2);
  const std::string path = char_lm::model_path(char_lm::find_checkpoint(dir.path()));
  const SafetensorsFile file = load_safetensors(path);
  CHECK(file.metadata.at("attention") == "s4");
  CHECK(file.metadata.at("iter") == "6");
  CHECK(load_safetensors(char_lm::train_state_path(char_lm::find_checkpoint(dir.path()))).metadata.at("s4-state") == "8");
  CHECK(file.contains("blocks.0.attn.log_A_re"));
  ag::test::check_own_mixer_programs(dir, c.run.data, "--attention s4 --s4-state 4",
                                     {"blocks.0.attn.log_dt", "blocks.0.attn.log_A_re", "blocks.0.attn.B", "blocks.0.attn.C",
                                      "blocks.0.attn.w_o.weight"});
  int status = 0;
  std::string output;
  {  // the report draws each layer's kernel where a softmax model's attention maps are
    std::tie(status, output) = ag::test::run_char_lm(
        "report --ckpt '" + dir.path() + "' --prompt 'the king' --data '" + c.run.data +
        "' --eval-iters 1 --batch-size 2 --steps 4 --tokens 10 --prompts 1 --positions 2 --out '" + dir.file("report.html") + "'");
    INFO(output);
    REQUIRE(status == 0);
    const std::string html = ag::test::read_file(dir.file("report.html"));
    REQUIRE(html.find("<section id=\"s4-kernels\">") != std::string::npos);
    const std::string kernels = html.substr(html.find("<section id=\"s4-kernels\">"));
    CHECK(kernels.find("layer 0: A_ij = K_{i−j} of its 4 strongest channels") != std::string::npos);
    CHECK(kernels.find("layer 0: the same channels&apos; K_ℓ against the lag ℓ") != std::string::npos);
    CHECK(html.find("<section id=\"rollout\">") == std::string::npos);
    CHECK(html.find("--attention s4 has no heads") != std::string::npos);
    const std::string first = kernels.substr(0, kernels.find("</svg>"));  // layer 0's matrices: 4 panels of 8×8
    size_t cells = 0, masked = 0;
    for (size_t at = 0; (at = first.find("class=\"cell\"", at)) != std::string::npos; ++at) ++cells;
    for (size_t at = 0; (at = first.find("class=\"masked\"", at)) != std::string::npos; ++at) ++masked;
    CHECK(cells == 4 * 8 * 9 / 2);
    CHECK(masked == 4 * 8 * 7 / 2);
  }
  std::tie(status, output) = ag::test::run_char_lm("train --attention s4 --s4-state 5 --data '" + c.run.data +
                                                      "' --out '" + dir.file("odd") + "'");
  CHECK(status != 0);
  CHECK(output.find("--s4-state 5 is odd") != std::string::npos);
}

}  // namespace s4_test
