// char_lm heads and char_lm faithfulness (examples/char_lm/inspect.h), and what
// the report shares with them (inspect_model.h): head importance, the curves as
// heads are switched off, the faithfulness run.
#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <filesystem>

#include "core/error.h"
#include "examples/char_lm/inspect.h"
#include "examples/char_lm/inspect_model.h"
#include "examples/common/files.h"
#include "examples/common/format.h"
#include "examples/common/loss_log.h"
#include "examples/interp/pictures.h"
#include "examples/interp/svg.h"

namespace ag::char_lm {

namespace {
namespace fs = std::filesystem;
}  // namespace

HeadsTable measure_heads(Inspected& in, const std::vector<interp::TokenBatch>& batches) {
  return {interp::head_importance(*in.loaded.model, batches), in.loaded.model->config().head_gates()};
}

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
    interp::Series s{curves.orders[o], interp::kPalette[o], {}, curves.losses[o], true};
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

std::string faithfulness_caption(const FaithfulnessRun& run, int64_t steps) {
  return std::to_string(run.result.predictions) + " predictions, integrated gradients with " + std::to_string(steps) +
         " steps; measured in " + fixed(run.seconds, "%.1f") + " s";
}

namespace {
void print_heads(const HeadsTable& table) {
  std::printf("layer  head  importance  gate\n");
  for (size_t l = 0; l < table.importance.size(); ++l)
    for (size_t h = 0; h < table.importance[l].size(); ++h)
      std::printf("%5zu  %4zu  %10.6f  %4.0f\n", l, h, table.importance[l][h], table.gates[l][h]);
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
  replace_file(o.out + "/spearman.svg", interp::spearman_svg(run.result));
  replace_file(o.out + "/deletion.svg", interp::deletion_svg(run.result));
  std::printf("%s/spearman.svg\n%s/deletion.svg\n", o.out.c_str(), o.out.c_str());
  return 0;
}

}  // namespace ag::char_lm
