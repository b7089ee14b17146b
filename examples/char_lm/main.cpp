// char_lm: a character-level GPT on tiny Shakespeare (or any text).
//
//   char_lm train  [--data PATH] [--out DIR] [--resume] [...]   train, checkpoint, print a sample
//   char_lm sample --ckpt DIR [--prompt TEXT] [--tokens N] ...    generate from a checkpoint
//   char_lm grads  --weights W --batch B --out G                  one float64 forward/backward,
//                                                                 gradients to a safetensors file
//   char_lm eval   --ckpt DIR [--block-size T]                   train and val loss at length T (extrapolation)
//   char_lm info   [--ckpt DIR]                                  a checkpoint's model, options and history
//   char_lm mask   --block-size 32 --attn-window 8 [...]          print a sparse pattern's mask
//   char_lm convert --ckpt IN --n-kv-head G --out OUT             multi-head to grouped-query attention
//                                                                 (then train --resume --out OUT)
//   char_lm attention | explain | heads | faithfulness | report --ckpt DIR ...   look inside a trained model
//                                                                 (examples/char_lm/inspect.h)
//   char_lm compare RUN RUN ... [--out compare.svg]               the runs' validation losses on one chart
// Each command takes --help. Every option comes from a table (core/options.h):
// the model's (nn/gpt_options.h), the training step's (optim/train_options.h)
// and each command's own (examples/char_lm/*_options.h).
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <functional>
#include <string>
#include <utility>
#include <vector>

#include "core/error.h"
#include "dist/communicator.h"
#include "examples/common/checkpoint.h"
#include "examples/char_lm/compare.h"
#include "examples/char_lm/convert.h"
#include "examples/common/eval.h"
#include "examples/char_lm/grads.h"
#include "examples/char_lm/info.h"
#include "examples/char_lm/inspect.h"
#include "examples/char_lm/mask.h"
#include "examples/common/sample.h"
#include "examples/common/train.h"
#include "examples/common/command_line.h"
#include "examples/common/program_header.h"

using namespace ag;
using namespace ag::char_lm;

namespace {
int run_train(const cli::Command& command, TrainConfig config) {
  config.given = command.given_names();
  require_device(config.run.device);
  const TrainResult r = train(config);
  const dist::Communicator& comm = dist::world();
  if (comm.rank() != 0) return 0;  // rank 0 speaks for the run
  std::printf("done: %zu iterations, median %.2f ms/iter", r.batch_losses.size(), r.ms_per_iter);
  if (comm.size() > 1) std::printf(" (%.2f ms of it in collectives)", r.collective_ms_per_iter);
  if (!r.evals.empty()) std::printf(", final val loss %.4f", r.evals.back().val_loss);
  std::printf("\n");
  return 0;
}

// sample --tree: the candidates' log-probabilities, likeliest first, from one token-tree forward.
int run_tree(nn::GPT& model, const text::Tokenizer& tokenizer, const SampleOptions& o) {
  const auto start = std::chrono::steady_clock::now();
  TreeScores scores = score_continuations(model, tokenizer, o.prompt, split_candidates(o.tree));
  const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  std::stable_sort(scores.candidates.begin(), scores.candidates.end(),
                   [](const ScoredContinuation& a, const ScoredContinuation& b) { return a.log_prob > b.log_prob; });
  std::printf("log p(candidate | prompt)  per character  candidate\n");
  for (const ScoredContinuation& c : scores.candidates)
    std::printf("%24.4f  %13.4f  %s\n", c.log_prob, c.log_prob / static_cast<double>(c.characters), c.text.c_str());
  std::fprintf(stderr, "%zu candidates as a tree of %lld nodes, scored in one forward in %.3f s\n",
               scores.candidates.size(), static_cast<long long>(scores.nodes), seconds);
  return 0;
}

int run_sample(const SampleOptions& o, const nn::GPTConfig& settings) {
  require_device(o.device);
  const std::string unit = find_checkpoint(o.ckpt);
  std::fprintf(stderr, "sampling from %s\n", unit.c_str());
  LoadedModel loaded = load_model_to_run(model_path(unit), settings);
  loaded.model->to(o.device);
  AG_CHECK(loaded.tokenizer.vocab_size() > 0, "sample: the checkpoint has no tokenizer characters");
  std::fprintf(stderr, "%s\n", cli::header(loaded.model->config(), o.device).c_str());
  if (!o.tree.empty()) return run_tree(*loaded.model, loaded.tokenizer, o);
  const auto start = std::chrono::steady_clock::now();
  const std::string text = generate(*loaded.model, loaded.tokenizer, o.prompt, o);
  const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  std::printf("%s\n", text.c_str());
  const char* how =
      o.no_kv_cache ? "recomputing the context" : attention_function_traits(loaded.model->config().attention).cache_holds;
  // Fewer than --tokens where a model's context ends (--max-context).
  const size_t prompt_tokens = o.prompt.empty() ? 0 : loaded.tokenizer.encode(o.prompt).size();
  const auto generated = static_cast<long long>(loaded.tokenizer.encode(text).size() - prompt_tokens);
  std::fprintf(stderr, "%lld tokens in %.3f s: %.1f tokens/s (%s)\n", generated, seconds,
               static_cast<double>(generated) / seconds, how);
  return 0;
}

int run_grads(const GradsOptions& o, const nn::GPTConfig& settings) {
  AG_CHECK(!o.weights.empty() && !o.batch.empty() && !o.out.empty(),
           "grads: --weights, --batch and --out are required (see --help)");
  require_device(o.device);
  const double loss = compute_grads(o.weights, o.batch, o.out, o.device, settings);
  std::printf("loss %.17g; gradients written to %s\n", loss, o.out.c_str());
  return 0;
}

int run_eval(const EvalOptions& o) {
  require_device(o.device);
  const EvalResult r = evaluate_checkpoint(o);
  std::printf("%s\niteration %lld at T = %lld (trained at %lld): train loss %.4f, val loss %.4f\n", r.description.c_str(),
              static_cast<long long>(r.losses.iter), static_cast<long long>(r.block_size),
              static_cast<long long>(r.trained_block_size), r.losses.train_loss, r.losses.val_loss);
  return 0;
}

int run_convert(const ConvertOptions& o) {
  const ConvertResult r = convert_kv_heads(o);
  std::printf("iteration %lld: val loss %.4f with the source's kv heads, %.4f with %lld (mean-pooled); "
              "continue with: char_lm train --resume --out %s --max-iters N\n",
              static_cast<long long>(r.iter), r.val_loss_before, r.val_loss_after, static_cast<long long>(o.n_kv_head),
              o.out.c_str());
  return 0;
}

// One subcommand: its command line, bound to the options it takes, and what
// runs it once they are applied.
struct Subcommand {
  cli::Command* command;
  std::function<int(const cli::Command&)> run;
};
// Every command's options: they live as long as main, since the commands bind
// them and their runs read them once the command line is applied.
struct AllOptions {
  TrainConfig train_config;
  SampleOptions sample_options;
  nn::GPTConfig sample_settings;
  GradsOptions grads_options;
  nn::GPTConfig grads_settings;
  EvalOptions eval_options;
  ConvertOptions convert_options;
  MaskOptions mask_options;
  nn::GPTConfig mask_config;
  InfoOptions info_options;
  AttentionOptions attention_options;
  ExplainOptions explain_options;
  HeadsOptions heads_options;
  FaithfulnessOptions faithfulness_options;
  ReportOptions report_options;
  CompareOptions compare_options;
};

// The subcommands in the order --help lists them, each bound to its options;
// a name that is none of them is an error naming them all (cli::Program::parse).
class Subcommands {
 public:
  explicit Subcommands(cli::Program& program) : program_(program) {}
  cli::Command& add(const char* name, const char* help, std::function<int(const cli::Command&)> run) {
    list.push_back({&program_.add_subcommand(name, help), std::move(run)});
    return *list.back().command;
  }
  std::vector<Subcommand> list;

 private:
  cli::Program& program_;
};

// train, sample, grads, eval, convert, mask and info: the commands that train or run a model.
void add_model_commands(Subcommands& subcommands, AllOptions* o, cli::ProcessOptions& process) {
  subcommands.add("train", "train a character-level GPT, checkpointing to --out (defaults: nanoGPT's shakespeare_char CPU run)",
      [o](const cli::Command& command) { return run_train(command, o->train_config); })
      .bind(o->train_config.model).bind(o->train_config.optim).bind(o->train_config.run).bind(process).allow_config_file();

  subcommands.add("sample", "generate text from a checkpoint",
      [o](const cli::Command&) { return run_sample(o->sample_options, o->sample_settings); })
      .bind(o->sample_options).bind(o->sample_settings, {OptionKind::Setting}).bind(process);

  subcommands.add("grads", "float64 loss and gradients of a model on a batch, for comparison with other frameworks",
      [o](const cli::Command&) { return run_grads(o->grads_options, o->grads_settings); })
      .bind(o->grads_options).bind(o->grads_settings, {OptionKind::Setting}).bind(process);

  subcommands.add("eval", "a checkpoint's train and val loss at a sequence length (--block-size; longer than training: extrapolation)",
      [o](const cli::Command&) { return run_eval(o->eval_options); })
      .bind(o->eval_options).bind(process);

  subcommands.add("convert", "a checkpoint to fewer key/value heads (grouped-query attention), mean-pooling each group's W_K, W_V",
      [o](const cli::Command&) { return run_convert(o->convert_options); })
      .bind(o->convert_options).bind(process);

  o->mask_config.vocab_size = 1;  // the mask does not depend on it
  subcommands.add("mask", "print the attention mask of a sparse pattern (--attn-window ...)",
      [o](const cli::Command&) { return std::printf("%s", mask_picture(o->mask_config, o->mask_options).c_str()) < 0; })
      .bind(o->mask_options).bind_only(o->mask_config, kMaskModelOptions);

  subcommands.add("info", "what a checkpoint holds: the model, the run's options, its checkpoints and best val loss",
      [o](const cli::Command&) { return std::printf("%s", checkpoint_info(o->info_options).c_str()) < 0; })
      .bind(o->info_options).bind(process);
}

// Commands that look inside a model or its runs (examples/char_lm/inspect.h, compare.h).
void add_inspect_commands(Subcommands& subcommands, AllOptions* o, cli::ProcessOptions& process) {
  subcommands.add("attention", "attention maps of a prompt: one SVG per layer (a heatmap of A per head), the rollout and the flow; --decompose: q·k as norm × angle",
      [o](const cli::Command&) { return run_attention(o->attention_options); })
      .bind(o->attention_options).bind(process);

  subcommands.add("explain", "integrated gradients: each prompt character's share of the predicted next character's logit",
      [o](const cli::Command&) { return run_explain(o->explain_options); })
      .bind(o->explain_options).bind(process);

  subcommands.add("heads", "head importance (mean |dL/dg_h| on validation batches); --prune K writes a model without the K least important; --curve: val loss as heads go",
      [o](const cli::Command&) { return run_heads(o->heads_options); })
      .bind(o->heads_options).bind(process);

  subcommands.add("faithfulness", "is attention an explanation? each explanation's rank correlation with erasure, and deletion curves",
      [o](const cli::Command&) { return run_faithfulness(o->faithfulness_options); })
      .bind(o->faithfulness_options).bind(process);

  subcommands.add("report", "one self-contained HTML page: config, loss curves, a sample, attention maps, rollout, attributions, faithfulness, heads",
      [o](const cli::Command&) { return run_report(o->report_options); })
      .bind(o->report_options).bind(process);

  subcommands.add("compare", "the validation loss of several runs on one SVG chart, each named by the options it differs in",
      [o](const cli::Command&) { return run_compare(o->compare_options); })
      .bind(o->compare_options).bind(process)
      .option("runs", o->compare_options.runs, "run directories (of char_lm train), two or more");
}
}  // namespace

int main(int argc, char** argv) {
  cli::Program program("A character-level GPT: train it, sample from it, compare its gradients with other frameworks.",
                       "char_lm");
  program.require_subcommand(1);
  cli::ProcessOptions process;
  AllOptions options;
  Subcommands subcommands(program);
  add_model_commands(subcommands, &options, process);
  add_inspect_commands(subcommands, &options, process);

  if (const int code = program.parse(argc, argv); code >= 0) return code;
  try {
    for (const Subcommand& subcommand : subcommands.list) {
      if (!subcommand.command->parsed()) continue;
      subcommand.command->apply();
      process.apply();
      return subcommand.run(*subcommand.command);
    }
    return 2;  // not reached: program.parse accepts exactly one of the subcommands (require_subcommand)
  } catch (const std::exception& e) {  // ag::Error, and I/O errors from the standard library
    std::fprintf(stderr, "char_lm%s: %s\n", dist::process_label().c_str(), e.what());
    std::fflush(stderr);
    dist::end_run_on_error(1);  // the other processes of a data-parallel run would wait for this one forever
    return 1;
  }
}
