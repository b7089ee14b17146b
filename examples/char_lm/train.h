// char_lm's training loop (nanoGPT's shakespeare_char recipe): AdamW with
// warmup + cosine decay, gradient clipping, periodic evaluation, checkpoints
// and a CSV log.
#pragma once
#include <functional>
#include <string>
#include <vector>

#include "core/ops.h"
#include "nn/attention.h"

namespace ag::char_lm {

// Defaults are nanoGPT's documented CPU run of shakespeare_char.
struct TrainConfig {
  std::string data_path;  // resolved with resolve_data_path
  std::string out_dir = "out";
  Device device = Device::CPU;  // where the model, optimizer state and batches live
  bool resume = false;
  int64_t n_layer = 4, n_head = 4, n_embd = 128, block_size = 64, batch_size = 12;
  double dropout = 0.0;
  GeluApprox gelu = GeluApprox::Erf;
  nn::AttentionImpl attention = nn::AttentionImpl::Dense;
  int64_t max_iters = 2000, warmup_iters = 100, lr_decay_iters = 2000;
  double lr = 1e-3, min_lr = 1e-4, beta1 = 0.9, beta2 = 0.99, weight_decay = 0.1, grad_clip = 1.0;
  int64_t eval_interval = 250, eval_iters = 20, log_interval = 10;
  uint64_t seed = 1337;
  int64_t sample_tokens = 500;  // generated at the end (0: none)
  bool quiet = false;           // no progress lines (tests)
};

struct EvalRecord {
  int64_t iter;
  double train_loss, val_loss;
};

struct TrainResult {
  std::vector<double> batch_losses;  // the training loss of each iteration run, in order
  std::vector<EvalRecord> evals;
  double ms_per_iter = 0;  // median over the iterations run
  std::string sample;
};

TrainResult train(const TrainConfig& config);

}  // namespace ag::char_lm
