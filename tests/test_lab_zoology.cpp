// The lab's switches for Zoology's figure 2 (issue 53): MQAR's constant filler,
// blocks without an MLP, a fixed training set passed over in epochs, the
// mixers' own layers and positions, and the zoology presets.
#include <doctest/doctest.h>

#include <map>
#include <set>

#include "examples/common/files.h"
#include "examples/lab/lab_run.h"
#include "examples/lab/report.h"
#include "examples/lab/tasks.h"
#include "tests/char_lm_helpers.h"
#include "tests/lab_helpers.h"

// The file's names and using-directives stay its own in a unity build, where the test
// files compile as one translation unit (CMakeLists.txt).
namespace lab_zoology_test {

using namespace ag;
using namespace ag::lab;
using ag::test::TempDir;

namespace {
// The cells of a preset's grids, learning rates as the preset sweeps them.
std::vector<Cell> preset_cells(const std::string& name) {
  const Preset preset = lab::preset(name);
  std::string mixers;
  for (const auto& [option, text] : preset.lab_options)
    if (option == "mixers") mixers = text;
  LabSpec spec;
  for (const auto& axes : preset.grids) {
    Grid grid{.axes = {}, .mixers = split_list(mixers), .lrs = {1e-3}};
    for (const auto& [option, text] : axes) grid.axes.push_back({option, split_list(text)});
    spec.grids.push_back(grid);
  }
  return lab_cells(spec);
}
}  // namespace

TEST_CASE("lab mqar: --random-filler false leaves every position but the pairs and the queries the token 0") {
  TaskOptions task;
  task.vocab = 512;
  task.pairs = 8;
  task.random_filler = false;
  const int64_t T = 128;
  Generator gen(5);
  for (int example = 0; example < 20; ++example) {
    const Example e = mqar_example(task, T, gen);
    int64_t queries = 0;
    for (int64_t t = 2 * task.pairs; t < T; ++t) {
      if (e.y[t] != kIgnore) {
        ++queries;
        CHECK(e.x[t] >= 1);  // a key: keys start at 1, so 0 is never one
        CHECK(e.x[t] < task.vocab / 2);
      } else {
        CHECK(e.x[t] == 0);
      }
    }
    CHECK(queries == task.pairs);
  }
  // The same draws but for the filler: the pairs and the queries are those of the random filler's example.
  task.random_filler = true;
  Generator a(5), b(5);
  const Example random = mqar_example(task, T, a);
  task.random_filler = false;
  const Example constant = mqar_example(task, T, b);
  CHECK(random.y == constant.y);
  int64_t nonzero_filler = 0;
  for (int64_t t = 0; t < T; ++t) {
    if (constant.x[t] != 0) CHECK(random.x[t] == constant.x[t]);
    else nonzero_filler += random.x[t] != 0;
  }
  CHECK(nonzero_filler > T / 2);
}

TEST_CASE("lab: the state mixer identity — no MLP, each block adds LN2(Y) to Y, and files keep their keys unless it is set") {
  nn::GPTConfig config;
  config.vocab_size = 32;
  config.block_size = 8;
  config.n_layer = 2;
  config.n_embd = 16;
  config.n_head = 2;
  Generator g1(3), g2(3);
  nn::GPT with_mlp(config, g1);
  config.state_mixer = nn::StateMixer::Identity;
  nn::GPT identity(config, g2);
  const int64_t C = config.n_embd, mlp = C * 4 * C + 4 * C + 4 * C * C + C;  // fc and proj, weights and biases
  CHECK(with_mlp.num_parameters() - identity.num_parameters() == config.n_layer * mlp);
  for (const auto& p : identity.named_parameters()) CHECK(p.name.find("mlp") == std::string::npos);
  CHECK(nn::describe(config).find("no MLP") != std::string::npos);

  // Block 0's output is Y + LN2(Y) with Y = X + O: its input (the embeddings), O and LN2(Y) observed on the way.
  std::map<std::string, Tensor> seen;
  identity.set_activation_hook([&](const std::string& name, const Tensor& a) { seen[name] = a; });
  Generator draw(7);
  std::vector<int64_t> tokens;
  for (int i = 0; i < 2 * 8; ++i) tokens.push_back(static_cast<int64_t>(draw.integer(32)));
  identity.forward(Tensor::from_indices(tokens, {2, 8}));
  REQUIRE(seen.count("pos_emb"));
  REQUIRE(seen.count("blocks.0.attn"));
  REQUIRE(seen.count("blocks.0.ln2"));
  REQUIRE(seen.count("blocks.0"));
  CHECK_FALSE(seen.count("blocks.0.mlp"));
  const std::vector<double> x = seen["pos_emb"].to_vector(), o = seen["blocks.0.attn"].to_vector(),
                           n = seen["blocks.0.ln2"].to_vector(), out = seen["blocks.0"].to_vector();
  double worst = 0;
  for (size_t i = 0; i < out.size(); ++i) worst = std::max(worst, std::abs(out[i] - (x[i] + o[i] + n[i])));
  CHECK(worst < 1e-5);

  // Written into a file's options only where set: the default model's files keep the keys they had.
  Metadata plain, set;
  nn::write_model_options(with_mlp.config(), plain, {OptionKind::Model, OptionKind::Derived}, KeyStyle::Snake);
  nn::write_model_options(identity.config(), set, {OptionKind::Model, OptionKind::Derived}, KeyStyle::Snake);
  CHECK_FALSE(plain.count("state_mixer"));
  REQUIRE(set.count("state_mixer"));
  CHECK(set.at("state_mixer") == "identity");
}

TEST_CASE("lab: a fixed training set — the same examples come back each epoch in the seed's order, the last batch the rest") {
  TaskOptions task;
  task.vocab = 64;
  task.pairs = 2;
  const int64_t T = 16;
  const FixedSet set{.seed = 9, .examples = 10, .batch = 4};
  CHECK(set.batches_per_epoch() == 3);
  CHECK(set.batch_indices(0) == std::vector<int64_t>{0, 1, 2, 3});
  CHECK(set.batch_indices(2) == std::vector<int64_t>{8, 9});
  CHECK(set.batch_indices(3) == set.batch_indices(0));
  for (int64_t k = 0; k < 3; ++k) {
    Tensor x0, y0, x1, y1;
    fixed_set_batch(task, T, set, k, x0, y0);
    fixed_set_batch(task, T, set, k + 3 * set.batches_per_epoch(), x1, y1);  // epoch 3
    CHECK(x0.size(0) == (k == 2 ? 2 : 4));
    CHECK(x0.to_indices() == x1.to_indices());
    CHECK(y0.to_indices() == y1.to_indices());
  }
  // Ten distinct examples, another seed another ten.
  std::set<std::vector<int64_t>> examples, others;
  FixedSet other = set;
  other.seed = 10;
  for (int64_t i = 0; i < set.examples; ++i) {
    examples.insert(fixed_set_example(task, T, set, i).x);
    others.insert(fixed_set_example(task, T, other, i).x);
  }
  CHECK(examples.size() == 10);
  for (const auto& x : others) CHECK_FALSE(examples.count(x));

  // A cell's runs last --epochs passes; --epochs without a set is refused.
  Cell cell;
  cell.task = task;
  cell.model.block_size = T;
  cell.optim.batch_size = 4;
  cell.budget.train_examples = 10;
  cell.budget.epochs = 5;
  CHECK(run_steps(cell) == 15);
  cell.budget.train_examples = 0;
  CHECK(run_steps(cell) == cell.budget.max_iters);
  CHECK_THROWS_WITH_AS(check_cell(cell, nullptr), doctest::Contains("--train-examples"), Error);
}

TEST_CASE("lab: a cell on a fixed set trains its epochs, stops at --stop-accuracy, and records the time it took") {
  const TempDir tmp("lab_fixed_set");
  LabSpec spec = ag::test::small_lab(tmp, Cell{}.budget.max_iters, 16, 8);  // its epochs set the steps
  spec.options.eval_interval = 5;
  spec.defaults.model.n_head = 1;
  spec.grids = {Grid{.axes = {{"block_size", {"16"}}, {"pairs", {"2"}}, {"vocab", {"32"}}, {"random_filler", {"false"}},
                              {"state_mixer", {"identity"}}, {"train_examples", {"20"}}, {"epochs", {"4"}},
                              {"stop_accuracy", {"0", "0.000001"}}},
                     .mixers = {"softmax"}, .lrs = {3e-3}}};
  const LabSummary lab = run_lab(spec);
  REQUIRE(lab.rows.size() == 2);
  CHECK(lab.rows[0].at("status") == "ok");
  CHECK(lab.rows[0].at("steps") == "12");  // 4 epochs of ceil(20 / 8) = 3 batches
  CHECK(std::stod(lab.rows[0].at("cell_seconds")) >= std::stod(lab.rows[0].at("seconds")));
  // Stopped at the first score above the bar (any accuracy above 0 at step 5), else at the end.
  const int64_t stopped = std::stoll(lab.rows[1].at("steps"));
  CHECK((stopped == 5 || stopped == 10 || stopped == 12));
}

TEST_CASE("lab: a mixer's own layers and positions — ssd:n-layer=4:position=none") {
  nn::GPTConfig model;
  apply_mixer("ssd:n-layer=4:position=none", model);
  CHECK(model.attention == AttentionFunction::Ssd);
  CHECK(model.n_layer == 4);
  CHECK(model.position == PositionEncoding::None);
  nn::GPTConfig attention;
  apply_mixer("softmax", attention);
  CHECK(attention.position == PositionEncoding::Learned);
}

TEST_CASE("lab: the zoology preset — figure 2's lengths, widths, batches and budget, three seeds, the first seed's figure first") {
  const std::vector<Cell> cells = preset_cells("zoology");
  REQUIRE(cells.size() == 3 * 4 * 4 * 6);  // seeds, (T, P), widths, mixers
  std::map<int64_t, std::set<int64_t>> widths;
  for (size_t i = 0; i < cells.size(); ++i) {
    const Cell& cell = cells[i];
    CAPTURE(cell.label());
    check_cell(cell, nullptr);
    CHECK(get_option(cell, "seed") == (i < 96 ? "1337" : i < 192 ? "1338" : "1339"));
    CHECK(cell.task.vocab == 8192);
    CHECK_FALSE(cell.task.random_filler);
    CHECK(cell.model.state_mixer == nn::StateMixer::Identity);
    CHECK(cell.model.n_layer == 2);
    CHECK(cell.task.pairs * 8 <= cell.model.block_size);  // P = T/16, and 64 at T = 512
    CHECK((cell.model.position == PositionEncoding::Learned) == (cell.model.attention == AttentionFunction::Softmax));
    const int64_t T = cell.model.block_size, B = cell.optim.batch_size;
    CHECK(B == (T <= 128 ? 512 : T == 256 ? 256 : 128));
    CHECK(run_steps(cell) == 64 * ((100000 + B - 1) / B));  // T = 64: 12544 steps, as Zoology's 64 epochs
    CHECK(cell.budget.warmup == 0);
    CHECK(cell.budget.final_lr == 0);
    CHECK(cell.budget.stop_accuracy == 0.99);
    widths[T].insert(cell.model.n_embd);
  }
  for (const auto& [T, Cs] : widths) CHECK(Cs == std::set<int64_t>{64, 128, 256, 512});

  const std::vector<Cell> cpu = preset_cells("zoology-cpu");
  REQUIRE(cpu.size() == 2 * 6);  // widths 64 and 128, the six mixers, one seed
  for (const Cell& cell : cpu) {
    check_cell(cell, nullptr);
    CHECK(cell.model.block_size == 64);
    CHECK(cell.task.vocab == 8192);
  }
}

namespace {
// The numbers after each `key="` in `svg`.
std::vector<double> attribute_values(const std::string& svg, const std::string& key) {
  std::vector<double> values;
  for (size_t at = svg.find(key + "=\""); at != std::string::npos; at = svg.find(key + "=\"", at + 1))
    values.push_back(std::stod(svg.substr(at + key.size() + 2)));
  return values;
}
// Every marker of `svg` strictly inside its plot's frame (the first rect with fill="none").
void check_points_inside_the_frame(const std::string& svg) {
  const size_t frame = svg.find("fill=\"none\" stroke=\"#444\"");
  REQUIRE(frame != std::string::npos);
  const std::string rect = svg.substr(svg.rfind("<rect", frame), frame - svg.rfind("<rect", frame));
  const double x = attribute_values(rect, "x")[0], y = attribute_values(rect, "y")[0];
  const double w = attribute_values(rect, "width")[0], h = attribute_values(rect, "height")[0];
  const std::vector<double> cx = attribute_values(svg, "cx"), cy = attribute_values(svg, "cy");
  REQUIRE_FALSE(cx.empty());
  for (const double v : cx) CHECK((v > x + 1 && v < x + w - 1));
  for (const double v : cy) CHECK((v > y + 1 && v < y + h - 1));
}
Row result_row(const std::string& mixer, int64_t T, int64_t C, const std::string& seed, double accuracy) {
  return {{"task", "mqar"}, {"mixer", mixer}, {"block_size", std::to_string(T)}, {"pairs", "4"},
          {"n_embd", std::to_string(C)}, {"n_head", "1"}, {"n_layer", "2"}, {"seed", seed},
          {"state_floats", std::to_string(C * T)}, {"accuracy", std::to_string(accuracy)}, {"loss", "1"},
          {"ms_per_iter", "10"}, {"peak_mb", "5"}, {"lr", "0.001"}, {"status", "ok"}, {"cell", mixer}};
}
}  // namespace

TEST_CASE("lab report: accuracy spans 0 to 1 off the frame, one length is a point per mixer, seeds a band, the table beside") {
  const TempDir tmp("lab_report_axes");
  // One length (T = 64), two widths, two seeds; linear attention at 1/P, softmax solved.
  std::vector<Row> rows;
  for (const char* seed : {"1337", "1338"})
    for (const int64_t C : {64, 128}) {
      rows.push_back(result_row("softmax", 64, C, seed, 1.0));
      rows.push_back(result_row("linear:elu1", 64, C, seed, std::string(seed) == "1337" ? 0.25 : 0.0));
    }
  std::vector<Curve> curves(rows.size());
  write_report(tmp.dir.string(), rows, curves, "lab --test");

  const std::string by_width = ag::test::read_file(tmp.file("accuracy_vs_width_T64.svg"));
  check_points_inside_the_frame(by_width);
  CHECK(by_width.find("class=\"band\"") != std::string::npos);  // linear:elu1's seeds, 0 and 0.25
  CHECK(by_width.find(">0</text>") != std::string::npos);
  CHECK(by_width.find(">1</text>") != std::string::npos);
  CHECK(by_width.find(">128</text>") != std::string::npos);  // the widths named, not their log

  // One length: no axis from 63.6 to 64.4, but a point per series, named on the axis.
  const std::string by_length = ag::test::read_file(tmp.file("accuracy_vs_length.svg"));
  check_points_inside_the_frame(by_length);
  CHECK(by_length.find("a point per series") != std::string::npos);
  CHECK(by_length.find(">63.6<") == std::string::npos);
  check_points_inside_the_frame(ag::test::read_file(tmp.file("cost_vs_length.svg")));

  const std::string page = ag::test::read_file(tmp.file("lab_report.html"));
  const size_t figure = page.find("<section id=\"accuracy-width\">");
  REQUIRE(figure != std::string::npos);
  CHECK(page.find("<div class=\"beside\">", figure) != std::string::npos);
  CHECK(page.find("0.125 (0.000–0.250, 2 seeds)", figure) != std::string::npos);

  // points_per_series leaves an axis of several values as it is.
  std::vector<interp::Series> series{{"a", "#000", {1, 2}, {0.5, 0.6}}};
  std::string label = "T";
  CHECK(points_per_series(series, label).empty());
  CHECK(label == "T");
}

TEST_CASE("lab: a cell cut short between its learning rates resumes at the next one, its finished runs read back") {
  const TempDir tmp("lab_resume_runs");
  LabSpec spec = ag::test::small_lab(tmp, 10, 16, 8);
  spec.options.eval_interval = 5;
  spec.defaults.model.n_head = 1;
  spec.grids = {Grid{.axes = {{"block_size", {"16"}}, {"pairs", {"2"}}, {"vocab", {"32"}}}, .mixers = {"softmax"},
                     .lrs = {1e-3, 3e-3}}};
  const LabSummary first = run_lab(spec);
  REQUIRE(first.rows.size() == 1);
  const std::string base = (tmp.dir / "cells" / lab_cells(spec)[0].id()).string();
  REQUIRE(std::filesystem::exists(base + ".run0.txt"));
  REQUIRE(std::filesystem::exists(base + ".run1.txt"));
  // The lease ended during the second rate's run: the cell's row and that run are missing. The first
  // run's file says it took 1000 s, which only reading it back (not training it again) can give.
  std::filesystem::remove(base + ".csv");
  std::filesystem::remove(base + ".run1.txt");
  std::string run0 = ag::test::read_file(base + ".run0.txt");
  const size_t wall = run0.find("wall_seconds=");
  REQUIRE(wall != std::string::npos);
  run0 = run0.substr(0, wall) + "wall_seconds=1000" + run0.substr(run0.find('\n', wall));
  replace_file(base + ".run0.txt", run0);
  const LabSummary resumed = run_lab(spec);
  CHECK(resumed.trained == 1);
  REQUIRE(resumed.rows.size() == 1);
  for (const char* column : {"lr", "steps", "accuracy", "loss", "status"})
    CHECK(resumed.rows[0].at(column) == first.rows[0].at(column));
  CHECK(std::stod(resumed.rows[0].at("cell_seconds")) >= 1000);
  CHECK(std::filesystem::exists(base + ".run1.txt"));
}

}  // namespace lab_zoology_test
