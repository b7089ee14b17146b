#include "examples/interp/pictures.h"

#include <algorithm>
#include <cmath>
#include <cstdio>

#include "core/attention_math.h"
#include "core/autograd.h"
#include "core/ops.h"
#include "examples/common/format.h"
#include "examples/interp/svg.h"
#include "nn/s4.h"

namespace ag::interp {

// One colour per line of a chart, in a fixed order (the methods keep their colour in every chart).
const std::vector<std::string> kPalette = {"#1f77b4", "#ff7f0e", "#2ca02c", "#17becf", "#d62728",
                                           "#9467bd", "#8c564b", "#bcbd22", "#7f7f7f", "#111111"};


namespace {
// The report's column at a 1000 px window (its CSS: 24 px margins): a picture no
// wider is drawn at its own size, its text as large as svg.cpp writes it.
constexpr double kReportColumn = 1000 - 2 * 24;

// What flows through the layers: a causal mask hides key j > i from query i
// (a sparse pattern hides more in each layer, but rollout composes them).
bool causal_visible(size_t, int64_t i, int64_t j) { return j <= i; }

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
}  // namespace

// Weights that are not a distribution over the keys (ssd's: signed, unnormalised) are
// drawn as magnitudes |A|, and rolled out with each row of |A| scaled to sum 1.
bool weights_are_distributions(const nn::GPTConfig& config) {
  return attention_function_traits(config.attention).weights_sum_to_one;
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

namespace {
constexpr int64_t kS4Channels = 4;  // the channels drawn per layer

// The kS4Channels channels of K [C, T] with the largest Σ_ℓ |K_ℓ| over the first `lags` lags, largest first.
std::vector<int64_t> strongest_channels(const std::vector<double>& K, int64_t C, int64_t T, int64_t lags) {
  std::vector<std::pair<double, int64_t>> mass;
  for (int64_t c = 0; c < C; ++c) {
    double total = 0;
    for (int64_t l = 0; l < lags; ++l) total += std::fabs(K[c * T + l]);
    mass.emplace_back(-total, c);
  }
  std::sort(mass.begin(), mass.end());
  std::vector<int64_t> channels;
  for (int64_t i = 0; i < std::min(kS4Channels, C); ++i) channels.push_back(mass[i].second);
  return channels;
}
}  // namespace

// The kernel is generated for block_size positions (a prompt longer than that is drawn to it):
// the prompt's T×T matrix reads its first T lags, the chart all of them.
std::vector<std::string> s4_kernel_svgs(nn::GPT& model, const std::vector<std::string>& labels) {
  NoGradGuard no_grad;
  const int64_t context = model.config().block_size, C = model.config().n_embd;
  const int64_t T = std::min<int64_t>(static_cast<int64_t>(labels.size()), context);
  const std::vector<std::string> shown(labels.begin(), labels.begin() + T);
  std::vector<std::string> svgs;
  for (int64_t l = 0; l < model.config().n_layer; ++l) {
    const auto* mixer = dynamic_cast<const nn::S4Mixer*>(&model.block(l).attn());
    AG_CHECK(mixer, "layer " << l << " is not an s4 mixer (--attention " << name_of(model.config().attention) << ")");
    const std::vector<double> K = mixer->kernel(context).to_vector();  // [C, block_size]
    const std::vector<double> D = mixer->s4d_parameters().D.to_vector();
    const std::vector<int64_t> channels = strongest_channels(K, C, context, T);
    std::vector<interp::Heatmap> panels;
    double largest = 1e-300;
    for (const int64_t c : channels) {
      std::vector<double> a(T * T, 0.0);
      for (int64_t i = 0; i < T; ++i)
        for (int64_t j = 0; j <= i; ++j) a[i * T + j] = std::fabs(K[c * context + i - j]);
      largest = std::max(largest, *std::max_element(a.begin(), a.end()));
      panels.push_back({"channel " + std::to_string(c) + " (skip D = " + fixed(D[c], "%+.3f") + ", not drawn)", a, 0});
    }
    for (interp::Heatmap& p : panels) p.full_scale = largest;
    svgs.push_back(interp::heatmap_grid_svg(
        "layer " + std::to_string(l) + ": A_ij = K_{i−j} of its " + std::to_string(channels.size()) +
            " strongest channels, the same for every input, as |A| (dark blue: " + fixed(largest, "%.3g") +
            "; row: output position, column: input position; hatched: the future)",
        panels, shown, causal_visible, kReportColumn, "s4kernel" + std::to_string(l)));
    std::vector<interp::Series> lines;
    for (size_t n = 0; n < channels.size(); ++n) {
      interp::Series s{"channel " + std::to_string(channels[n]), kPalette[n], {}, {}, false};
      for (int64_t lag = 0; lag < context; ++lag)
        s.x.push_back(static_cast<double>(lag)), s.y.push_back(K[channels[n] * context + lag]);
      lines.push_back(std::move(s));
    }
    svgs.push_back(interp::line_chart_svg({.title = "layer " + std::to_string(l) + ": the same channels' K_ℓ against the lag ℓ "
                                                    "over the whole context (block_size " + std::to_string(context) + ")",
                                           .x_label = "lag ℓ = i − j (positions back)", .left_label = "K_ℓ",
                                           .right_label = "", .left = lines, .right = {}}));
  }
  return svgs;
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

std::string explain_line(const interp::Attribution& a) {
  char line[256];
  const double D = a.f_input - a.f_baseline;
  std::snprintf(line, sizeof line,
                "completeness: attributions sum %.6f, F(x) − F(baseline) %.6f, residual |S − D| %.3g (%.3f %% of |D|)",
                a.sum, D, a.residual(), 100.0 * a.residual() / std::fabs(D));
  return line;
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

}  // namespace ag::interp
