// Looking inside a model (examples/interp/, char_lm's attention | explain | heads
// | report): the pictures parse and hold what they claim, rollout rows sum to
// 1, integrated gradients are complete, a gate of 0 removes a head in the
// output and in the gradients, head importance is ∂L/∂g_h, a pruned model
// loads and samples.
#include <doctest/doctest.h>

#include <cmath>
#include <filesystem>
#include <fstream>
#include <numeric>
#include <regex>
#include <sstream>
#include <tuple>

#include "core/autograd.h"
#include "core/ops.h"
#include "examples/common/checkpoint.h"
#include "examples/interp/analysis.h"
#include "examples/interp/faithfulness.h"
#include "examples/interp/svg.h"
#include "tests/char_lm_helpers.h"
#include "tests/helpers.h"

// The file's names and using-directives stay its own in a unity build, where the test
// files compile as one translation unit (CMakeLists.txt).
namespace interp_test {

using namespace ag;

namespace {

// A GPT of float64 random weights: no training needed where only the algebra is tested.
std::unique_ptr<nn::GPT> random_gpt(int64_t n_layer = 2, int64_t n_head = 2) {
  nn::GPTConfig c = test::gpt_sizes(11, 8, n_layer, n_head, 8);
  Generator gen(7);
  auto model = std::make_unique<nn::GPT>(c, gen);
  model->to(DType::Float64);
  model->eval();
  return model;
}

interp::TokenBatch random_batch(int64_t B, int64_t T, int64_t V, uint64_t seed) {
  Generator gen(seed);
  std::vector<int64_t> x(B * T), y(B * T);
  for (int64_t i = 0; i < B * T; ++i) {
    x[i] = static_cast<int64_t>(gen.integer(V));
    y[i] = static_cast<int64_t>(gen.integer(V));
  }
  return {Tensor::from_indices(x, {B, T}), Tensor::from_indices(y, {B, T})};
}

Tensor parameter(nn::GPT& model, const std::string& name) {
  for (const NamedTensor& p : model.named_parameters())
    if (p.name == name) return p.tensor;
  FAIL("no parameter " << name);
  return {};
}

// A char_lm run trained here, once per process, on made-up English (2 layers of
// 2 heads): its loss falls from ln V ≈ 3.3 to about 1.4 nats.
struct TrainedRun {
  test::TempDir dir{"interp_run"};
  char_lm::TrainResult result;
  TrainedRun() {
    char_lm::TrainConfig c = test::tiny_run(dir.file("run"));
    c.model.n_layer = 2;
    c.model.dropout = 0.0;
    c.optim.batch_size = 16;
    c.run.max_iters = 400;
    c.optim.lr_decay_iters = 400;
    c.run.eval_interval = 100;
    c.run.eval_iters = 4;
    result = char_lm::train(c);
  }
  std::string run() const { return dir.file("run"); }
};
const TrainedRun& trained_run() {
  static const TrainedRun run;
  return run;
}

std::string read_file_text(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  REQUIRE_MESSAGE(in, "cannot read " << path);
  std::ostringstream text;
  text << in.rdbuf();
  return text.str();
}

// The texts of an SVG's colour scale (svg.cpp's group "colour-scale"), in order.
std::vector<std::string> colour_scale_labels(const std::string& svg) {
  const size_t begin = svg.find("<g class=\"colour-scale\">");
  REQUIRE_MESSAGE(begin != std::string::npos, "no colour scale in the SVG");
  const std::string group = svg.substr(begin, svg.find("</g>", begin) - begin);
  std::vector<std::string> labels;
  const std::regex text("<text[^>]*>([^<]*)</text>");
  for (auto m = std::sregex_iterator(group.begin(), group.end(), text); m != std::sregex_iterator(); ++m)
    labels.push_back((*m)[1]);
  return labels;
}

// The smallest text of each <svg> in `page` as a browser draws it in a column
// `column` px wide: the report's CSS (max-width: 100%) shrinks a wider SVG by
// column / width, and its font sizes with it.
double smallest_rendered_font(const std::string& page, double column) {
  double smallest = INFINITY;
  const std::regex font("font-size=\"([0-9.]+)\""), width("<svg [^>]*width=\"([0-9.]+)\"");
  for (size_t at = page.find("<svg "); at != std::string::npos; at = page.find("<svg ", at + 1)) {
    const std::string svg = page.substr(at, page.find("</svg>", at) - at);
    std::smatch w;
    REQUIRE(std::regex_search(svg, w, width));
    const double shrink = std::min(1.0, column / std::stod(w[1]));
    for (auto m = std::sregex_iterator(svg.begin(), svg.end(), font); m != std::sregex_iterator(); ++m)
      smallest = std::min(smallest, std::stod((*m)[1]) * shrink);
  }
  return smallest;
}

// logit[position, target] of a model fed the token embeddings E [T·C] directly (float64, no graph).
double logit_from_embeddings(nn::GPT& model, const std::vector<double>& E, int64_t position, int64_t target) {
  NoGradGuard no_grad;
  const int64_t C = model.config().n_embd, V = model.config().vocab_size, T = static_cast<int64_t>(E.size()) / C;
  return model.forward_embedded(Tensor::from_vector(E, {1, T, C}, DType::Float64)).to_vector()[position * V + target];
}

}  // namespace

TEST_CASE("interp: the tiny run used below is genuinely trained") {
  const TrainedRun& run = trained_run();
  REQUIRE(run.result.evals.size() >= 2);
  INFO("val loss " << run.result.evals.front().val_loss << " -> " << run.result.evals.back().val_loss);
  CHECK(run.result.evals.front().val_loss > 3.0);
  CHECK(run.result.evals.back().val_loss < 1.6);
}

TEST_CASE("interp: char_lm attention writes one SVG per layer, well-formed, with a cell per (head, query, key)") {
  const TrainedRun& run = trained_run();
  test::TempDir out("interp_attention");
  const std::string too_long = "the king and my lord";  // 20 characters, block_size 16
  int status = 0;
  std::string output;
  std::tie(status, output) =
      test::run_char_lm("attention --ckpt '" + run.run() + "' --prompt 'the king and my' --out '" + out.path() + "'");
  INFO(output);
  REQUIRE(status == 0);
  const int T = 15, H = 2;  // "the king and my"
  for (const std::string file : {"layer-0.svg", "layer-1.svg"}) {
    std::map<std::string, int> counts = test::count_svg_elements(out.file(file));
    CHECK(counts["rect.cell"] == H * T * (T + 1) / 2);  // query i sees keys 0..i
    CHECK(counts["rect.masked"] == H * T * (T - 1) / 2);
    CHECK(counts["pattern"] == 1);
  }
  // Each picture says what its colours mean, in numbers, in text at least 11 px high.
  for (const std::string file : {"layer-0.svg", "layer-1.svg"}) {
    const std::string svg = read_file_text(out.file(file));
    CHECK(colour_scale_labels(svg) == std::vector<std::string>{"0", "0.25", "0.5", "0.75", "1", "masked"});
    CHECK(smallest_rendered_font(svg, INFINITY) >= 11);
  }
  const std::string rollout_text = read_file_text(out.file("rollout.svg"));
  const std::vector<std::string> rollout_scale = colour_scale_labels(rollout_text);
  REQUIRE(rollout_scale.size() == 6);
  CHECK(rollout_scale.front() == "0");
  CHECK(std::stod(rollout_scale[4]) > 0.0);  // the largest weight below the first row: the rollout panel's full scale
  CHECK(std::stod(rollout_scale[4]) < 1.0);
  CHECK(rollout_text.find("dark blue: " + rollout_scale[4]) != std::string::npos);
  std::map<std::string, int> rollout = test::count_svg_elements(out.file("rollout.svg"));
  CHECK(rollout["rect.cell"] == T * (T + 1) / 2);
  CHECK(test::count_svg_elements(out.file("flow.svg"))["rect.cell"] == T * (T + 1) / 2);
  CHECK(output.find("flow.svg (225 max-flows over 2 layers of 15 positions in ") != std::string::npos);
  CHECK(!std::filesystem::exists(out.file("layer-2.svg")));
  // A prompt longer than the context is refused, not cut silently.
  std::tie(status, output) = test::run_char_lm("attention --ckpt '" + run.run() + "' --prompt '" + too_long + "' --out '" +
                                               out.path() + "' --overwrite");
  CHECK(status != 0);
  CHECK(output.find("more than the model's block_size") != std::string::npos);
  // The maps written above are not replaced without --overwrite.
  std::tie(status, output) =
      test::run_char_lm("attention --ckpt '" + run.run() + "' --prompt 'the king' --out '" + out.path() + "'");
  CHECK(status == 1);
  CHECK(output.find("attention: '" + out.path() + "' holds files already; pass --overwrite") != std::string::npos);
}

TEST_CASE("interp: train keeps loss.svg, a chart of the log's train and val losses and the learning rate") {
  const TrainedRun& run = trained_run();
  std::map<std::string, int> counts = test::count_svg_elements(run.run() + "/loss.svg");
  CHECK(counts["polyline"] == 4);  // batch, train and val loss; learning rate
  CHECK(counts["circle"] == 2 * static_cast<int>(run.result.evals.size()));  // a marker per evaluation and split
}

TEST_CASE("interp: a sparse model's attention SVGs hatch what its pattern hides, not only the future") {
  // Window 3 and 1 global key: query i sees keys max(0, i − 2)..i and key 0, so
  // over T = 15 queries a head sees 1 + 2 + 3 + 12·4 = 54 of its 225 cells.
  test::TempDir dir("interp_sparse");
  char_lm::TrainConfig c = test::tiny_run(dir.file("run"));
  c.model.n_layer = 2;
  c.model.attn_window = 3;
  c.model.attn_global = 1;
  c.run.max_iters = 2;
  c.run.eval_interval = 2;
  c.run.eval_iters = 1;
  char_lm::train(c);
  int status = 0;
  std::string output;
  std::tie(status, output) = test::run_char_lm("attention --ckpt '" + dir.file("run") + "' --prompt 'the king and my' --out '" +
                                                dir.file("maps") + "'");
  INFO(output);
  REQUIRE(status == 0);
  const int T = 15, H = static_cast<int>(c.model.n_head), visible = 54;
  for (const std::string file : {"layer-0.svg", "layer-1.svg"}) {
    std::map<std::string, int> counts = test::count_svg_elements(dir.file("maps/" + file));
    CHECK(counts["rect.cell"] == H * visible);
    CHECK(counts["rect.masked"] == H * (T * T - visible));
  }
  // Rollout composes the layers: every earlier position can reach a query.
  CHECK(test::count_svg_elements(dir.file("maps/rollout.svg"))["rect.cell"] == T * (T + 1) / 2);
}

TEST_CASE("interp: char_lm report: colour scales with numbers, attributions as text, text >= 11 px at 1000 px, only options that apply") {
  const TrainedRun& run = trained_run();
  test::TempDir out("interp_report");
  int status = 0;
  std::string output;
  std::tie(status, output) = test::run_char_lm("report --ckpt '" + run.run() + "' --prompt 'the king and my' --data '" +
                                                test::generated_text_file() + "' --eval-iters 2 --batch-size 4 --steps 8 " +
                                                "--tokens 20 --prompts 2 --positions 2 --out '" + out.file("report.html") + "'");
  INFO(output);
  REQUIRE(status == 0);
  const std::string html = read_file_text(out.file("report.html"));
  const std::string attention = html.substr(html.find("<section id=\"attention\">"));
  CHECK(colour_scale_labels(attention) == std::vector<std::string>{"0", "0.25", "0.5", "0.75", "1", "masked"});
  CHECK(colour_scale_labels(html.substr(html.find("<section id=\"rollout\">"))).size() == 6);
  // Every character's attribution is written under it (15 of them), and the ramp's ends are numbered.
  const std::string attributions = html.substr(html.find("<section id=\"attributions\">"));
  const std::regex value("<small>[+-][0-9]+\\.[0-9]{2}</small>");
  CHECK(std::distance(std::sregex_iterator(attributions.begin(), attributions.end(), value), std::sregex_iterator()) == 15);
  CHECK(std::regex_search(attributions, std::regex("<p class=\"scale\">-[0-9.]+ <span class=\"ramp\"></span> \\+[0-9.]+</p>")));
  // The README's screenshot width, 1000 px, less the body's margins (checked here) is the column the SVGs fit.
  REQUIRE(html.find("body{font-family:sans-serif;margin:24px;") != std::string::npos);
  CHECK(smallest_rendered_font(html, 1000 - 2 * 24) >= 11);
  const std::regex css_font("font-size:([0-9.]+)px");
  for (auto m = std::sregex_iterator(html.begin(), html.end(), css_font); m != std::sregex_iterator(); ++m)
    CHECK(std::stod((*m)[1]) >= 11);
  // A dense softmax model: no linear-attention or sparse-pattern options, in either list.
  const std::string config = html.substr(html.find("<section id=\"config\">"), html.find("<section id=\"loss\">") - html.find("<section id=\"config\">"));
  CHECK(config.find("n_layer = 2") != std::string::npos);
  CHECK(config.find("attn-impl = ") != std::string::npos);
  for (const char* absent : {"feature_map", "feature-map", "n_features", "n-features", "attn_dilation", "attn-dilation",
                             "attn_seed", "attn-seed", "attn_global", "attn-global"}) {
    INFO(absent);
    CHECK(config.find(absent) == std::string::npos);
  }
}

TEST_CASE("interp: GPTConfig::applies leaves out the options of the parts a model does not use") {
  nn::GPTConfig c;
  CHECK(c.applies("n_layer"));
  CHECK(c.applies("attn_window"));
  for (const char* unused : {"attn_dilation", "attn_global", "attn_random_blocks", "attn_seed", "feature_map", "n_features"})
    CHECK_MESSAGE(!c.applies(unused), unused);
  c.attn_window = 8;
  CHECK(c.applies("attn_dilation"));
  CHECK(c.applies("attn_global"));
  CHECK(!c.applies("attn_seed"));  // nothing random without random blocks
  c.attn_random_blocks = 1;
  CHECK(c.applies("attn_seed"));
  nn::GPTConfig linear;
  linear.attention = AttentionFunction::Linear;
  CHECK(linear.applies("feature_map"));
  CHECK(!linear.applies("n_features"));
  CHECK(!linear.applies("attn_window"));
  linear.feature_map = FeatureMap::Favor;
  CHECK(linear.applies("n_features"));
  CHECK(linear.applies("attn_seed"));
}

TEST_CASE("interp: char_lm compare draws one val-loss curve per run, named by the options the runs differ in") {
  test::TempDir dir("interp_compare");
  char_lm::TrainConfig one = test::tiny_run(dir.file("one"));
  one.run.max_iters = 10;
  one.run.eval_interval = 5;
  char_lm::TrainConfig two = one;
  two.run.out = dir.file("two");
  two.model.n_layer = 2;
  two.model.attn_impl = AttentionImpl::Flash;
  const size_t evaluations = char_lm::train(one).evals.size() + char_lm::train(two).evals.size();
  int status = 0;
  std::string output;
  std::tie(status, output) = test::run_char_lm("compare '" + dir.file("one") + "' '" + dir.file("two") + "' --out '" +
                                                dir.file("compare.svg") + "'");
  INFO(output);
  REQUIRE(status == 0);
  std::map<std::string, int> counts = test::count_svg_elements(dir.file("compare.svg"));
  CHECK(counts["polyline"] == 2);
  CHECK(counts["circle"] == static_cast<int>(evaluations));  // a marker per evaluation
  const std::string svg = read_file_text(dir.file("compare.svg"));
  CHECK(svg.find(">attn-impl=dense, n-layer=1</text>") != std::string::npos);
  CHECK(svg.find(">attn-impl=flash, n-layer=2</text>") != std::string::npos);
  CHECK(svg.find("n-head") == std::string::npos);  // the options they share are left out
  CHECK(smallest_rendered_font(svg, INFINITY) >= 11);

  const std::string missing = dir.file("no-such-run");
  std::tie(status, output) = test::run_char_lm("compare '" + dir.file("one") + "' '" + missing + "'");
  CHECK(status != 0);
  CHECK(output.find("'" + missing + "' does not exist") != std::string::npos);
  std::tie(status, output) = test::run_char_lm("compare '" + dir.file("one") + "'");
  CHECK(status != 0);
  CHECK(output.find("at least two run directories") != std::string::npos);
}

// Each refusal of the inspection commands no test made before (docs/reliability.md, "Refusals no test made").
TEST_CASE("interp: char_lm's commands refuse a missing or out-of-range option, each on its own") {
  const TrainedRun& run = trained_run();  // 2 layers of 2 heads, block 16
  const std::string ckpt = " --ckpt '" + run.run() + "'";
  const auto refused = [](const std::string& args, const std::string& words) {
    int status = 0;
    std::string output;
    std::tie(status, output) = test::run_char_lm(args);
    INFO(args << "\n" << output);
    CHECK(status != 0);
    CHECK(output.find(words) != std::string::npos);
  };
  refused("explain" + ckpt + " --prompt the --position 3", "--position 3 is outside the prompt's [0, 3)");
  refused("explain" + ckpt + " --prompt the --position -2", "--position must be in [-1, 1048576], got -2");  // the options' range, first
  refused("heads" + ckpt + " --data '" + test::generated_text_file() + "' --prune 1", "heads: --prune needs --out");
  refused("convert" + ckpt + " --n-kv-head 1", "convert: --out is required");
  test::TempDir out("interp_convert");
  refused("convert" + ckpt + " --n-kv-head 3 --out '" + out.file("three") + "'",
          "convert: the checkpoint's 2 kv heads do not split into --n-kv-head 3 equal groups");
  const char* required = "grads: --weights, --batch and --out are required";
  refused("grads --batch b.safetensors --out g.safetensors", required);
  refused("grads --weights m.safetensors --out g.safetensors", required);
  refused("grads --weights m.safetensors --batch b.safetensors", required);
  test::TempDir empty("interp_compare");
  refused("compare '" + run.run() + "' '" + empty.path() + "'", "' has no log.csv (is it a directory of char_lm train?)");
  // char_lm mask: a layer and a head the model has (each alone).
  refused("mask --n-layer 2 --n-head 2 --block-size 8 --layer 2 --head 0", "mask: --layer 2 --head 0 outside the model's 2 layers and 2 heads");
  refused("mask --n-layer 2 --n-head 2 --block-size 8 --layer 0 --head 2", "mask: --layer 0 --head 2 outside the model's 2 layers and 2 heads");
}

TEST_CASE("interp: heatmap_grid_svg escapes labels and marks masked cells apart from zero weights") {
  const std::string svg = interp::heatmap_grid_svg(
      "<&>", {{"h", {0.0, 0.0, 1.0, 0.0}}}, {"<", "&"}, [](size_t, int64_t i, int64_t j) { return j <= i; }, 600, "x");
  CHECK(svg.find("&lt;&amp;&gt;") != std::string::npos);
  CHECK(svg.find("<rect class=\"masked\"") != std::string::npos);
  CHECK(svg.find("fill=\"rgb(255,255,255)\"") != std::string::npos);  // the visible 0 (row 1, column 1) is white
  CHECK(svg.find("fill=\"url(#masked-x)\"") != std::string::npos);
}

// The lab's cost chart once met two cells' 0.225 one ulp apart: the axis's step fell
// below the values' resolution and the tick loop never ended (std::bad_alloc, 1 run in ~500).
TEST_CASE("interp: line_chart_svg draws values one rounding apart as one value, with a few ticks and no NaN") {
  const double a = 0.22499999999999998, b = 0.22500000000000001;
  REQUIRE(a < b);
  REQUIRE(std::nextafter(a, 1.0) == b);
  const interp::Series left{.name = "ms", .colour = "#1f77b4", .x = {16, 32}, .y = {a, b}};
  const interp::Series right{.name = "MB", .colour = "#ff7f0e", .x = {16, 32}, .y = {b, a}};
  for (const bool inset : {false, true}) {
    const std::string svg = interp::line_chart_svg(
        {.title = "t", .x_label = "x", .left_label = "l", .right_label = "r", .left = {left}, .right = {right}, .inset = inset});
    CHECK(svg.find("nan") == std::string::npos);
    CHECK(svg.find("inf") == std::string::npos);
    const size_t left_ticks = test::occurrences(svg, "text-anchor=\"end\"");
    CHECK(left_ticks >= 1);
    CHECK(left_ticks <= 11);
  }
}

TEST_CASE("interp: attention rollout rows sum to 1 and compose the layers as ½A + ½I") {
  auto model = random_gpt(3, 2);
  const std::vector<int64_t> ids = {1, 4, 2, 9, 3, 0, 7};
  const std::vector<Tensor> maps = interp::attention_maps(*model, ids);
  REQUIRE(maps.size() == 3);
  const Tensor R = interp::attention_rollout(maps);
  const int64_t T = 7;
  const std::vector<double> r = R.to_vector();
  for (int64_t i = 0; i < T; ++i) {
    double row = 0;
    for (int64_t j = 0; j < T; ++j) {
      row += r[i * T + j];
      if (j > i) CHECK(r[i * T + j] == 0.0);  // nothing flows from the future
    }
    CHECK(row == doctest::Approx(1.0).epsilon(1e-12));
  }
  // One layer: exactly ½ mean_h A + ½ I.
  const Tensor one = interp::attention_rollout({maps[0]});
  const Tensor expected = mean(maps[0], 0) * 0.5 + Tensor::from_vector([&] {
    std::vector<double> eye(T * T, 0.0);
    for (int64_t i = 0; i < T; ++i) eye[i * T + i] = 0.5;
    return eye;
  }(), {T, T}, DType::Float64);
  CHECK_CLOSE(one, expected, 1e-15);
  // A pruned model's rollout averages the heads that are on: gates {1, 0} read head 0 alone.
  const Tensor head0 = slice(maps[0], 0, 0, 1);
  CHECK_CLOSE(interp::attention_rollout({maps[0]}, {{1, 0}}), interp::attention_rollout({head0}), 1e-15);
}

TEST_CASE("interp: a head with gate 0 adds nothing to the output, and its W_Q, W_K, W_V get zero gradient") {
  for (const AttentionImpl impl : ag::test::attention_impls()) {
    INFO("attention implementation " << name_of(impl));
    auto model = random_gpt(1, 2);
    model->set_attention_impl(impl);
    const interp::TokenBatch batch = random_batch(2, 6, 11, 3);
    const int64_t C = 8, d_h = 4;  // head 1 owns columns 4..7
    model->set_head_mask("10");
    const Tensor before = model->forward(batch.x).detach().clone();
    // Changing head 1's query, key and value weights changes nothing while its gate is 0.
    for (const char* name : {"blocks.0.attn.w_q.weight", "blocks.0.attn.w_k.weight", "blocks.0.attn.w_v.weight"}) {
      Tensor w = parameter(*model, name);
      double* data = w.data<double>();
      for (int64_t r = 0; r < C; ++r)
        for (int64_t c = d_h; c < 2 * d_h; ++c) data[r * C + c] += 0.3 * static_cast<double>(r - c);
    }
    const Tensor after = model->forward(batch.x);
    CHECK(test::relative_error(after, before) == 0.0);
    model->set_head_mask("");
    CHECK(test::relative_error(model->forward(batch.x), before) > 1e-3);  // with the gate on, the change shows

    model->set_head_mask("10");
    model->zero_grad();
    model->loss(batch.x, batch.y).backward();
    for (const char* name : {"w_q", "w_k", "w_v"}) {
      const std::vector<double> dW = parameter(*model, std::string("blocks.0.attn.") + name + ".weight").grad().to_vector();
      const std::vector<double> db = parameter(*model, std::string("blocks.0.attn.") + name + ".bias").grad().to_vector();
      double head0 = 0, head1 = 0;
      for (int64_t r = 0; r < C; ++r)
        for (int64_t c = 0; c < C; ++c) (c < d_h ? head0 : head1) += std::fabs(dW[r * C + c]);
      for (int64_t c = d_h; c < C; ++c) head1 += std::fabs(db[c]);
      INFO(name);
      CHECK(head1 == 0.0);
      CHECK(head0 > 0.0);
    }
  }
}

TEST_CASE("interp: gated attention passes float64 gradcheck in the input, the gates and every weight") {
  Generator gen(11);
  nn::MultiHeadSelfAttention attn({.C = 8, .H = 2}, {.impl = AttentionImpl::Dense}, &gen);
  Tensor gates = Tensor::from_vector({0.7, -1.3}, {2}, DType::Float64);
  gates.requires_grad_();
  attn.set_head_gates(gates);
  std::vector<Tensor> inputs = {test::random({2, 5, 8}, 21)};
  attn.to(DType::Float64);
  inputs.push_back(gates);
  for (const NamedTensor& p : attn.named_parameters())
    if (!p.name.ends_with("w_k.bias")) inputs.push_back(p.tensor);  // its gradient is 0 (tests/helpers.h says why)
  CHECK_GRADCHECK([&](const std::vector<Tensor>& in) { return attn.forward(in[0]); }, inputs);
}

TEST_CASE("interp: head importance is |∂L/∂g_h|, as central differences of the loss in g_h give it") {
  // The trained model in float64: its gates matter (|∂L/∂g_h| ~ 1e-2), so the differences are far above rounding.
  const TrainedRun& run = trained_run();
  char_lm::LoadedModel loaded =
      char_lm::load_model(char_lm::model_path(char_lm::find_checkpoint(run.run())), DType::Float64);
  nn::GPT& model = *loaded.model;
  const interp::TokenBatch batch = random_batch(3, 16, model.config().vocab_size, 5);
  const std::vector<std::vector<double>> importance = interp::head_importance(model, {batch});
  const double eps = 1e-5;
  for (int64_t l = 0; l < 2; ++l)
    for (int64_t h = 0; h < 2; ++h) {
      const auto loss_at = [&](double g) {
        std::vector<double> gates = {1.0, 1.0};
        gates[h] = g;
        model.block(l).attn().set_head_gates(Tensor::from_vector(gates, {2}, DType::Float64));
        const double L = interp::mean_loss(model, {batch});
        model.block(l).attn().set_head_gates(Tensor());
        return L;
      };
      const double fd = (loss_at(1 + eps) - loss_at(1 - eps)) / (2 * eps);
      INFO("layer " << l << " head " << h << ": backward " << importance[l][h] << ", differences " << fd);
      CHECK(importance[l][h] == doctest::Approx(std::fabs(fd)).epsilon(1e-6));
      CHECK(importance[l][h] > 1e-3);
    }
  // The model's own gates are back: undefined, every head on.
  CHECK(!model.block(0).attn().head_gates().defined());
}

TEST_CASE("interp: head_mask text and gates convert both ways, and a malformed mask is refused") {
  nn::GPTConfig c;
  c.n_layer = 2;
  c.n_head = 3;
  c.head_mask = "101/011";
  CHECK(c.head_gates() == std::vector<std::vector<double>>{{1, 0, 1}, {0, 1, 1}});
  CHECK(nn::head_mask_text(c.head_gates()) == "101/011");
  CHECK(nn::head_mask_text({{1, 1}, {1, 1}}).empty());
  for (const char* bad : {"101", "101/0111", "101/0a1", "101,011", "1010111"}) {
    c.head_mask = bad;
    CHECK_THROWS_AS(c.check(), Error);
  }
  CHECK(interp::prune_least_important({{0.3, 0.1}, {0.2, 0.4}}, {{1, 1}, {1, 1}}, 2) ==
        std::vector<std::vector<double>>{{1, 0}, {0, 1}});
  CHECK(interp::prune_least_important({{0.3, 0.1}, {0.2, 0.4}}, {{1, 0}, {1, 1}}, 1) ==
        std::vector<std::vector<double>>{{1, 0}, {0, 1}});  // a head already off is not counted again
}

TEST_CASE("interp: forward_embedded equals forward on the looked-up embeddings and passes gradcheck in them") {
  auto model = random_gpt(2, 2);
  const std::vector<int64_t> ids = {3, 1, 4, 1, 5};
  const Tensor idx = Tensor::from_indices(ids, {1, 5});
  CHECK(test::relative_error(model->forward_embedded(model->token_embeddings(idx)), model->forward(idx)) == 0.0);
  Tensor E = model->token_embeddings(idx).detach().clone();
  E.requires_grad_();
  // A few logits, so that the check covers several rows of the output.
  CHECK_GRADCHECK([&](const std::vector<Tensor>& in) { return slice(model->forward_embedded(in[0]), 2, 0, 3); },
                  std::vector<Tensor>{E});
}

TEST_CASE("interp: integrated gradients are complete on the trained model (residual < 1 % of |D| at 64 steps)") {
  const TrainedRun& run = trained_run();
  const char_lm::LoadedModel loaded = char_lm::load_model(char_lm::model_path(char_lm::find_checkpoint(run.run())));
  const std::vector<int64_t> ids = loaded.tokenizer.encode("the king and my");
  for (const int64_t position : {14, 7}) {
    const interp::Attribution a = interp::integrated_gradients(*loaded.model, ids, position, 64);
    const double D = a.f_input - a.f_baseline;
    INFO("position " << position << ": S " << a.sum << ", D " << D << ", residual " << a.residual());
    CHECK(a.residual() < 0.01 * std::fabs(D));
    CHECK(std::fabs(D) > 1.0);  // a real difference to explain
    for (size_t t = position + 1; t < ids.size(); ++t) CHECK(a.per_position[t] == 0.0);  // the future plays no part
    // The target is the model's own prediction there.
    const Tensor logits = loaded.model->forward(Tensor::from_indices(ids, {1, 15}));
    CHECK(a.f_input == doctest::Approx(logits.to_vector()[position * loaded.model->config().vocab_size + a.target])
                           .epsilon(1e-5));
  }
}

TEST_CASE("interp: char_lm explain prints each character's attribution and the completeness line") {
  const TrainedRun& run = trained_run();
  int status = 0;
  std::string output;
  std::tie(status, output) = test::run_char_lm("explain --ckpt '" + run.run() + "' --prompt 'the king and my'");
  INFO(output);
  REQUIRE(status == 0);
  CHECK(output.find("completeness: attributions sum ") != std::string::npos);
  CHECK(output.find("F(x) − F(baseline)") != std::string::npos);
  CHECK(output.find("\n      14  ") != std::string::npos);  // a line per position, the last 14
  CHECK(output.find("\n      15  ") == std::string::npos);
}

TEST_CASE("interp: char_lm heads --prune K writes a model with K heads off that loads and samples") {
  const TrainedRun& run = trained_run();
  test::TempDir out("interp_pruned");
  int status = 0;
  std::string output;
  std::tie(status, output) = test::run_char_lm("heads --ckpt '" + run.run() + "' --data '" +
                                                  test::generated_text_file() + "' --eval-iters 2 --batch-size 4 " +
                                                  "--prune 1 --out '" + out.path() + "'");
  INFO(output);
  REQUIRE(status == 0);
  CHECK(output.find("val loss before ") != std::string::npos);
  const char_lm::LoadedModel pruned = char_lm::load_model(char_lm::model_path(out.path()));
  const std::string mask = pruned.model->config().head_mask;
  CHECK(std::count(mask.begin(), mask.end(), '0') == 1);
  CHECK(std::count(mask.begin(), mask.end(), '1') == 3);
  CHECK(output.find("head_mask " + mask) != std::string::npos);
  int sample_status = 0;
  std::string sample;
  std::tie(sample_status, sample) = test::run_char_lm("sample --ckpt '" + out.path() + "' --tokens 40 --prompt the");
  INFO(sample);
  CHECK(sample_status == 0);
  CHECK(sample.size() >= 40);
  // An unpruned model's file has no head_mask key, as before pruning existed.
  const SafetensorsFile original = load_safetensors(char_lm::model_path(char_lm::find_checkpoint(run.run())));
  CHECK(original.metadata.count("head_mask") == 0);

  // --out holds a model now: refused as train refuses, unless --overwrite.
  const std::string prune = "heads --ckpt '" + run.run() + "' --data '" + test::generated_text_file() +
                            "' --eval-iters 1 --batch-size 2 --prune 2 --out '" + out.path() + "'";
  std::tie(status, output) = test::run_char_lm(prune);
  CHECK(status == 1);
  CHECK(output.find("heads --prune: '" + out.path() + "' holds a run already; pass --overwrite") != std::string::npos);
  CHECK(char_lm::load_model(char_lm::model_path(out.path())).model->config().head_mask == mask);
  std::tie(status, output) = test::run_char_lm(prune + " --overwrite");
  CHECK(status == 0);
  const std::string pruned_twice = char_lm::load_model(char_lm::model_path(out.path())).model->config().head_mask;
  CHECK(std::count(pruned_twice.begin(), pruned_twice.end(), '0') == 2);
}

TEST_CASE("cuda: training with a head switched off, and head importance, match the CPU") {
  if (!test::cuda_or_skip()) return;
  test::TempDir dir("interp_cuda");
  char_lm::TrainConfig c = test::tiny_run(dir.file("cpu"));
  c.model.dropout = 0;
  c.model.head_mask = "10";  // the gates go to the device with the model
  const char_lm::TrainResult cpu = char_lm::train(c);
  c.run.out = dir.file("cuda");
  c.run.device = Device::CUDA;
  const char_lm::TrainResult gpu = char_lm::train(c);
  REQUIRE(gpu.batch_losses.size() == cpu.batch_losses.size());
  for (size_t i = 0; i < cpu.batch_losses.size(); ++i) {
    CAPTURE(i);
    CHECK(std::abs(gpu.batch_losses[i] - cpu.batch_losses[i]) < 5e-5);
  }

  char_lm::LoadedModel loaded = char_lm::load_model(char_lm::model_path(char_lm::find_checkpoint(dir.file("cpu"))));
  const interp::TokenBatch batch = random_batch(2, 16, loaded.model->config().vocab_size, 9);
  const std::vector<std::vector<double>> on_cpu = interp::head_importance(*loaded.model, {batch});
  loaded.model->to(Device::CUDA);
  const std::vector<std::vector<double>> on_cuda = interp::head_importance(*loaded.model, {batch});
  for (size_t h = 0; h < 2; ++h) {
    CAPTURE(h);
    CHECK(on_cuda[0][h] == doctest::Approx(on_cpu[0][h]).epsilon(1e-4));
  }
}

// --- Is attention an explanation? (issue 28): flow, the explanations, erasure, Spearman -------------

TEST_CASE("faithfulness: attention flow equals max-flows computed by hand on small stacks") {
  // Two layers over T = 2 (edges go from layer l+1's position i down to layer l's j):
  //   top: 1→1 0.8, 1→0 0.2;  bottom: 1→1 0.7, 1→0 0.3;  0→0 1 in both.
  // To input 0: the path 1→0→0 carries min(0.2, 1) = 0.2, the path 1→1→0 min(0.8, 0.3) = 0.3: 0.5.
  // To input 1: only 1→1→1, min(0.8, 0.7) = 0.7. (Rollout: 0.2 + 0.8·0.3 = 0.44 and 0.8·0.7 = 0.56.)
  const std::vector<std::vector<double>> two_layers = {{1, 0, 0.3, 0.7}, {1, 0, 0.2, 0.8}};
  const std::vector<double> flows = interp::max_flows_from(two_layers, 2, 1);
  CHECK(flows[0] == doctest::Approx(0.5).epsilon(1e-12));
  CHECK(flows[1] == doctest::Approx(0.7).epsilon(1e-12));
  CHECK(interp::max_flows_from(two_layers, 2, 0) == std::vector<double>{1.0, 0.0});

  // A bottleneck over T = 3: the top sends 0.5 to each of positions 0 and 1 of the middle, which pass
  // 0.1 and 0.2 on to input 0 and 0.4 and 0.45 to input 1; the cut at the bottom edges bounds each.
  std::vector<std::vector<double>> bottleneck(2, std::vector<double>(9, 0.0));
  bottleneck[1][2 * 3 + 0] = 0.5, bottleneck[1][2 * 3 + 1] = 0.5;
  bottleneck[0][0 * 3 + 0] = 0.1, bottleneck[0][1 * 3 + 0] = 0.2;
  bottleneck[0][0 * 3 + 1] = 0.4, bottleneck[0][1 * 3 + 1] = 0.45;
  const std::vector<double> b = interp::max_flows_from(bottleneck, 3, 2);
  CHECK(b[0] == doctest::Approx(0.1 + 0.2).epsilon(1e-12));   // both bottom edges saturate
  CHECK(b[1] == doctest::Approx(0.4 + 0.45).epsilon(1e-12));  // 0.4 ≤ 0.5 and 0.45 ≤ 0.5
  CHECK(b[2] == 0.0);                                         // no edge reaches input 2

  // One layer: each flow is the single edge's capacity, Ã = ½ mean_h A + ½ I.
  const Tensor A = Tensor::from_vector({1, 0, 0, 0.5, 0.5, 0, 0.2, 0.3, 0.5,    //
                                        1, 0, 0, 0.1, 0.9, 0, 0.6, 0.2, 0.2}, {2, 3, 3}, DType::Float64);
  const std::vector<double> F = interp::attention_flow({A}).to_vector();
  const std::vector<double> mixed = interp::residual_mixed({A})[0];
  for (size_t k = 0; k < F.size(); ++k) CHECK(F[k] == doctest::Approx(mixed[k]).epsilon(1e-12));
  CHECK(F[2 * 3 + 0] == doctest::Approx(0.5 * 0.4).epsilon(1e-12));
}

TEST_CASE("faithfulness: flow on a model's maps is >= 0, each row within its capacity 1, and at least the rollout") {
  // Rollout's mass reaching j along all paths is itself a feasible flow to j (each edge carries at most its
  // capacity times the mass, which is <= 1, arriving at its upper end), so the maximum flow is at least that.
  auto model = random_gpt(3, 2);
  const std::vector<Tensor> maps = interp::attention_maps(*model, {1, 4, 2, 9, 3, 3, 7, 0});
  const std::vector<double> F = interp::attention_flow(maps).to_vector(), R = interp::attention_rollout(maps).to_vector();
  for (int64_t i = 0; i < 8; ++i)
    for (int64_t j = 0; j < 8; ++j) {
      INFO("output " << i << ", input " << j);
      CHECK(F[i * 8 + j] >= 0.0);
      CHECK(F[i * 8 + j] <= 1.0 + 1e-12);
      if (j > i) CHECK(F[i * 8 + j] == 0.0);
      CHECK(F[i * 8 + j] >= R[i * 8 + j] - 1e-12);
    }
  CHECK_THROWS_WITH(interp::max_flows_from({{1, 0, 0, 1}}, 2, 2), doctest::Contains("outside [0, 2)"));
  CHECK_THROWS_WITH(interp::max_flows_from({{1, -0.5, 0, 1}}, 2, 1), doctest::Contains("< 0"));
}

TEST_CASE("faithfulness: Spearman's rho with average ranks on known rankings, ties too") {
  CHECK(interp::average_ranks({10, 20, 20, 5}) == std::vector<double>{2, 3.5, 3.5, 1});
  CHECK(interp::spearman({1, 2, 3, 4}, {10, 20, 30, 40}) == doctest::Approx(1.0).epsilon(1e-15));
  CHECK(interp::spearman({1, 2, 3, 4}, {4, 3, 2, 1}) == doctest::Approx(-1.0).epsilon(1e-15));
  // scipy.stats.spearmanr([1, 2, 3, 4, 5], [5, 6, 7, 8, 7]) = 0.8207826816681233 = 8 / √95
  CHECK(interp::spearman({1, 2, 3, 4, 5}, {5, 6, 7, 8, 7}) == doctest::Approx(8 / std::sqrt(95.0)).epsilon(1e-15));
  // Ranks [1, 2.5, 2.5, 4] against [1, 2, 3, 4]: 4.5 / √(4.5 · 5) = 3 / √10.
  CHECK(interp::spearman({1, 2, 2, 3}, {1, 2, 3, 4}) == doctest::Approx(3 / std::sqrt(10.0)).epsilon(1e-15));
  CHECK(std::isnan(interp::spearman({1, 1, 1}, {1, 2, 3})));
  CHECK_THROWS_WITH(interp::spearman({1, 2}, {1, 2, 3}), doctest::Contains("same length"));
  CHECK(interp::order_by_score({0.1, 0.7, 0.7, -1}) == std::vector<int64_t>{1, 2, 0, 3});
}

TEST_CASE("faithfulness: the content-free control — uniform attention's flow ranks the positions by distance from t") {
  // Every layer's A uniform over the causal mask, A[i, j] = 1/(i+1): Ã[i, j] = 1/(2(i+1)) for j < i and
  // Ã[i, i] = ½ + 1/(2(i+1)). A path from (N, t) down to (0, j) visits positions in j … t only (causal: it can only
  // go to earlier positions, and it ends at j), so the farther j is, the more paths — the min-cut grows with t − j.
  // The sink t itself has one path, the diagonal t → t → … → t: its flow is its smallest edge, ½ + 1/(2(t+1)).
  const auto uniform_stack = [](int64_t N, int64_t T) {
    std::vector<double> causal(T * T, 0.0);
    for (int64_t i = 0; i < T; ++i)
      for (int64_t j = 0; j <= i; ++j) causal[i * T + j] = 0.7;  // any weights: only where they are not 0 counts
    return interp::uniform_attention_like(std::vector<Tensor>(N, Tensor::from_vector(causal, {1, T, T}, DType::Float64)));
  };
  // Two layers: the paths t → i → j, i = j … t, share no edge; each carries min(Ã[t, i], Ã[i, j]) = 1/(2(t+1)), so
  // flow[t, j] = (t − j + 1)/(2(t+1)) for j < t, linear in the distance. Ranked against j the flows to j < t are
  // exactly reversed and t is on top: Σd² = n(n−1)(n−2)/3 over n = t+1 ranks, ρ(flow, j) = −(t − 4)/(t + 2).
  const std::vector<std::vector<double>> two = interp::residual_mixed(uniform_stack(2, 16));
  for (int64_t t = 1; t < 16; ++t) {
    const std::vector<double> flow = interp::max_flows_from(two, 16, t);
    std::vector<double> position(t + 1);
    std::iota(position.begin(), position.end(), 0.0);
    INFO("t = " << t);
    for (int64_t j = 0; j < t; ++j) CHECK(flow[j] == doctest::Approx((t - j + 1) / (2.0 * (t + 1))).epsilon(1e-12));
    CHECK(flow[t] == doctest::Approx(0.5 + 0.5 / (t + 1)).epsilon(1e-12));
    CHECK(interp::spearman({flow.begin(), flow.begin() + t + 1}, position) ==
          doctest::Approx(-(t - 4.0) / (t + 2.0)).epsilon(1e-12));
  }
  // The default model's depth and window, N = 4 and T = 64: for every t the flows to j < t still strictly grow with
  // the distance (ρ with j exactly −1 over them), the diagonal is still ½ + 1/(2(t+1)), and over the whole row,
  // t included, ρ(flow, j) <= −0.92 at every t >= 8 that faithfulness explains (−0.927 at t = 9, −0.989 at t = 63).
  for (int64_t t = 1; t < 64; ++t) {  // the flows from t reach positions <= t only: the prefix's stack is enough
    const std::vector<double> flow = interp::max_flows_from(interp::residual_mixed(uniform_stack(4, t + 1)), t + 1, t);
    std::vector<double> position(t + 1);
    std::iota(position.begin(), position.end(), 0.0);
    INFO("t = " << t << ", flows " << doctest::toString(flow));
    for (int64_t j = 0; j + 1 < t; ++j) CHECK(flow[j] > flow[j + 1] + 1e-12);
    if (t >= 2)
      CHECK(interp::spearman({flow.begin(), flow.begin() + t}, {position.begin(), position.begin() + t}) ==
            doctest::Approx(-1.0).epsilon(1e-15));
    CHECK(flow[t] == doctest::Approx(0.5 + 0.5 / (t + 1)).epsilon(1e-12));
    if (t >= interp::kDeletionSteps) CHECK(interp::spearman(flow, position) <= -0.92);
  }
  // The mask is read from the maps: a head's zeros that another head fills are in it, a window's are not.
  const Tensor windowed = Tensor::from_vector({1, 0, 0, 0.3, 0.7, 0, 0, 0.2, 0.8,    //
                                               1, 0, 0, 1, 0, 0, 0, 1, 0}, {2, 3, 3}, DType::Float64);
  CHECK(interp::uniform_attention_like({windowed})[0].to_vector() ==
        std::vector<double>{1, 0, 0, 0.5, 0.5, 0, 0, 0.5, 0.5,    //
                            1, 0, 0, 0.5, 0.5, 0, 0, 0.5, 0.5});
}

TEST_CASE("faithfulness: partial Spearman ρ given the position on a constructed case, and undefined where nothing is left") {
  // x and y both rise with z but not with each other: with no ties ρ = 1 − 6Σd²/(n(n²−1)), n = 4:
  // ρ_xz = 1 − 6·2/60 = 0.8, ρ_yz = 1 − 6·4/60 = 0.6, ρ_xy = 1 − 6·10/60 = 0; given z they are exactly opposed:
  // (0 − 0.8·0.6)/√((1 − 0.64)(1 − 0.36)) = −0.48/0.48 = −1.
  const std::vector<double> z = {1, 2, 3, 4}, x = {1, 3, 2, 4}, y = {2, 1, 4, 3};
  CHECK(interp::spearman(x, z) == doctest::Approx(0.8).epsilon(1e-15));
  CHECK(interp::spearman(y, z) == doctest::Approx(0.6).epsilon(1e-15));
  CHECK(interp::spearman(x, y) == doctest::Approx(0.0).epsilon(1e-15));
  CHECK(interp::partial_spearman(x, y, z) == doctest::Approx(-1.0).epsilon(1e-14));
  CHECK(interp::partial_correlation(0.5, 0.0, 0.0) == 0.5);  // z unrelated to either: the plain ρ
  CHECK(interp::partial_correlation(1.0, 0.6, 0.6) == doctest::Approx(1.0).epsilon(1e-15));  // x = y
  CHECK(std::isnan(interp::partial_spearman(z, y, z)));  // x is z's own ranking
  CHECK(std::isnan(interp::partial_correlation(std::nan(""), 0.1, 0.2)));
}

TEST_CASE("faithfulness: Wilcoxon's signed-rank test — exact counts, ties and zeros, the normal approximation") {
  // All five positive: W+ = 15, the one pattern of 2^5 as high: p = 2/32.
  interp::SignedRankTest s = interp::wilcoxon_signed_rank({0.1, 0.2, 0.3, 0.4, 0.5});
  CHECK(s.exact);
  CHECK(s.n == 5);
  CHECK(s.w_plus == 15);
  CHECK(s.p == doctest::Approx(2.0 / 32).epsilon(1e-15));
  // Ranks 1 … 6, the negative ones 1 and 4: W+ = 2 + 3 + 5 + 6 = 16. By symmetry P(W+ >= 16) = P(W+ <= 21 − 16 = 5);
  // the subsets of {1 … 6} with sum <= 5: {}, {1}, {2}, {3}, {1,2}, {4}, {1,3}, {5}, {1,4}, {2,3}: 10 of 64, p = 20/64.
  s = interp::wilcoxon_signed_rank({-1, 2, 3, -4, 5, 6});
  CHECK(s.w_plus == 16);
  CHECK(s.p == doctest::Approx(20.0 / 64).epsilon(1e-15));
  CHECK(interp::wilcoxon_signed_rank({1, -2, -3, 4, -5, -6}).p == doctest::Approx(20.0 / 64).epsilon(1e-15));  // mirrored
  // Ties (|d| = 1, 1 and 3, 3, 3) and a zero, dropped: n = 8, ranks 1.5 1.5 3 5 5 5 7 8, W+ = 1.5 + 1.5 + 5·3 + 8 = 26.
  // E = 8·9/4 = 18, Var = 8·9·17/24 − ((2³ − 2) + (3³ − 3))/48 = 51 − 0.625 = 50.375, z = 8/√50.375,
  // p = erfc(z/√2) = 0.2596782522097899 (Python's math.erfc).
  s = interp::wilcoxon_signed_rank({1, 1, -2, 3, 0, 3, 3, -4, 5});
  CHECK_FALSE(s.exact);
  CHECK(s.n == 8);
  CHECK(s.w_plus == 26);
  CHECK(s.z == doctest::Approx(8 / std::sqrt(50.375)).epsilon(1e-14));
  CHECK(s.p == doctest::Approx(0.2596782522097899).epsilon(1e-12));
  // n = 60 > 50: the normal approximation, W+ = 1830, E = 915, Var = 60·61·121/24 = 18452.5, p = 1.6295557943119322e-11.
  std::vector<double> rising(60);
  std::iota(rising.begin(), rising.end(), 1.0);
  s = interp::wilcoxon_signed_rank(rising);
  CHECK_FALSE(s.exact);
  CHECK(s.z == doctest::Approx(915 / std::sqrt(18452.5)).epsilon(1e-14));
  CHECK(s.p == doctest::Approx(1.6295557943119322e-11).epsilon(1e-10));
  CHECK(interp::wilcoxon_signed_rank({0, 0}).p == 1.0);  // nothing to test
  // n = 50, ranks 1, 4, … 49 negative: W+ = 1275 − 425 = 850, exact p = 0.03996834652842374 (the same counts in
  // Python's integers), within 1 % of the normal approximation's 0.0402 (z = 212.5/√10731.25).
  std::vector<double> mixed(50);
  for (int64_t i = 0; i < 50; ++i) mixed[i] = (i % 3 == 0 ? -1.0 : 1.0) * static_cast<double>(i + 1);
  s = interp::wilcoxon_signed_rank(mixed);
  CHECK(s.exact);
  CHECK(s.w_plus == 850);
  CHECK(s.p == doctest::Approx(0.03996834652842374).epsilon(1e-12));
  CHECK(s.p == doctest::Approx(std::erfc(std::fabs(s.z) / std::sqrt(2.0))).epsilon(0.01));
}

TEST_CASE("faithfulness: paired comparisons average each window's predictions before the signed-rank test") {
  interp::Faithfulness f;
  f.windows = {0, 0, 1, 1, 2, 3};
  const double nan = std::nan("");
  f.methods = {{"a", {0.5, 0.3, 0.2, nan, 0.9, 0.4}, {}, {}, {}}, {"b", {0.1, 0.1, 0.3, 0.5, 0.1, 0.4}, {}, {}, {}}};
  f.predictions = 6;
  // Window means of ρ_a − ρ_b: (0.4 + 0.2)/2 = 0.3; −0.1 (the NaN prediction left out); 0.8; 0 (dropped by the test).
  const interp::MethodComparison c = interp::compare_methods(f, "a", "b");
  CHECK(c.windows == 4);
  CHECK(c.test.n == 3);
  CHECK(c.mean_difference == doctest::Approx((0.3 - 0.1 + 0.8 + 0.0) / 4).epsilon(1e-14));
  CHECK(c.test.w_plus == 5);  // ranks of 0.1, 0.3, 0.8: 1, 2, 3; positive 0.3 and 0.8
  CHECK(c.test.p == doctest::Approx(2 * 2.0 / 8).epsilon(1e-15));  // P(W+ >= 5) = #{ {2,3}, {1,2,3} } / 8
  CHECK_THROWS_WITH(interp::compare_methods(f, "a", "c"), doctest::Contains("no method 'c'"));
}

TEST_CASE("faithfulness: gradient × input equals central differences of the logit in each row's scale") {
  // Σ_c E_jc ∂F/∂E_jc = d/dε F(E with row j scaled by 1 + ε) at ε = 0.
  auto model = random_gpt(2, 2);
  const std::vector<int64_t> ids = {3, 1, 4, 1, 5, 9, 2, 6};
  const interp::Prediction p = interp::predict(*model, ids, 5);
  const std::vector<double> scores = interp::gradient_times_input(*model, ids, p);
  REQUIRE(scores.size() == 6);
  const std::vector<double> E = model->token_embeddings(Tensor::from_indices(ids, {1, 8})).to_vector();
  const int64_t C = model->config().n_embd;
  const auto logit = [&](int64_t j, double scale) {
    std::vector<double> e = E;
    for (int64_t c = 0; c < C; ++c) e[j * C + c] *= scale;
    return logit_from_embeddings(*model, e, 5, p.target);
  };
  const double h = 1e-5;
  for (int64_t j = 0; j <= 5; ++j) {
    const double central = (logit(j, 1 + h) - logit(j, 1 - h)) / (2 * h);
    INFO("position " << j << ": gradient × input " << scores[j] << ", central difference " << central);
    CHECK(std::fabs(scores[j] - central) <= 1e-8 * std::max(1.0, std::fabs(central)));
  }
  CHECK(p.logit == doctest::Approx(logit(0, 1.0)).epsilon(1e-14));
}

TEST_CASE("faithfulness: erasure in one batch equals a separate forward per erased position") {
  auto model = random_gpt(2, 2);
  const std::vector<int64_t> ids = {2, 7, 1, 8, 2, 8, 1, 8};
  const interp::Prediction p = interp::predict(*model, ids, 7);
  const std::vector<double> d = interp::erasure_effects(*model, ids, p);
  REQUIRE(d.size() == 8);
  const std::vector<double> E = model->token_embeddings(Tensor::from_indices(ids, {1, 8})).to_vector();
  const int64_t C = model->config().n_embd;
  const auto erased = [&](const std::vector<int64_t>& positions) {
    std::vector<double> e = E;
    for (const int64_t j : positions) std::fill_n(e.begin() + j * C, C, 0.0);
    return logit_from_embeddings(*model, e, 7, p.target);
  };
  for (int64_t j = 0; j < 8; ++j) CHECK(d[j] == doctest::Approx(p.logit - erased({j})).epsilon(1e-12));
  // Erasing two at once is one more sequence of the batch, not the sum of the two.
  CHECK(interp::logit_drops(*model, ids, p, {{1, 4}})[0] == doctest::Approx(p.logit - erased({1, 4})).epsilon(1e-12));
}

TEST_CASE("faithfulness: attention × value norms are ‖Σ_h A^h[t, j] v^h_j W_O^h‖, and a pruned layer's are 0") {
  auto model = random_gpt(2, 2);
  const std::vector<int64_t> ids = {5, 3, 5, 8, 9, 7};
  const std::vector<double> norms = interp::attention_value_norms(*model, ids, 4);
  REQUIRE(norms.size() == 5);
  // The same from the kept A and V by tensor ops: per head (A^h[t, :] ⊙ V^h) W_O^h, summed over heads.
  nn::AttentionMixer& attn = model->block(1).attn_as<nn::AttentionMixer>();
  nn::MixerRecord kept;
  attn.set_probe([&kept](const nn::MixerRecord& r) { kept = r; });
  {
    NoGradGuard no_grad;
    model->forward(Tensor::from_indices(ids, {1, 6}));
  }
  const Tensor W_O = attn.w_o().weight();  // [C, C]
  const int64_t d_h = 4;
  Tensor added = Tensor::zeros({6, 8}, DType::Float64);
  for (int64_t h = 0; h < 2; ++h) {
    const Tensor a = slice(slice(kept.weights, 1, h, h + 1), 2, 4, 5).reshape({6, 1});   // A^h[4, :]
    const Tensor v = slice(kept.values, 2, h, h + 1).reshape({6, d_h});                    // v^h_j
    added = added + matmul(a * v, slice(W_O, 0, h * d_h, (h + 1) * d_h));
  }
  attn.set_probe({});
  const std::vector<double> rows = added.to_vector();
  for (int64_t j = 0; j <= 4; ++j) {
    double squares = 0;
    for (int64_t c = 0; c < 8; ++c) squares += rows[j * 8 + c] * rows[j * 8 + c];
    CHECK(norms[j] == doctest::Approx(std::sqrt(squares)).epsilon(1e-12));
    CHECK(norms[j] > 0.0);
  }
  model->set_head_mask("11/00");
  for (const double n : interp::attention_value_norms(*model, ids, 4)) CHECK(n == 0.0);
}

TEST_CASE("faithfulness: on the trained run, erasure's own deletion curve is the steepest at k = 1 and beats random") {
  const TrainedRun& run = trained_run();
  const char_lm::LoadedModel loaded = char_lm::load_model(char_lm::model_path(char_lm::find_checkpoint(run.run())));
  const std::string text = read_file_text(test::generated_text_file()).substr(0, 64);
  std::vector<std::vector<int64_t>> prompts;
  for (size_t at = 0; at + 16 <= 48; at += 16) prompts.push_back(loaded.tokenizer.encode(text.substr(at, 16)));
  const interp::Faithfulness f = interp::measure_faithfulness(*loaded.model, prompts, {{15, 10}, {12}, {8, 15}}, 8, 1);
  CHECK(f.predictions == 5);
  CHECK(f.windows == std::vector<int64_t>{0, 0, 1, 2, 2});
  REQUIRE(f.methods.size() == 10);
  REQUIRE(f.methods.back().method == "erasure");
  const interp::MethodSummary& erasure = f.methods.back();
  CHECK(erasure.mean_rho() == doctest::Approx(1.0));
  for (const interp::MethodSummary& m : f.methods) {
    INFO(m.method << ": k = 1 drop " << m.deletion[0] << ", erasure's " << erasure.deletion[0]);
    CHECK(m.rho.size() == 5);
    CHECK(m.rho_position.size() == 5);
    CHECK(m.rho_partial.size() == 5);
    CHECK(m.deletion.size() == static_cast<size_t>(interp::kDeletionSteps));
    CHECK(erasure.deletion[0] >= m.deletion[0] - 1e-12);  // the top single position is erasure's by definition
  }
  const interp::MethodSummary& random = f.methods[f.methods.size() - 2];
  REQUIRE(random.method == "random");
  const auto area = [](const interp::MethodSummary& m) { return std::accumulate(m.deletion.begin(), m.deletion.end(), 0.0); };
  CHECK(area(erasure) > area(random));
  // The content-free control on this 2-layer model's causal mask: ρ(uniform flow, j) = −(t − 4)/(t + 2) exactly
  // (the control's test above), whatever the text; erasure's partial ρ given the position is 1.
  const interp::MethodSummary& uniform = f.methods[f.methods.size() - 3];
  REQUIRE(uniform.method == "uniform flow");
  const std::vector<int64_t> t = {15, 10, 12, 8, 15};
  for (size_t i = 0; i < t.size(); ++i) {
    CHECK(uniform.rho_position[i] == doctest::Approx(-(t[i] - 4.0) / (t[i] + 2.0)).epsilon(1e-12));
    CHECK(erasure.rho_partial[i] == doctest::Approx(1.0).epsilon(1e-12));
  }
  // Only k = 1 is erasure's by definition: positions interact, and on this model IG's top k, erased together,
  // drop the logit more over k = 1 … 8 (area 20.3 against erasure's 19.6; on the default model erasure leads at
  // every k, docs/interpretability.md).
}

TEST_CASE("faithfulness: bad input is refused: a position past the prompt, no prompts, too few positions, ssd") {
  auto model = random_gpt(2, 2);
  const std::vector<int64_t> ids = {1, 2, 3};
  CHECK_THROWS_WITH(interp::predict(*model, ids, 3), doctest::Contains("position 3 is outside the prompt's [0, 3)"));
  CHECK_THROWS_WITH(interp::explain_all(*model, ids, 5, 4), doctest::Contains("position 5 is outside"));
  const interp::Prediction p = interp::predict(*model, ids, 2);
  CHECK_THROWS_WITH(interp::logit_drops(*model, ids, p, {{4}}), doctest::Contains("erased position 4"));
  CHECK_THROWS_WITH(interp::deletion_curves(*model, ids, p, {{0, 1, 2}}, 4), doctest::Contains("ranks 3 positions"));
  CHECK_THROWS_WITH(interp::measure_faithfulness(*model, {}, {}, 4, 0), doctest::Contains("N = 0"));
  CHECK_THROWS_WITH(interp::measure_faithfulness(*model, {{1, 2, 3, 4, 5, 6, 7, 8}}, {{7}}, 4, 0),
                    doctest::Contains("fewer than 9 positions"));
  nn::GPTConfig c = model->config();
  c.attention = AttentionFunction::Ssd;
  Generator gen(3);
  nn::GPT ssd(c, gen);
  CHECK_THROWS_WITH(interp::explain_all(ssd, ids, 2, 4), doctest::Contains("not a distribution over the keys"));
}

TEST_CASE("faithfulness: a linear-attention model is explained through the weights its output implies") {
  nn::GPTConfig c = random_gpt()->config();
  c.attention = AttentionFunction::Linear;
  Generator gen(4);
  nn::GPT linear(c, gen);
  linear.to(DType::Float64);
  const std::vector<int64_t> ids = {1, 5, 2, 7, 3, 3, 8};
  const interp::Explanations ex = interp::explain_all(linear, ids, 6, 4);
  REQUIRE(ex.scores.size() == 8);
  for (size_t m = 0; m < ex.scores.size(); ++m) {
    INFO(ex.methods[m]);
    CHECK(ex.scores[m].size() == 7);
  }
  double implied = 0;  // the last layer's implied weights, head mean, sum to 1 over the keys
  for (const double a : ex.scores[0]) implied += a;
  CHECK(implied == doctest::Approx(1.0).epsilon(1e-6));
  for (const double f : ex.scores[2]) CHECK((f >= 0.0 && f <= 1.0 + 1e-12));
}

TEST_CASE("faithfulness: char_lm faithfulness prints the table and writes its charts — heads --curve its three orders") {
  const TrainedRun& run = trained_run();
  test::TempDir out("faithfulness_command");
  const std::string data = " --data '" + test::generated_text_file() + "'";
  int status = 0;
  std::string output;
  std::tie(status, output) = test::run_char_lm("faithfulness --ckpt '" + run.run() + "'" + data +
                                                " --prompts 3 --positions 2 --ig-steps 8 --out '" + out.file("f") + "'");
  INFO(output);
  REQUIRE(status == 0);
  CHECK(output.find("faithfulness against erasure: 6 predictions") != std::string::npos);
  for (const char* method : {"attention", "rollout", "flow", "flow÷uniform", "grad×input", "IG", "‖αvW_O‖", "uniform flow",
                             "random", "erasure"})
    CHECK(output.find(std::string("\n") + method + " ") != std::string::npos);
  CHECK(output.find("paired tests of ρ with erasure: Wilcoxon signed-rank over the windows") != std::string::npos);
  CHECK(output.find("  flow÷uniform − flow ") != std::string::npos);
  CHECK(test::count_svg_elements(out.file("f/spearman.svg"))["polyline"] == 9);  // erasure against itself is left out
  CHECK(test::count_svg_elements(out.file("f/deletion.svg"))["polyline"] == 10);

  std::tie(status, output) = test::run_char_lm("attention --ckpt '" + run.run() + "' --prompt 'the king' --decompose --out '" +
                                                out.file("maps") + "'");
  REQUIRE(status == 0);
  for (const char* layer : {"decompose-0.svg", "decompose-1.svg"})  // 2 heads × (norm, angle) panels of 8 × 8 cells
    CHECK(test::count_svg_elements(out.file("maps") + "/" + layer)["rect.cell"] == 4 * 36);

  std::tie(status, output) = test::run_char_lm("heads --ckpt '" + run.run() + "'" + data + " --eval-iters 2 --batch-size 4 "
                                                "--curve --curve-svg '" + out.file("curve.svg") + "'");
  REQUIRE(status == 0);
  CHECK(output.find("at 2 of 4 heads: val loss") != std::string::npos);
  CHECK(test::count_svg_elements(out.file("curve.svg"))["polyline"] == 3);

  // Bad input: N = 0, more positions than a window has, a file where the charts go.
  std::tie(status, output) = test::run_char_lm("faithfulness --ckpt '" + run.run() + "'" + data + " --prompts 0");
  CHECK(status != 0);
  CHECK(output.find("--prompts must be in [1, ") != std::string::npos);
  std::tie(status, output) = test::run_char_lm("faithfulness --ckpt '" + run.run() + "'" + data + " --positions 9 --out '" +
                                                out.file("g") + "'");
  CHECK(status != 0);
  CHECK(output.find("--positions 9: a window of block_size 16 has 8 positions") != std::string::npos);
}

TEST_CASE("faithfulness: attention --decompose: softmax of norm part × angle part is each head's A — rope is refused") {
  auto model = random_gpt(2, 2);
  const std::vector<int64_t> ids = {4, 0, 4, 10, 2, 6};
  const std::vector<interp::ScoreParts> parts = interp::score_decomposition(*model, ids);
  const std::vector<Tensor> maps = interp::attention_maps(*model, ids);
  REQUIRE(parts.size() == 2);
  for (size_t l = 0; l < 2; ++l) {
    const std::vector<double> norm = parts[l].norm.to_vector(), cosine = parts[l].cosine.to_vector(), A = maps[l].to_vector();
    for (int64_t h = 0; h < 2; ++h)
      for (int64_t i = 0; i < 6; ++i) {
        double total = 0;
        for (int64_t j = 0; j <= i; ++j) total += std::exp(norm[(h * 6 + i) * 6 + j] * cosine[(h * 6 + i) * 6 + j]);
        for (int64_t j = 0; j <= i; ++j) {
          const size_t at = (h * 6 + i) * 6 + j;
          CHECK(std::fabs(cosine[at]) <= 1.0 + 1e-15);
          CHECK(std::exp(norm[at] * cosine[at]) / total == doctest::Approx(A[at]).epsilon(1e-12));
        }
      }
  }
  // head_selection: a head whose norm part is flat along each row picks by angle alone, and the reverse.
  const Tensor flat = Tensor::from_vector(std::vector<double>(2 * 4 * 4, 0.5), {2, 4, 4}, DType::Float64);
  std::vector<double> varying(2 * 4 * 4);
  for (size_t k = 0; k < varying.size(); ++k) varying[k] = std::sin(static_cast<double>(k));
  const Tensor ramp = Tensor::from_vector(varying, {2, 4, 4}, DType::Float64);
  for (const interp::Selection& s : interp::head_selection({flat, ramp})) {
    CHECK(s.by_angle == doctest::Approx(1.0).epsilon(1e-12));
    CHECK(std::isnan(s.by_norm));
  }
  for (const interp::Selection& s : interp::head_selection({ramp, flat})) {
    CHECK(s.by_norm == doctest::Approx(1.0).epsilon(1e-12));
    CHECK(std::isnan(s.by_angle));
  }
  CHECK(interp::pearson({1, 2, 3}, {2, 4, 7}) == doctest::Approx(0.9933992677987828).epsilon(1e-14));

  nn::GPTConfig c = model->config();
  c.position = PositionEncoding::Rope;
  Generator gen(5);
  nn::GPT rope(c, gen);
  CHECK_THROWS_WITH(interp::score_decomposition(rope, ids), doctest::Contains("rope rotates q and k"));
}

TEST_CASE("faithfulness: the pruning curve starts at the model's loss, ends with every head off, and restores the mask") {
  const TrainedRun& run = trained_run();
  char_lm::LoadedModel loaded = char_lm::load_model(char_lm::model_path(char_lm::find_checkpoint(run.run())));
  nn::GPT& model = *loaded.model;
  const std::vector<interp::TokenBatch> batches = {random_batch(2, 16, model.config().vocab_size, 3)};
  const std::vector<std::vector<double>> importance = {{0.3, 0.1}, {0.2, 0.4}};
  const std::vector<interp::Head> order = interp::heads_by_importance(importance, model.config().head_gates());
  REQUIRE(order.size() == 4);
  CHECK((order[0].layer == 0 && order[0].head == 1 && order[3].layer == 1 && order[3].head == 1));
  const std::vector<double> curve = interp::pruning_curve(model, batches, order);
  REQUIRE(curve.size() == 5);
  CHECK(model.config().head_mask.empty());
  CHECK(curve[0] == doctest::Approx(interp::mean_loss(model, batches)).epsilon(1e-12));
  model.set_head_mask("10/11");  // the first head of the order (layer 0, head 1) off: the curve's second point
  CHECK(curve[1] == doctest::Approx(interp::mean_loss(model, batches)).epsilon(1e-12));
  model.set_head_mask("00/00");
  CHECK(curve[4] == doctest::Approx(interp::mean_loss(model, batches)).epsilon(1e-12));
  CHECK(curve[4] != doctest::Approx(curve[0]));
}

TEST_CASE("faithfulness: an ssd model's report says why it has no faithfulness table, and still has the head curve") {
  test::TempDir dir("faithfulness_ssd");
  char_lm::TrainConfig c = test::tiny_run(dir.file("run"));
  c.model.attention = AttentionFunction::Ssd;
  c.run.max_iters = 4;
  char_lm::train(c);
  int status = 0;
  std::string output;
  std::tie(status, output) = test::run_char_lm("report --ckpt '" + dir.file("run") + "' --prompt 'the king' --data '" +
                                                test::generated_text_file() + "' --eval-iters 1 --batch-size 2 --steps 4 " +
                                                "--tokens 5 --out '" + dir.file("report.html") + "'");
  INFO(output);
  REQUIRE(status == 0);
  const std::string html = read_file_text(dir.file("report.html"));
  const std::string faithfulness = html.substr(html.find("<section id=\"faithfulness\">"));
  CHECK(faithfulness.find("Not measured: this model's attention weights are signed and unnormalised") != std::string::npos);
  CHECK(html.find("<section id=\"head-curve\">") != std::string::npos);
}

}  // namespace interp_test
