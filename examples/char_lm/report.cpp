// char_lm report (examples/char_lm/inspect.h): one HTML page of what the
// inspect commands show, section by section.
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <set>

#include "core/error.h"
#include "core/safetensors.h"
#include "examples/common/eval.h"
#include "examples/char_lm/inspect.h"
#include "examples/char_lm/inspect_model.h"
#include "examples/common/sample.h"
#include "examples/common/files.h"
#include "examples/common/format.h"
#include "examples/common/loss_log.h"
#include "examples/interp/pictures.h"
#include "examples/interp/svg.h"

namespace ag::char_lm {

namespace {
namespace fs = std::filesystem;

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

// The report's faithfulness section after its heading: what is compared, the table, the two charts.
std::string faithfulness_section(const ReportOptions& o, const Inspected& in) {
  const FaithfulnessRun faithfulness = run_faithfulness_on(o, in);
  return "<p>Each method scores the earlier positions of a prediction (the logit of the model's top next character); the "
         "ground truth is erasure, the logit's drop when one position's token embedding is replaced by the baseline 0 (its "
         "position kept). Spearman ρ of each method's scores with the erasure effects, and the deletion curves: the mean "
         "drop after erasing a method's top k positions together (random: a random order; erasure: its own). " +
         interp::escape_xml(faithfulness_caption(faithfulness, o.ig_steps)) + " (<code>char_lm faithfulness</code>).</p>\n" +
         interp::faithfulness_table_html(faithfulness.result) + interp::spearman_svg(faithfulness.result) +
         interp::deletion_svg(faithfulness.result) + "</section>\n";
}

// The page up to its first section: the style, the title, the checkpoint and the prompt.
std::string page_head(const Inspected& in, const ReportOptions& o) {
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
  return html;
}

// The model's options that apply to it; the run's options besides the model's (listed once, or not at all).
std::string configuration_section(const Inspected& in) {
  const nn::GPT& model = *in.loaded.model;
  std::string html;
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
  return html;
}

// The run's loss curves (log.csv beside the unit, or in its run directory).
std::string loss_section(const Inspected& in) {
  std::string html;
  html += "<section id=\"loss\"><h2>Loss curves</h2>\n";
  const std::string unit_log = in.unit + "/log.csv", run_log = fs::path(in.unit).parent_path().string() + "/log.csv";
  const std::string log = fs::exists(unit_log) ? unit_log : run_log;
  html += fs::exists(log) ? loss_chart_svg(log) : "<p>No log.csv beside this checkpoint.</p>\n";
  html += "</section>\n";
  return html;
}

// A sample after the prompt.
std::string sample_section(Inspected& in, const std::vector<int64_t>& ids, const ReportOptions& o) {
  nn::GPT& model = *in.loaded.model;
  std::string html;
  SampleOptions sample;
  sample.tokens = o.tokens;
  sample.max_context = static_cast<int64_t>(ids.size()) + o.tokens;  // the whole sample, past block_size where the model can
  html += "<section id=\"sample\"><h2>A sample</h2>\n<p>" + std::to_string(o.tokens) +
          " characters after the prompt, temperature " + fixed(sample.temperature, "%.2g") + ", top-k " +
          std::to_string(sample.top_k) + ", seed " + std::to_string(sample.seed) + ".</p>\n<pre>" +
          interp::escape_xml(generate(model, in.loaded.tokenizer, o.prompt, sample)) + "</pre></section>\n";
  return html;
}

// What a mixer with its own op shows in place of attention maps: S4's kernels (its weights over
// positions, fixed by training, not by the input); an LSTM forms none.
std::string own_mixer_section(nn::GPT& model, const std::vector<std::string>& chars) {
  const AttentionFunction function = model.config().attention;
  if (function != AttentionFunction::S4)
    return "<section id=\"attention\"><h2>Attention maps</h2>\n<p>None: --attention " + std::string(name_of(function)) +
           " forms no weights over positions (" + attention_function_traits(function).weights + ").</p></section>\n";
  std::string html =
      "<section id=\"s4-kernels\"><h2>What S4 attends to: its kernels</h2>\n<p>Each channel c of an s4 layer is one "
      "causal convolution and a skip, y_i = Σ_{j≤i} K_{i−j} u_j + D u_i: the convolution's matrix A_ij = K_{i−j} is "
      "Toeplitz (constant along each diagonal) and the same for every input, where softmax's A is formed anew from each "
      "prompt's q and k (docs/backprop.md §33). GELU and W_O then mix the channels. Per layer, the 4 channels with the "
      "most weight over the prompt's lags, as |A| over the prompt (D named above each, not drawn); then their K_ℓ, "
      "signed, over the whole context.</p>\n";
  for (const std::string& svg : interp::s4_kernel_svgs(model, chars)) html += "<div>" + svg + "</div>\n";
  return html + "</section>\n";
}

// Each layer's attention maps, and their rollout through the layers.
std::string attention_sections(nn::GPT& model, const std::vector<int64_t>& ids, const std::vector<std::string>& chars) {
  if (model.config().attention >= kFirstOwnMixer) return own_mixer_section(model, chars);
  std::string html;
  std::vector<std::vector<double>> mean_decays;
  const std::vector<Tensor> maps = interp::attention_maps(model, ids, &mean_decays);
  html += "<section id=\"attention\"><h2>Attention maps</h2>\n<p>Each head's A for the prompt (a linear-attention or "
          "ssd model's: the weights its output implies, Z = A V): row i is the "
          "query at position i, column j the key at position j; dark blue is weight 1 (ssd: the largest |A|), white 0, hatched grey "
          "what the mask hides (the future, and in a sparse model what its pattern leaves out).</p>\n";
  for (const std::string& svg : interp::layer_svgs(maps, chars, model.config())) html += "<div>" + svg + "</div>\n";
  if (!mean_decays.empty())
    html += "<p>How far each ssd head remembers: its decay a_t = exp(−exp(a_log)·Δ_t) averaged over the prompt; "
            "a state falls to 1/e of itself in −1/log ā positions.</p>\n" + interp::decay_table(mean_decays);
  html += "</section>\n";

  html += "<section id=\"rollout\"><h2>Attention rollout</h2>\n<p>Which earlier characters each position draws on "
          "through all the layers (Abnar &amp; Zuidema 2020); each row sums to 1.</p>\n" +
          interp::rollout_svg(interp::rollout_of(maps, model.config()), chars) + "</section>\n";
  return html;
}

// Integrated gradients of the prediction after the prompt, each character coloured by its attribution.
std::string attributions_section(const Inspected& in, const std::vector<int64_t>& ids, const std::vector<std::string>& chars,
                                 const ReportOptions& o) {
  std::string html;
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
  html += "</p>\n<p>" + interp::escape_xml(interp::explain_line(a)) + "</p></section>\n";
  return html;
}

// Head importance, and the val loss as heads are switched off.
std::string heads_sections(Inspected& in, const ReportOptions& o) {
  nn::GPT& model = *in.loaded.model;
  std::string html;
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
  return html;
}

}  // namespace

int run_report(const ReportOptions& o) {
  Inspected in = load(o.ckpt);
  const std::vector<int64_t> ids = encode_prompt(in, o.prompt);
  const std::vector<std::string> chars = characters(in, ids);
  nn::GPT& model = *in.loaded.model;

  // One section after another, in this order: each runs the model (the sample, the
  // attributions, the faithfulness and head measurements), so their order is kept.
  std::string html = page_head(in, o);
  html += configuration_section(in);
  html += loss_section(in);
  html += extrapolation_section(in, o);
  html += sample_section(in, ids, o);
  html += attention_sections(model, ids, chars);
  html += attributions_section(in, ids, chars, o);
  html += "<section id=\"faithfulness\"><h2>Is attention an explanation?</h2>\n";
  if (!interp::weights_are_distributions(model.config()))
    html += "<p>Not measured: this model's attention weights are signed and unnormalised, not a distribution over the keys, "
            "so rollout and flow, which route a distribution, are not defined for it.</p></section>\n";
  else
    html += faithfulness_section(o, in);

  if (model.config().attention >= kFirstOwnMixer)  // one mixer per layer, no heads to weigh or switch off
    html += "<section id=\"heads\"><h2>Head importance</h2>\n<p>None: --attention " +
            std::string(name_of(model.config().attention)) + " has no heads.</p></section>\n</body></html>\n";
  else
    html += heads_sections(in, o);
  replace_file(o.out, html);
  std::printf("%s\n", o.out.c_str());
  return 0;
}

}  // namespace ag::char_lm
