// char_lm: a character-level GPT on tiny Shakespeare (or any text).
//
//   char_lm train  [--data PATH] [--out DIR] [--resume] [...]   train, checkpoint, print a sample
//   char_lm sample --ckpt DIR [--prompt TEXT] [--tokens N] ...    generate from a checkpoint
//   char_lm grads  --weights W --batch B --out G                  one float64 forward/backward,
//                                                                 gradients to a safetensors file
// Each subcommand takes --help.
#include <cstdio>
#include <cstring>
#include <string>

#include "core/error.h"
#include "core/safetensors.h"
#include "core/threads.h"
#include "cuda/context.h"
#include "examples/char_lm/checkpoint.h"
#include "examples/char_lm/grads.h"
#include "examples/char_lm/options.h"
#include "examples/char_lm/sample.h"
#include "examples/char_lm/train.h"

using namespace ag;
using namespace ag::char_lm;

namespace {
GeluApprox parse_gelu(const std::string& s) {
  AG_CHECK(s == "erf" || s == "tanh", "--gelu: '" << s << "' is not erf or tanh");
  return s == "erf" ? GeluApprox::Erf : GeluApprox::Tanh;
}

nn::AttentionImpl parse_attention(const std::string& s) {
  AG_CHECK(s == "fused" || s == "composed", "--attention: '" << s << "' is not fused or composed");
  return s == "fused" ? nn::AttentionImpl::Dense : nn::AttentionImpl::Composed;
}

void apply_threads(const cli::Options& o) {
  if (o.integer("threads") > 0) set_num_threads(static_cast<int>(o.integer("threads")));
}

Device parse_device(const std::string& s) {
  AG_CHECK(s == "cpu" || s == "cuda", "--device: '" << s << "' is not cpu or cuda");
  AG_CHECK(s == "cpu" || cuda::available(), "--device cuda: " << cuda::describe_device());
  return s == "cpu" ? Device::CPU : Device::CUDA;
}

int run_train(int argc, char** argv) {
  TrainConfig d;  // the defaults
  cli::Options o("char_lm train [options]", "Trains a character-level GPT (defaults: nanoGPT's shakespeare_char CPU run).");
  o.add("data", "", "training text (default: $ATTOGRAD_DATA, then data/tinyshakespeare.txt)")
      .add("out", d.out_dir, "checkpoint and log directory")
      .flag("resume", "continue the run saved in --out")
      .add("n-layer", std::to_string(d.n_layer), "transformer blocks")
      .add("n-head", std::to_string(d.n_head), "attention heads")
      .add("n-embd", std::to_string(d.n_embd), "embedding width C")
      .add("block-size", std::to_string(d.block_size), "context length T")
      .add("batch-size", std::to_string(d.batch_size), "sequences per batch B")
      .add("dropout", "0", "dropout probability")
      .add("gelu", "erf", "GELU: erf (exact) or tanh")
      .add("attention", "fused", "attention: fused or composed")
      .add("max-iters", std::to_string(d.max_iters), "training iterations")
      .add("lr", "1e-3", "peak learning rate")
      .add("min-lr", "1e-4", "final learning rate")
      .add("warmup-iters", std::to_string(d.warmup_iters), "linear warmup iterations")
      .add("lr-decay-iters", std::to_string(d.lr_decay_iters), "cosine decay ends here")
      .add("beta1", "0.9", "AdamW beta1")
      .add("beta2", "0.99", "AdamW beta2")
      .add("weight-decay", "0.1", "AdamW decoupled weight decay (matrices only)")
      .add("grad-clip", "1.0", "clip the global gradient norm to this")
      .add("eval-interval", std::to_string(d.eval_interval), "evaluate and checkpoint every N iterations")
      .add("eval-iters", std::to_string(d.eval_iters), "batches per evaluation")
      .add("log-interval", std::to_string(d.log_interval), "progress line every N iterations")
      .add("seed", std::to_string(d.seed), "random seed")
      .add("sample-tokens", std::to_string(d.sample_tokens), "characters to generate at the end")
      .add("device", "cpu", "cpu or cuda")
      .add("threads", "0", "CPU threads (0: all cores)");
  if (!o.parse(argc, argv, 2)) return 0;
  if (o.on("resume")) {
    // A resumed run keeps its options: those not given again come from the checkpoint.
    for (const auto& [option, value] : load_safetensors(train_state_path(o.str("out"))).metadata)
      o.set_default(option, value);
  }
  apply_threads(o);
  TrainConfig c;
  c.data_path = o.str("data");
  c.out_dir = o.str("out");
  c.device = parse_device(o.str("device"));
  c.resume = o.on("resume");
  c.n_layer = o.integer("n-layer");
  c.n_head = o.integer("n-head");
  c.n_embd = o.integer("n-embd");
  c.block_size = o.integer("block-size");
  c.batch_size = o.integer("batch-size");
  c.dropout = o.real("dropout");
  c.gelu = parse_gelu(o.str("gelu"));
  c.attention = parse_attention(o.str("attention"));
  c.max_iters = o.integer("max-iters");
  c.lr = o.real("lr");
  c.min_lr = o.real("min-lr");
  c.warmup_iters = o.integer("warmup-iters");
  c.lr_decay_iters = o.integer("lr-decay-iters");
  c.beta1 = o.real("beta1");
  c.beta2 = o.real("beta2");
  c.weight_decay = o.real("weight-decay");
  c.grad_clip = o.real("grad-clip");
  c.eval_interval = o.integer("eval-interval");
  c.eval_iters = o.integer("eval-iters");
  c.log_interval = o.integer("log-interval");
  c.seed = static_cast<uint64_t>(o.integer("seed"));
  c.sample_tokens = o.integer("sample-tokens");
  const TrainResult r = train(c);
  std::printf("done: %zu iterations, median %.1f ms/iter", r.batch_losses.size(), r.ms_per_iter);
  if (!r.evals.empty()) std::printf(", final val loss %.4f", r.evals.back().val_loss);
  std::printf("\n");
  return 0;
}

int run_sample(int argc, char** argv) {
  cli::Options o("char_lm sample --ckpt DIR [options]", "Generates text from a char_lm checkpoint.");
  o.add("ckpt", "out", "checkpoint directory (holding model.safetensors)")
      .add("prompt", "", "text to continue (default: start of a line)")
      .add("tokens", "500", "characters to generate")
      .add("temperature", "0.8", "softmax temperature")
      .add("top-k", "200", "sample among the k likeliest (0: all)")
      .add("seed", "1337", "random seed")
      .add("device", "cpu", "cpu or cuda")
      .add("threads", "0", "CPU threads (0: all cores)");
  if (!o.parse(argc, argv, 2)) return 0;
  apply_threads(o);
  LoadedModel loaded = load_model(model_path(o.str("ckpt")));
  loaded.model->to(parse_device(o.str("device")));
  AG_CHECK(loaded.tokenizer.vocab_size() > 0, "sample: the checkpoint has no tokenizer characters");
  const SampleOptions options{o.integer("tokens"), o.real("temperature"), o.integer("top-k"),
                              static_cast<uint64_t>(o.integer("seed"))};
  std::printf("%s\n", generate(*loaded.model, loaded.tokenizer, o.str("prompt"), options).c_str());
  return 0;
}

int run_grads(int argc, char** argv) {
  cli::Options o("char_lm grads --weights W.safetensors --batch B.safetensors --out G.safetensors",
                 "One forward and backward in float64; writes `loss` (F64) and every parameter's gradient (F32).");
  o.add("weights", "", "model weights with config in __metadata__")
      .add("batch", "", "tensors idx and targets, int64 or int32 [B, T]")
      .add("out", "", "where to write the gradients")
      .add("device", "cpu", "cpu or cuda")
      .add("threads", "0", "CPU threads (0: all cores)");
  if (!o.parse(argc, argv, 2)) return 0;
  AG_CHECK(!o.str("weights").empty() && !o.str("batch").empty() && !o.str("out").empty(),
           "grads: --weights, --batch and --out are required\n" << o.usage());
  apply_threads(o);
  const double loss = compute_grads(o.str("weights"), o.str("batch"), o.str("out"), parse_device(o.str("device")));
  std::printf("loss %.17g; gradients written to %s\n", loss, o.str("out").c_str());
  return 0;
}
}  // namespace

int main(int argc, char** argv) {
  const char* usage =
      "usage: char_lm {train|sample|grads} [options]   (each takes --help)\n"
      "  train   train a character-level GPT, checkpointing to --out\n"
      "  sample  generate text from a checkpoint\n"
      "  grads   float64 loss and gradients of a model on a batch, for comparison with other frameworks\n";
  if (argc < 2 || !std::strcmp(argv[1], "--help") || !std::strcmp(argv[1], "-h")) {
    std::fputs(usage, stdout);
    return argc < 2 ? 2 : 0;
  }
  try {
    const std::string command = argv[1];
    if (command == "train") return run_train(argc, argv);
    if (command == "sample") return run_sample(argc, argv);
    if (command == "grads") return run_grads(argc, argv);
    std::fprintf(stderr, "char_lm: unknown command '%s'\n%s", argv[1], usage);
    return 2;
  } catch (const std::exception& e) {  // ag::Error, and I/O errors from the standard library
    std::fprintf(stderr, "char_lm: %s\n", e.what());
    return 1;
  }
}
