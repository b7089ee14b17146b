#include "examples/char_lm/inspect.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <numeric>
#include <set>
#include <sstream>

#include "core/error.h"
#include "core/safetensors.h"
#include "examples/char_lm/checkpoint.h"
#include "examples/char_lm/data.h"
#include "examples/char_lm/eval.h"
#include "examples/char_lm/sample.h"
#include "examples/common/format.h"
#include "examples/common/program_header.h"
#include "examples/interp/analysis.h"
#include "examples/interp/faithfulness.h"
#include "examples/interp/svg.h"

namespace ag::char_lm {

namespace {
namespace fs = std::filesystem;

struct Inspected {
  std::string unit;  // the checkpoint directory read
  LoadedModel loaded;
};

Inspected load(const std::string& ckpt) {
  Inspected in;
  in.unit = find_checkpoint(ckpt);
  in.loaded = load_model_to_run(model_path(in.unit));
  AG_CHECK(in.loaded.tokenizer.vocab_size() > 0, "'" << in.unit << "' has no tokenizer characters");
  std::fprintf(stderr, "reading %s\n%s\n", in.unit.c_str(), cli::header(in.loaded.model->config(), Device::CPU).c_str());
  return in;
}

std::vector<int64_t> encode_prompt(const Inspected& in, const std::string& prompt) {
  AG_CHECK(!prompt.empty(), "--prompt is empty");
  std::vector<int64_t> ids;
  try {
    ids = in.loaded.tokenizer.encode(prompt);
  } catch (const Error& e) {
    throw Error(std::string("the prompt: ") + e.what());
  }
  const int64_t block = in.loaded.model->config().block_size;
  AG_CHECK(static_cast<int64_t>(ids.size()) <= block,
           "the prompt has " << ids.size() << " characters, more than the model's block_size " << block);
  return ids;
}

std::vector<std::string> characters(const Inspected& in, const std::vector<int64_t>& ids) {
  std::vector<std::string> chars;
  for (const int64_t id : ids) chars.push_back(in.loaded.tokenizer.decode({id}));
  return chars;
}


// The report's column at a 1000 px window (its CSS: 24 px margins): a picture no
// wider is drawn at its own size, its text as large as svg.cpp writes it.
constexpr double kReportColumn = 1000 - 2 * 24;

// What flows through the layers: a causal mask hides key j > i from query i
// (a sparse pattern hides more in each layer, but rollout composes them).
bool causal_visible(size_t, int64_t i, int64_t j) { return j <= i; }

// Weights that are not a distribution over the keys (ssd's: signed, unnormalised) are
// drawn as magnitudes |A|, and rolled out with each row of |A| scaled to sum 1.
bool weights_are_distributions(const nn::GPTConfig& config) {
  return attention_function_traits(config.attention).weights_sum_to_one;
}
std::vector<Tensor> magnitudes(const std::vector<Tensor>& maps, bool rows_to_one) {
  std::vector<Tensor> out;
  for (const Tensor& A : maps) {  // [H, T, T], float64 on the CPU
    std::vector<double> m = A.to_vector();
    const int64_t T = A.size(2);
    for (double& x : m) x = std::fabs(x);
    for (size_t row = 0; rows_to_one && row < m.size() / T; ++row) {
      double total = 0;
      for (int64_t j = 0; j < T; ++j) total += m[row * T + j];
      for (int64_t j = 0; j < T && total > 0; ++j) m[row * T + j] /= total;
    }
    out.push_back(Tensor::from_vector(m, A.shape(), DType::Float64));
  }
  return out;
}

// Each layer hatches what its own mask hides: the causal mask and, in a sparse
// model, the layer's pattern (per head, with random blocks). A pruned head still
// computes its A (its gate drops it after), so it is drawn, and labelled pruned.
std::vector<std::string> layer_svgs(const std::vector<Tensor>& maps, const std::vector<std::string>& labels,
                                    const nn::GPTConfig& config) {
  const std::vector<std::vector<double>> gates = config.head_gates();
  const bool distributions = weights_are_distributions(config);
  std::vector<std::string> svgs;
  for (size_t l = 0; l < maps.size(); ++l) {
    const AttentionMask mask{.causal = true, .q_offset = 0, .pattern = nn::attention_pattern(config, static_cast<int64_t>(l))};
    const int64_t H = maps[l].size(0), T = maps[l].size(1);
    const std::vector<double> a = (distributions ? maps[l] : magnitudes({maps[l]}, false)[0]).to_vector();
    const double full_scale = distributions ? 1.0 : std::max(1e-300, *std::max_element(a.begin(), a.end()));
    std::vector<interp::Heatmap> panels;
    for (int64_t h = 0; h < H; ++h)
      panels.push_back({"head " + std::to_string(h) + (gates[l][h] == 0.0 ? " (pruned: gate 0)" : ""),
                        {a.begin() + h * T * T, a.begin() + (h + 1) * T * T}, full_scale});
    const std::string what = std::string(attention_function_traits(config.attention).weights) +
                             (distributions ? "" : ", as |A| (dark blue: " + fixed(full_scale, "%.3g") + ")");
    svgs.push_back(interp::heatmap_grid_svg(
        "layer " + std::to_string(l) + ": " + what + " of each head (row: query, column: key; hatched: masked)",
        panels, labels, [&mask](size_t head, int64_t i, int64_t j) { return mask.visible(static_cast<int64_t>(head), i, j); },
        kReportColumn, "layer" + std::to_string(l)));
  }
  return svgs;
}

// Rollout and flow route distributions over the keys; ssd's weights become ones (rows of |A| scaled to sum 1).
std::vector<Tensor> routable(const std::vector<Tensor>& maps, const nn::GPTConfig& config) {
  return weights_are_distributions(config) ? maps : magnitudes(maps, true);
}
Tensor rollout_of(const std::vector<Tensor>& maps, const nn::GPTConfig& config) {
  return interp::attention_rollout(routable(maps, config), config.head_gates());
}

// An ssd model's decays: per layer and head the mean a over the prompt, and the positions it takes
// a state to fall to 1/e of itself, −1 / log ā (its memory).
std::string decay_table(const std::vector<std::vector<double>>& mean_decays) {
  std::string html = "<table class=\"decays\"><tr><th>layer</th><th>head</th><th>mean decay ā</th><th>memory −1/log ā "
                     "(positions)</th></tr>\n";
  for (size_t l = 0; l < mean_decays.size(); ++l)
    for (size_t h = 0; h < mean_decays[l].size(); ++h) {
      const double a = mean_decays[l][h];
      html += "<tr><td>" + std::to_string(l) + "</td><td>" + std::to_string(h) + "</td><td>" + fixed(a) + "</td><td>" +
              (a < 1 ? fixed(-1 / std::log(a), "%.1f") : std::string("∞")) + "</td></tr>\n";
    }
  return html + "</table>\n";
}

// Rollout and flow spread each row over many positions, so their colours are scaled to
// the largest weight below the first row (whose one visible cell is always 1).
std::string through_layers_svg(const Tensor& R, const std::vector<std::string>& labels, const std::string& title,
                               const std::string& id) {
  const std::vector<double> r = R.to_vector();
  const size_t T = labels.size();
  const double largest = T > 1 ? *std::max_element(r.begin() + T, r.end()) : 1.0;
  return interp::heatmap_grid_svg(title, {{id + " (dark blue: " + fixed(largest, "%.3g") + " and above)", r, largest}},
                                  labels, causal_visible, kReportColumn, id);
}
std::string rollout_svg(const Tensor& rollout, const std::vector<std::string>& labels) {
  return through_layers_svg(rollout, labels, "attention rollout through all layers: ½(mean of heads' A) + ½I, multiplied",
                            "rollout");
}

// Per layer, each head's norm part and angle part side by side: a head that selects by direction has
// a flat norm panel and a sharp angle panel; one that selects by magnitude, the reverse.
std::vector<std::string> decomposition_svgs(const std::vector<interp::ScoreParts>& parts, const std::vector<std::string>& labels) {
  std::vector<std::string> svgs;
  for (size_t l = 0; l < parts.size(); ++l) {
    const int64_t H = parts[l].norm.size(0), T = parts[l].norm.size(1);
    const std::vector<double> norm = parts[l].norm.to_vector(), cosine = parts[l].cosine.to_vector();
    const double largest = std::max(1e-300, *std::max_element(norm.begin(), norm.end()));
    std::vector<interp::Heatmap> panels;
    // One colour scale serves every panel of a grid: both parts are drawn in [0, 1].
    for (int64_t h = 0; h < H; ++h) {
      std::vector<double> magnitude(norm.begin() + h * T * T, norm.begin() + (h + 1) * T * T);
      for (double& n : magnitude) n /= largest;
      std::vector<double> angle(cosine.begin() + h * T * T, cosine.begin() + (h + 1) * T * T);
      for (double& c : angle) c = 0.5 * (1 + c);  // cos θ from −1 (white) to 1 (dark blue)
      panels.push_back({"head " + std::to_string(h) + ": ‖q‖‖k‖/√d_h ÷ " + fixed(largest, "%.3g"), magnitude, 1.0});
      panels.push_back({"head " + std::to_string(h) + ": (1 + cos θ)/2", angle, 1.0});
    }
    svgs.push_back(interp::heatmap_grid_svg(
        "layer " + std::to_string(l) + ": each head's score q·k/√d_h = norm part × angle part (row: query, column: key)",
        panels, labels, [](size_t, int64_t i, int64_t j) { return j <= i; }, kReportColumn, "decompose" + std::to_string(l)));
  }
  return svgs;
}

template <class Options> std::vector<interp::TokenBatch> validation_batches(const Options& o, const Inspected& in) {
  const Dataset data = make_dataset(read_text(resolve_data_path(o.data)), in.loaded.model->config().block_size);
  AG_CHECK(data.tokenizer.chars() == in.loaded.tokenizer.chars(),
           "--data: the text's characters are not the model's (is it the text the model was trained on?)");
  Generator gen(o.seed);
  std::vector<interp::TokenBatch> batches(o.eval_iters);
  for (interp::TokenBatch& b : batches)
    get_batch(data.val, o.batch_size, data.eval_window, gen, b.x, b.y);
  return batches;
}

std::string explain_line(const interp::Attribution& a) {
  char line[256];
  const double D = a.f_input - a.f_baseline;
  std::snprintf(line, sizeof line,
                "completeness: attributions sum %.6f, F(x) − F(baseline) %.6f, residual |S − D| %.3g (%.3f %% of |D|)",
                a.sum, D, a.residual(), 100.0 * a.residual() / std::fabs(D));
  return line;
}

interp::Attribution explain(const Inspected& in, const std::vector<int64_t>& ids, int64_t position, int64_t steps) {
  const int64_t T = static_cast<int64_t>(ids.size());
  AG_CHECK(position >= -1 && position < T, "--position " << position << " is outside the prompt's [0, " << T << ")");
  return interp::integrated_gradients(*in.loaded.model, ids, position < 0 ? T - 1 : position, steps);
}

}  // namespace

int run_attention(const AttentionOptions& o) {
  check_output_directory("attention", o.out, OutputKind::Files, o.overwrite);
  Inspected in = load(o.ckpt);
  const std::vector<int64_t> ids = encode_prompt(in, o.prompt);
  std::vector<std::vector<double>> mean_decays;
  const std::vector<Tensor> maps = interp::attention_maps(*in.loaded.model, ids, &mean_decays);
  const std::vector<std::string> labels = characters(in, ids);
  fs::create_directories(o.out);
  const std::vector<std::string> svgs = layer_svgs(maps, labels, in.loaded.model->config());
  for (size_t l = 0; l < svgs.size(); ++l) {
    const std::string path = o.out + "/layer-" + std::to_string(l) + ".svg";
    replace_file(path, svgs[l]);
    std::printf("%s\n", path.c_str());
  }
  replace_file(o.out + "/rollout.svg", rollout_svg(rollout_of(maps, in.loaded.model->config()), labels));
  std::printf("%s/rollout.svg\n", o.out.c_str());
  const auto start = std::chrono::steady_clock::now();
  const Tensor flow = interp::attention_flow(routable(maps, in.loaded.model->config()), in.loaded.model->config().head_gates());
  const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  replace_file(o.out + "/flow.svg", through_layers_svg(flow, labels,
                                                      "attention flow: the max-flow from each query to each key through the "
                                                      "layers' ½(mean of heads' A) + ½I",
                                                      "flow"));
  const int64_t T = static_cast<int64_t>(ids.size());
  std::printf("%s/flow.svg (%lld max-flows over %zu layers of %lld positions in %.3f s)\n", o.out.c_str(),
              static_cast<long long>(T * T), maps.size(), static_cast<long long>(T), seconds);
  if (o.decompose) {
    const std::vector<interp::ScoreParts> parts = interp::score_decomposition(*in.loaded.model, ids);
    const std::vector<std::string> decomposed = decomposition_svgs(parts, labels);
    for (size_t l = 0; l < decomposed.size(); ++l) {
      const std::string path = o.out + "/decompose-" + std::to_string(l) + ".svg";
      replace_file(path, decomposed[l]);
      std::printf("%s\n", path.c_str());
    }
    std::printf("within a query's row, the correlation of each head's score with its angle part cos θ and its norm part ‖k‖:\n");
    for (size_t l = 0; l < parts.size(); ++l) {
      const std::vector<interp::Selection> heads = interp::head_selection(parts[l]);
      for (size_t h = 0; h < heads.size(); ++h)
        std::printf("layer %zu head %zu: angle %+.3f, norm %+.3f: selects by %s\n", l, h, heads[h].by_angle, heads[h].by_norm,
                    std::fabs(heads[h].by_angle) >= std::fabs(heads[h].by_norm) ? "direction" : "magnitude");
    }
  }
  for (size_t l = 0; l < mean_decays.size(); ++l)
    for (size_t h = 0; h < mean_decays[l].size(); ++h)
      std::printf("layer %zu head %zu: mean decay %.4f (memory %.1f positions)\n", l, h, mean_decays[l][h],
                  -1 / std::log(mean_decays[l][h]));
  return 0;
}

int run_explain(const ExplainOptions& o) {
  const Inspected in = load(o.ckpt);
  const std::vector<int64_t> ids = encode_prompt(in, o.prompt);
  const interp::Attribution a = explain(in, ids, o.position, o.steps);
  const std::vector<std::string> chars = characters(in, ids);
  std::printf("the prediction at position %lld (after '%s'): '%s', logit %.4f; integrated gradients, %lld steps\n",
              static_cast<long long>(a.position), interp::visible_char(chars[a.position]).c_str(),
              interp::visible_char(in.loaded.tokenizer.decode({a.target})).c_str(), a.f_input,
              static_cast<long long>(o.steps));
  std::printf("position  attribution  char\n");
  for (size_t t = 0; t < a.per_position.size(); ++t)
    std::printf("%8zu  %+11.6f  %s\n", t, a.per_position[t], interp::visible_char(chars[t]).c_str());
  std::printf("%s\n", explain_line(a).c_str());
  return 0;
}

namespace {
struct HeadsTable {
  std::vector<std::vector<double>> importance, gates;
};

HeadsTable measure_heads(Inspected& in, const std::vector<interp::TokenBatch>& batches) {
  return {interp::head_importance(*in.loaded.model, batches), in.loaded.model->config().head_gates()};
}

void print_heads(const HeadsTable& table) {
  std::printf("layer  head  importance  gate\n");
  for (size_t l = 0; l < table.importance.size(); ++l)
    for (size_t h = 0; h < table.importance[l].size(); ++h)
      std::printf("%5zu  %4zu  %10.6f  %4.0f\n", l, h, table.importance[l][h], table.gates[l][h]);
}

// One colour per line of a chart, in a fixed order (the methods keep their colour in every chart).
const std::vector<std::string> kPalette = {"#1f77b4", "#ff7f0e", "#2ca02c", "#17becf", "#d62728",
                                           "#9467bd", "#8c564b", "#bcbd22", "#7f7f7f", "#111111"};

// Val loss as the heads go, in three orders: least important first, most important first, random.
struct HeadCurves {
  std::vector<std::string> orders;
  std::vector<std::vector<double>> losses;  // [order][heads switched off]
  int64_t heads_on = 0;
};

HeadCurves head_curves(nn::GPT& model, const HeadsTable& table, const std::vector<interp::TokenBatch>& batches,
                       uint64_t seed) {
  const std::vector<interp::Head> least_first = interp::heads_by_importance(table.importance, table.gates);
  std::vector<interp::Head> random = least_first;
  Generator gen(seed);
  for (size_t i = random.size(); i > 1; --i) std::swap(random[i - 1], random[gen.integer(i)]);  // Fisher-Yates
  HeadCurves curves;
  curves.heads_on = static_cast<int64_t>(least_first.size());
  curves.orders = {"least important first", "most important first", "random order"};
  curves.losses = {interp::pruning_curve(model, batches, least_first),
                   interp::pruning_curve(model, batches, {least_first.rbegin(), least_first.rend()}),
                   interp::pruning_curve(model, batches, random)};
  return curves;
}

std::string head_curve_svg(const HeadCurves& curves) {
  std::vector<interp::Series> series;
  for (size_t o = 0; o < curves.orders.size(); ++o) {
    interp::Series s{curves.orders[o], kPalette[o], {}, curves.losses[o], true};
    for (size_t k = 0; k < curves.losses[o].size(); ++k) s.x.push_back(static_cast<double>(curves.heads_on - static_cast<int64_t>(k)));
    series.push_back(s);
  }
  return interp::line_chart_svg({.title = "val loss as heads are switched off one at a time", .x_label = "heads remaining",
                                 .left_label = kLossAxis, .right_label = "", .left = series, .right = {}});
}

std::string head_curve_line(const HeadCurves& curves) {
  const size_t half = static_cast<size_t>(curves.heads_on / 2);
  std::string line = "at " + std::to_string(curves.heads_on - static_cast<int64_t>(half)) + " of " +
                     std::to_string(curves.heads_on) + " heads: val loss";
  for (size_t o = 0; o < curves.orders.size(); ++o)
    line += std::string(o ? "," : "") + " " + fixed(curves.losses[o][half]) + " (" + curves.orders[o] + ")";
  return line + "; with every head on " + fixed(curves.losses[0][0]);
}

void print_head_curves(const HeadCurves& curves) {
  std::printf("heads off  heads on");
  for (const std::string& order : curves.orders) std::printf("  %22s", order.c_str());
  std::printf("\n");
  for (size_t k = 0; k < curves.losses[0].size(); ++k) {
    std::printf("%9zu  %8lld", k, static_cast<long long>(curves.heads_on - static_cast<int64_t>(k)));
    for (const std::vector<double>& losses : curves.losses) std::printf("  %22.4f", losses[k]);
    std::printf("\n");
  }
  std::printf("%s\n", head_curve_line(curves).c_str());
}

// N validation windows of block_size characters, and K distinct positions in [8, block_size) in each.
struct Predictions {
  std::vector<std::vector<int64_t>> prompts, positions;
};

template <class Options> Predictions draw_predictions(const Options& o, const Inspected& in) {
  const int64_t T = in.loaded.model->config().block_size;
  AG_CHECK(o.positions <= T - interp::kDeletionSteps,
           "--positions " << o.positions << ": a window of block_size " << T << " has " << std::max<int64_t>(0, T - interp::kDeletionSteps)
                          << " positions with " << interp::kDeletionSteps << " or more characters before them to erase");
  const Dataset data = make_dataset(read_text(resolve_data_path(o.data)), T);
  AG_CHECK(data.tokenizer.chars() == in.loaded.tokenizer.chars(),
           "--data: the text's characters are not the model's (is it the text the model was trained on?)");
  Generator gen(o.seed);
  Tensor x, y;
  get_batch(data.val, o.prompts, T, gen, x, y);
  const std::vector<double> ids = x.to_vector();  // [N, T]
  Predictions p;
  for (int64_t n = 0; n < o.prompts; ++n) {
    p.prompts.emplace_back(ids.begin() + n * T, ids.begin() + (n + 1) * T);
    std::vector<int64_t> candidates(T - interp::kDeletionSteps);
    std::iota(candidates.begin(), candidates.end(), interp::kDeletionSteps);
    for (int64_t k = 0; k < o.positions; ++k)  // a partial Fisher-Yates: the first K of a shuffle
      std::swap(candidates[k], candidates[k + gen.integer(candidates.size() - k)]);
    p.positions.emplace_back(candidates.begin(), candidates.begin() + o.positions);
  }
  return p;
}

struct FaithfulnessRun {
  interp::Faithfulness result;
  double seconds = 0;
};

template <class Options> FaithfulnessRun run_faithfulness_on(const Options& o, const Inspected& in) {
  const Predictions p = draw_predictions(o, in);
  const auto start = std::chrono::steady_clock::now();
  FaithfulnessRun run{interp::measure_faithfulness(*in.loaded.model, p.prompts, p.positions, o.ig_steps, o.seed), 0};
  run.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  return run;
}

std::string faithfulness_caption(const FaithfulnessRun& run, int64_t steps) {
  return std::to_string(run.result.predictions) + " predictions, integrated gradients with " + std::to_string(steps) +
         " steps; measured in " + fixed(run.seconds, "%.1f") + " s";
}

// Each method's ρ, sorted, against the fraction of the predictions below it: the spread at a glance.
std::string spearman_svg(const interp::Faithfulness& f) {
  std::vector<interp::Series> series;
  for (size_t m = 0; m + 1 < f.methods.size(); ++m) {  // erasure against itself is 1 throughout
    std::vector<double> rho;
    for (const double r : f.methods[m].rho)
      if (!std::isnan(r)) rho.push_back(r);
    std::sort(rho.begin(), rho.end());
    interp::Series s{f.methods[m].method, kPalette[m], {}, rho, false};
    for (size_t i = 0; i < rho.size(); ++i) s.x.push_back((static_cast<double>(i) + 0.5) / static_cast<double>(rho.size()));
    series.push_back(s);
  }
  return interp::line_chart_svg({.title = "Spearman ρ of each explanation with erasure, one prediction per point, sorted",
                                 .x_label = "fraction of predictions", .left_label = "Spearman ρ with erasure",
                                 .right_label = "", .left = series, .right = {}});
}

std::string deletion_svg(const interp::Faithfulness& f) {
  std::vector<interp::Series> series;
  for (size_t m = 0; m < f.methods.size(); ++m) {
    interp::Series s{f.methods[m].method, kPalette[m], {}, f.methods[m].deletion, true};
    for (int64_t k = 1; k <= interp::kDeletionSteps; ++k) s.x.push_back(static_cast<double>(k));
    series.push_back(s);
  }
  return interp::line_chart_svg({.title = "deletion curves: the target logit's mean drop after erasing each method's top k",
                                 .x_label = "positions erased k", .left_label = "mean drop of the target logit",
                                 .right_label = "", .left = series, .right = {}});
}

// `text` and spaces to `width` characters (UTF-8: the method names hold ×, ‖, α).
std::string padded(const std::string& text, size_t width) {
  const size_t characters = std::count_if(text.begin(), text.end(), [](char c) { return (c & 0xC0) != 0x80; });
  return text + std::string(width > characters ? width - characters : 0, ' ');
}

void print_faithfulness(const FaithfulnessRun& run, int64_t steps) {
  std::printf("faithfulness against erasure: %s\n", faithfulness_caption(run, steps).c_str());
  std::printf("%s  %s  ρ with    partial ρ  mean drop of the target logit after erasing the top k\n",
              padded("method", 12).c_str(), padded("Spearman ρ mean ± sd", 22).c_str());
  std::printf("%s  %s  position  | position ", padded("", 12).c_str(), padded("(predictions)", 22).c_str());
  for (int64_t k = 1; k <= interp::kDeletionSteps; ++k) std::printf("  k=%-4lld", static_cast<long long>(k));
  std::printf("\n");
  for (const interp::MethodSummary& m : run.result.methods) {
    char rho[64];
    std::snprintf(rho, sizeof rho, "%+.3f ± %.3f (%lld)", m.mean_rho(), m.spread_rho(), static_cast<long long>(m.defined()));
    std::printf("%s  %s  %+.3f    %+.3f    ", padded(m.method, 12).c_str(), padded(rho, 22).c_str(),
                interp::defined_mean(m.rho_position), interp::defined_mean(m.rho_partial));
    for (const double d : m.deletion) std::printf("  %+6.3f", d);
    std::printf("\n");
  }
  std::printf("paired tests of ρ with erasure: Wilcoxon signed-rank over the windows, each window's mean ρ difference\n");
  for (const auto& [a, b] : interp::kComparisons) {
    const interp::MethodComparison c = interp::compare_methods(run.result, a, b);
    std::string pair = a;
    pair += " − ";
    pair += b;
    std::printf("  %s  mean Δρ %+.3f  windows %lld (nonzero %lld)  W+ %.1f  z %+.2f  p %.2g%s\n",
                padded(pair, 27).c_str(), c.mean_difference, static_cast<long long>(c.windows),
                static_cast<long long>(c.test.n), c.test.w_plus, c.test.z, c.test.p, c.test.exact ? " (exact)" : "");
  }
}

std::string faithfulness_table_html(const interp::Faithfulness& f) {
  std::string html = "<table class=\"faithfulness\"><tr><th>method</th><th>Spearman ρ with erasure: mean ± sd (n)</th>"
                     "<th>ρ with position</th><th>partial ρ | position</th>";
  for (int64_t k = 1; k <= interp::kDeletionSteps; ++k) html += "<th>k = " + std::to_string(k) + "</th>";
  html += "</tr>\n";
  for (const interp::MethodSummary& m : f.methods) {
    html += "<tr><td>" + interp::escape_xml(m.method) + "</td><td>" + fixed(m.mean_rho(), "%+.3f") + " ± " +
            fixed(m.spread_rho(), "%.3f") + " (" + std::to_string(m.defined()) + ")</td><td>" +
            fixed(interp::defined_mean(m.rho_position), "%+.3f") + "</td><td>" + fixed(interp::defined_mean(m.rho_partial), "%+.3f") + "</td>";
    for (const double d : m.deletion) html += "<td>" + fixed(d, "%+.3f") + "</td>";
    html += "</tr>\n";
  }
  html += "</table>\n<table class=\"paired\"><tr><th>paired test of ρ with erasure</th><th>mean Δρ over windows</th>"
          "<th>windows (nonzero)</th><th>W+</th><th>p (Wilcoxon signed-rank)</th></tr>\n";
  for (const auto& [a, b] : interp::kComparisons) {
    const interp::MethodComparison c = interp::compare_methods(f, a, b);
    html += "<tr class=\"paired\"><td>" + interp::escape_xml(a + " − " + b) + "</td><td>" + fixed(c.mean_difference, "%+.3f") +
            "</td><td>" + std::to_string(c.windows) + " (" + std::to_string(c.test.n) + ")</td><td>" + fixed(c.test.w_plus, "%.1f") + "</td><td>" +
            fixed(c.test.p, "%.2g") + (c.test.exact ? " (exact)" : "") + "</td></tr>\n";
  }
  return html + "</table>\n";
}
}  // namespace

int run_heads(const HeadsOptions& o) {
  Inspected in = load(o.ckpt);
  AG_CHECK(o.prune == 0 || !o.out.empty(), "heads: --prune needs --out (where to write the pruned model)");
  if (o.prune > 0) check_output_directory("heads --prune", o.out, OutputKind::Run, o.overwrite);
  const std::vector<interp::TokenBatch> batches = validation_batches(o, in);
  const HeadsTable table = measure_heads(in, batches);
  std::printf("head importance: mean |dL/dg_h| over %lld validation batches of %lld x %lld characters\n",
              static_cast<long long>(o.eval_iters), static_cast<long long>(o.batch_size),
              static_cast<long long>(in.loaded.model->config().block_size));
  print_heads(table);
  if (o.curve) {
    const HeadCurves curves = head_curves(*in.loaded.model, table, batches, o.seed);
    print_head_curves(curves);
    replace_file(o.curve_svg, head_curve_svg(curves));
    std::printf("%s\n", o.curve_svg.c_str());
  }
  if (o.prune == 0) return 0;
  nn::GPT& model = *in.loaded.model;
  const double before = interp::mean_loss(model, batches);
  model.set_head_mask(nn::head_mask_text(interp::prune_least_important(table.importance, table.gates, o.prune)));
  const double after = interp::mean_loss(model, batches);
  fs::create_directories(o.out);
  if (o.overwrite) clear_run(o.out);
  save_model(model_path(o.out), model, in.loaded.tokenizer, in.loaded.iter);
  std::printf("pruned the %lld least important heads: head_mask %s\n", static_cast<long long>(o.prune),
              model.config().head_mask.c_str());
  std::printf("val loss before %.4f, after %.4f (same %lld batches); model written to %s\n", before, after,
              static_cast<long long>(o.eval_iters), model_path(o.out).c_str());
  return 0;
}

int run_faithfulness(const FaithfulnessOptions& o) {
  check_output_directory("faithfulness", o.out, OutputKind::Files, o.overwrite);
  const Inspected in = load(o.ckpt);
  const FaithfulnessRun run = run_faithfulness_on(o, in);
  print_faithfulness(run, o.ig_steps);
  fs::create_directories(o.out);
  replace_file(o.out + "/spearman.svg", spearman_svg(run.result));
  replace_file(o.out + "/deletion.svg", deletion_svg(run.result));
  std::printf("%s/spearman.svg\n%s/deletion.svg\n", o.out.c_str(), o.out.c_str());
  return 0;
}

void replace_file(const std::string& path, const std::string& text) {
  const std::string tmp = path + ".tmp";
  {
    std::ofstream out(tmp, std::ios::binary | std::ios::trunc);
    AG_CHECK(out, "cannot write '" << tmp << "'");
    out << text;
    AG_CHECK(out.flush(), "writing '" << tmp << "' failed");
  }
  fs::rename(tmp, path);
}

LossLog read_loss_log(const std::string& log_csv_path) {
  std::ifstream in(log_csv_path);
  AG_CHECK(in, "cannot read '" << log_csv_path << "'");
  LossLog log;
  std::string line;
  std::getline(in, line);  // iter,kind,loss,lr,ms_per_iter
  while (std::getline(in, line)) {
    std::istringstream fields(line);
    std::string iter, kind, loss, rate;
    if (!std::getline(fields, iter, ',') || !std::getline(fields, kind, ',') || !std::getline(fields, loss, ',')) continue;
    std::getline(fields, rate, ',');
    const double x = std::stod(iter), y = std::stod(loss);
    LossLog::Curve* curve = kind == "train" ? &log.train : kind == "val" ? &log.val : kind == "batch" ? &log.batch : nullptr;
    if (!curve) continue;
    curve->iter.push_back(x);
    curve->value.push_back(y);
    if (kind == "batch" && !rate.empty()) {
      log.lr.iter.push_back(x);
      log.lr.value.push_back(std::stod(rate));
    }
  }
  return log;
}

std::string loss_chart_svg(const std::string& log_csv_path) {
  const LossLog log = read_loss_log(log_csv_path);
  const auto series = [](const LossLog::Curve& c, const std::string& name, const std::string& colour, bool markers) {
    return interp::Series{name, colour, c.iter, c.value, markers};
  };
  return interp::line_chart_svg({.title = "loss (" + log_csv_path + ")",
                                 .x_label = "iteration",
                                 .left_label = kLossAxis,
                                 .right_label = "learning rate",
                                 .left = {series(log.batch, "batch loss", "#c8c8c8", false),
                                          series(log.train, "train loss", "#1f77b4", true),
                                          series(log.val, "val loss", "#ff7f0e", true)},
                                 .right = {series(log.lr, "learning rate", "#2ca02c", false)}});
}

void write_loss_chart(const std::string& log_csv_path, const std::string& svg_path) {
  replace_file(svg_path, loss_chart_svg(log_csv_path));
}

// The report's length-extrapolation section: val loss at 1, 2, 4 and 8 × block_size (char_lm eval), for a
// model whose positions go past block_size.
std::string extrapolation_section(const Inspected& in, const ReportOptions& o) {
  const nn::GPTConfig& config = in.loaded.model->config();
  std::string html = "<section id=\"extrapolation\"><h2>Length extrapolation</h2>\n";
  if (config.positions_end_at_block_size())
    return html + "<p>Learned positions end at block_size " + std::to_string(config.block_size) +
           ": the model cannot read a longer sequence (rope, alibi and none can).</p></section>\n";
  if (!fs::exists(train_state_path(in.unit)))
    return html + "<p>No train_state.safetensors beside the model: no run options to evaluate with.</p></section>\n";
  interp::Series val{"val loss", "#ff7f0e", {}, {}, true};
  std::string rows;
  for (const int64_t factor : {1, 2, 4, 8}) {
    EvalOptions eval;
    eval.ckpt = in.unit;
    eval.block_size = factor * config.block_size;
    eval.eval_iters = o.eval_iters;
    eval.data = o.data;
    const EvalResult r = evaluate_checkpoint(eval);
    val.x.push_back(static_cast<double>(r.block_size));
    val.y.push_back(r.losses.val_loss);
    rows += "<tr><td>" + std::to_string(r.block_size) + "</td><td>" + fixed(r.losses.val_loss) + "</td></tr>";
  }
  return html + "<p>The val loss of " + std::to_string(o.eval_iters) + " batches of sequences T long, the model trained at T = " +
         std::to_string(config.block_size) + " (<code>char_lm eval --block-size T</code>).</p>\n" +
         interp::line_chart_svg({.title = "val loss against sequence length", .x_label = "T", .left_label = kLossAxis,
                                 .right_label = "", .left = {val}, .right = {}}) +
         "<table><tr><th>T</th><th>val loss</th></tr>" + rows + "</table></section>\n";
}

namespace {
// The report's faithfulness section after its heading: what is compared, the table, the two charts.
std::string faithfulness_section(const ReportOptions& o, const Inspected& in) {
  const FaithfulnessRun faithfulness = run_faithfulness_on(o, in);
  return "<p>Each method scores the earlier positions of a prediction (the logit of the model's top next character); the "
         "ground truth is erasure, the logit's drop when one position's token embedding is replaced by the baseline 0 (its "
         "position kept). Spearman ρ of each method's scores with the erasure effects, and the deletion curves: the mean "
         "drop after erasing a method's top k positions together (random: a random order; erasure: its own). " +
         interp::escape_xml(faithfulness_caption(faithfulness, o.ig_steps)) + " (<code>char_lm faithfulness</code>).</p>\n" +
         faithfulness_table_html(faithfulness.result) + spearman_svg(faithfulness.result) +
         deletion_svg(faithfulness.result) + "</section>\n";
}
}  // namespace

int run_report(const ReportOptions& o) {
  Inspected in = load(o.ckpt);
  const std::vector<int64_t> ids = encode_prompt(in, o.prompt);
  const std::vector<std::string> chars = characters(in, ids);
  nn::GPT& model = *in.loaded.model;

  std::string html =
      "<!DOCTYPE html>\n<html lang=\"en\"><head><meta charset=\"utf-8\"><title>attograd report: " + interp::escape_xml(in.unit) +
      "</title>\n<style>body{font-family:sans-serif;margin:24px;max-width:1300px}"
      "table{border-collapse:collapse}td,th{border:1px solid #ccc;padding:2px 8px;text-align:left}"
      "pre{background:#f6f6f6;padding:8px;white-space:pre-wrap}.attr{font-family:monospace;font-size:16px}"
      ".attr span{display:inline-block;text-align:center;line-height:1.2;margin:1px;padding:0 2px}"
      ".attr small{display:block;font-size:11px}"
      ".scale .ramp{display:inline-block;width:200px;height:10px;vertical-align:middle;border:1px solid #888;"
      "background:linear-gradient(to right,rgb(31,119,180),white,rgb(214,39,40))}"
      "section{margin-bottom:32px}section svg{max-width:100%;height:auto}.options code{display:inline-block;background:#f0f0f0;margin:2px;padding:1px 6px}"
      "</style></head><body>\n<h1>What the model learned</h1>\n<p>Checkpoint <code>" +
      interp::escape_xml(in.unit) + "</code>; prompt <code>" + interp::escape_xml(o.prompt) + "</code>.</p>\n";

  // The model's options that apply to it; the run's options besides the model's (listed once, or not at all).
  Metadata model_options, training_options;
  std::set<std::string> model_keys;
  nn::GPTConfig::for_each_option(model.config(), [&](const auto& value, const OptionInfo& info) {
    if (info.kind != OptionKind::Model && info.kind != OptionKind::Derived) return;
    model_keys.insert(info.name);
    if (model.config().applies(info.name)) model_options[info.name] = option_to_string(value);
  });
  if (in.loaded.iter >= 0) model_options["iter"] = std::to_string(in.loaded.iter);
  if (fs::exists(train_state_path(in.unit)))
    for (const auto& [key, value] : load_safetensors(train_state_path(in.unit)).metadata) {
      std::string snake = key;
      std::replace(snake.begin(), snake.end(), '-', '_');
      if (!model_keys.count(snake)) training_options[key] = value;
    }
  const auto option_list = [](const Metadata& options) {
    std::string list = "<p class=\"options\">";
    for (const auto& [key, value] : options)
      list += "<code>" + interp::escape_xml(key) + " = " + interp::escape_xml(value.empty() ? "\"\"" : value) + "</code> ";
    return list + "</p>\n";
  };
  html += "<section id=\"config\"><h2>Configuration</h2>\n<h3>The model (its checkpoint's metadata)</h3>\n" +
          option_list(model_options) + "<h3>The training run</h3>\n" +
          (training_options.empty() ? "<p>No train_state.safetensors beside the model.</p>\n" : option_list(training_options)) +
          "</section>\n";

  html += "<section id=\"loss\"><h2>Loss curves</h2>\n";
  const std::string unit_log = in.unit + "/log.csv", run_log = fs::path(in.unit).parent_path().string() + "/log.csv";
  const std::string log = fs::exists(unit_log) ? unit_log : run_log;
  html += fs::exists(log) ? loss_chart_svg(log) : "<p>No log.csv beside this checkpoint.</p>\n";
  html += "</section>\n";
  html += extrapolation_section(in, o);

  SampleOptions sample;
  sample.tokens = o.tokens;
  sample.max_context = static_cast<int64_t>(ids.size()) + o.tokens;  // the whole sample, past block_size where the model can
  html += "<section id=\"sample\"><h2>A sample</h2>\n<p>" + std::to_string(o.tokens) +
          " characters after the prompt, temperature " + fixed(sample.temperature, "%.2g") + ", top-k " +
          std::to_string(sample.top_k) + ", seed " + std::to_string(sample.seed) + ".</p>\n<pre>" +
          interp::escape_xml(generate(model, in.loaded.tokenizer, o.prompt, sample)) + "</pre></section>\n";

  std::vector<std::vector<double>> mean_decays;
  const std::vector<Tensor> maps = interp::attention_maps(model, ids, &mean_decays);
  html += "<section id=\"attention\"><h2>Attention maps</h2>\n<p>Each head's A for the prompt (a linear-attention or "
          "ssd model's: the weights its output implies, Z = A V): row i is the "
          "query at position i, column j the key at position j; dark blue is weight 1 (ssd: the largest |A|), white 0, hatched grey "
          "what the mask hides (the future, and in a sparse model what its pattern leaves out).</p>\n";
  for (const std::string& svg : layer_svgs(maps, chars, model.config())) html += "<div>" + svg + "</div>\n";
  if (!mean_decays.empty())
    html += "<p>How far each ssd head remembers: its decay a_t = exp(−exp(a_log)·Δ_t) averaged over the prompt; "
            "a state falls to 1/e of itself in −1/log ā positions.</p>\n" + decay_table(mean_decays);
  html += "</section>\n";

  html += "<section id=\"rollout\"><h2>Attention rollout</h2>\n<p>Which earlier characters each position draws on "
          "through all the layers (Abnar &amp; Zuidema 2020); each row sums to 1.</p>\n" +
          rollout_svg(rollout_of(maps, model.config()), chars) + "</section>\n";

  const interp::Attribution a = explain(in, ids, -1, o.steps);
  double largest = 1e-300;
  for (const double v : a.per_position) largest = std::max(largest, std::fabs(v));
  html += "<section id=\"attributions\"><h2>Integrated gradients</h2>\n<p>The logit of the predicted next character "
          "<code>" + interp::escape_xml(interp::visible_char(in.loaded.tokenizer.decode({a.target}))) +
          "</code> after the prompt, attributed to each character's token embedding (baseline: zero embeddings, "
          "positions kept; " + std::to_string(o.steps) + " trapezoid steps). Under each character its attribution; red "
          "raises the logit, blue lowers it:</p>\n<p class=\"scale\">" + fixed(-largest, "%+.3f") +
          " <span class=\"ramp\"></span> " + fixed(largest, "%+.3f") + "</p>\n<p class=\"attr\">";
  for (size_t t = 0; t < chars.size(); ++t) {
    const double v = a.per_position[t], alpha = std::fabs(v) / largest;
    const std::string colour = v >= 0 ? "214,39,40" : "31,119,180";
    html += "<span style=\"background:rgba(" + colour + "," + fixed(alpha, "%.3f") + ")\">" +
            interp::escape_xml(interp::visible_char(chars[t])) + "<small>" + fixed(v, "%+.2f") + "</small></span>" +
            (chars[t] == "\n" ? "<br>" : "");
  }
  html += "</p>\n<p>" + interp::escape_xml(explain_line(a)) + "</p></section>\n";

  html += "<section id=\"faithfulness\"><h2>Is attention an explanation?</h2>\n";
  if (!weights_are_distributions(model.config()))
    html += "<p>Not measured: this model's attention weights are signed and unnormalised, not a distribution over the keys, "
            "so rollout and flow, which route a distribution, are not defined for it.</p></section>\n";
  else
    html += faithfulness_section(o, in);

  const std::vector<interp::TokenBatch> batches = validation_batches(o, in);
  const HeadsTable table = measure_heads(in, batches);
  html += "<section id=\"heads\"><h2>Head importance</h2>\n<p>Mean |∂L/∂g_h| over " + std::to_string(o.eval_iters) +
          " validation batches (Michel et al. 2019); gate 0: pruned.</p>\n<table><tr><th>layer</th>";
  for (size_t h = 0; h < table.importance.at(0).size(); ++h) html += "<th>head " + std::to_string(h) + "</th>";
  html += "</tr>\n";
  for (size_t l = 0; l < table.importance.size(); ++l) {
    html += "<tr><td>" + std::to_string(l) + "</td>";
    for (size_t h = 0; h < table.importance[l].size(); ++h)
      html += "<td>" + fixed(table.importance[l][h]) + (table.gates[l][h] == 0.0 ? " (pruned)" : "") + "</td>";
    html += "</tr>\n";
  }
  html += "</table></section>\n";

  const HeadCurves curves = head_curves(model, table, batches, o.seed);
  html += "<section id=\"head-curve\"><h2>How many heads?</h2>\n<p>The heads switched off one at a time, least important "
          "first (the importance above), most important first, and in a random order; the val loss of the same " +
          std::to_string(o.eval_iters) + " batches after each (<code>char_lm heads --curve</code>): " +
          interp::escape_xml(head_curve_line(curves)) + ".</p>\n" + head_curve_svg(curves) + "</section>\n</body></html>\n";
  replace_file(o.out, html);
  std::printf("%s\n", o.out.c_str());
  return 0;
}

}  // namespace ag::char_lm
