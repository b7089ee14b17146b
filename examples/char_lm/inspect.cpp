#include "examples/char_lm/inspect.h"

#include <chrono>
#include <cmath>
#include <cstdio>
#include <filesystem>

#include "core/error.h"
#include "examples/char_lm/inspect_model.h"
#include "examples/common/files.h"
#include "examples/common/program_header.h"
#include "examples/interp/analysis.h"
#include "examples/interp/pictures.h"
#include "examples/interp/svg.h"

namespace ag::char_lm {

namespace {
namespace fs = std::filesystem;
}  // namespace

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
interp::Attribution explain(const Inspected& in, const std::vector<int64_t>& ids, int64_t position, int64_t steps) {
  const int64_t T = static_cast<int64_t>(ids.size());
  AG_CHECK(position >= -1 && position < T, "--position " << position << " is outside the prompt's [0, " << T << ")");
  return interp::integrated_gradients(*in.loaded.model, ids, position < 0 ? T - 1 : position, steps);
}

int run_attention(const AttentionOptions& o) {
  check_output_directory("attention", o.out, OutputKind::Files, o.overwrite);
  Inspected in = load(o.ckpt);
  const std::vector<int64_t> ids = encode_prompt(in, o.prompt);
  std::vector<std::vector<double>> mean_decays;
  const std::vector<Tensor> maps = interp::attention_maps(*in.loaded.model, ids, &mean_decays);
  const std::vector<std::string> labels = characters(in, ids);
  fs::create_directories(o.out);
  const std::vector<std::string> svgs = interp::layer_svgs(maps, labels, in.loaded.model->config());
  for (size_t l = 0; l < svgs.size(); ++l) {
    const std::string path = o.out + "/layer-" + std::to_string(l) + ".svg";
    replace_file(path, svgs[l]);
    std::printf("%s\n", path.c_str());
  }
  replace_file(o.out + "/rollout.svg", interp::rollout_svg(interp::rollout_of(maps, in.loaded.model->config()), labels));
  std::printf("%s/rollout.svg\n", o.out.c_str());
  const auto start = std::chrono::steady_clock::now();
  const Tensor flow = interp::attention_flow(interp::routable(maps, in.loaded.model->config()), in.loaded.model->config().head_gates());
  const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  replace_file(o.out + "/flow.svg", interp::through_layers_svg(flow, labels,
                                                      "attention flow: the max-flow from each query to each key through the "
                                                      "layers' ½(mean of heads' A) + ½I",
                                                      "flow"));
  const int64_t T = static_cast<int64_t>(ids.size());
  std::printf("%s/flow.svg (%lld max-flows over %zu layers of %lld positions in %.3f s)\n", o.out.c_str(),
              static_cast<long long>(T * T), maps.size(), static_cast<long long>(T), seconds);
  if (o.decompose) {
    const std::vector<interp::ScoreParts> parts = interp::score_decomposition(*in.loaded.model, ids);
    const std::vector<std::string> decomposed = interp::decomposition_svgs(parts, labels);
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
  std::printf("%s\n", interp::explain_line(a).c_str());
  return 0;
}

}  // namespace ag::char_lm
