// The pictures and tables of a model's attention that char_lm's inspect
// commands and its report draw (examples/char_lm/inspect.cpp, heads.cpp,
// report.cpp): per layer each head's A, rollout and flow through the layers,
// the q·k decomposition, an ssd model's decays, the faithfulness charts. SVG
// and HTML text, from what analysis.h and faithfulness.h measure.
#pragma once
#include <string>
#include <vector>

#include "core/tensor.h"
#include "examples/interp/analysis.h"
#include "examples/interp/faithfulness.h"
#include "nn/gpt.h"

namespace ag::interp {

// One colour per line of a chart, in a fixed order (the methods keep their colour in every chart).
extern const std::vector<std::string> kPalette;

// False for weights that are not a distribution over the keys (ssd's: signed, unnormalised),
// which are drawn as magnitudes |A|, and rolled out with each row of |A| scaled to sum 1.
bool weights_are_distributions(const nn::GPTConfig& config);
// Per layer, an SVG of each head's A (maps: per layer [H, T, T]), labels the prompt's characters.
std::vector<std::string> layer_svgs(const std::vector<Tensor>& maps, const std::vector<std::string>& labels,
                                    const nn::GPTConfig& config);
// The maps as distributions over the keys, for rollout and flow.
std::vector<Tensor> routable(const std::vector<Tensor>& maps, const nn::GPTConfig& config);
Tensor rollout_of(const std::vector<Tensor>& maps, const nn::GPTConfig& config);  // [T, T]
// An s4 model's weights over positions, which no input changes (nn/s4.h): per layer, its
// strongest channels' convolutions as matrices A_ij = K_{i−j} over the prompt (`labels`, as
// |A|, in the attention maps' style; the skip D·u is named, not drawn: it would outshine K), then the same channels' K_ℓ against the lag ℓ over the
// whole context (block_size). Two SVGs per layer.
std::vector<std::string> s4_kernel_svgs(nn::GPT& model, const std::vector<std::string>& labels);
// An ssd model's mean decays (per layer and head) as an HTML table.
std::string decay_table(const std::vector<std::vector<double>>& mean_decays);
// R [T, T] (rollout or flow) as an SVG.
std::string through_layers_svg(const Tensor& R, const std::vector<std::string>& labels, const std::string& title,
                               const std::string& id);
std::string rollout_svg(const Tensor& rollout, const std::vector<std::string>& labels);
// Per layer, an SVG of each head's norm part and angle part.
std::vector<std::string> decomposition_svgs(const std::vector<ScoreParts>& parts, const std::vector<std::string>& labels);
// Integrated gradients' completeness check, one line.
std::string explain_line(const Attribution& a);
// The faithfulness measurement's charts and table.
std::string spearman_svg(const Faithfulness& f);
std::string deletion_svg(const Faithfulness& f);
std::string faithfulness_table_html(const Faithfulness& f);

}  // namespace ag::interp
