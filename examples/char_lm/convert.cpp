#include "examples/char_lm/convert.h"

#include <cstdio>
#include <filesystem>

#include "core/ops.h"
#include "core/safetensors.h"
#include "examples/char_lm/data.h"
#include "examples/common/checkpoint.h"
#include "optim/adam.h"

namespace ag::char_lm {

namespace {
// Parameters (and their Adam moments) whose last dim holds H_kv heads of d_h columns.
bool is_kv_projection(const std::string& name) {
  for (const char* suffix : {"attn.w_k.weight", "attn.w_k.bias", "attn.w_v.weight", "attn.w_v.bias"})
    if (name.ends_with(suffix)) return true;
  return false;
}

// [..., H_kv·d_h] → [..., G, H_kv / G, d_h] → mean over each group → [..., G·d_h].
Tensor mean_pool_heads(const Tensor& w, int64_t H_kv, int64_t G, int64_t d_h) {
  Shape grouped(w.shape().begin(), w.shape().end() - 1), pooled = grouped;
  grouped.insert(grouped.end(), {G, H_kv / G, d_h});
  pooled.push_back(G * d_h);
  return mean(w.reshape(grouped), static_cast<int64_t>(grouped.size()) - 2).reshape(pooled);
}
}  // namespace

ConvertResult convert_kv_heads(const ConvertOptions& o) {
  AG_CHECK(!o.out.empty(), "convert: --out is required (a new run directory)");
  check_output_directory("convert", o.out, OutputKind::Run, o.overwrite);
  const std::string unit = find_checkpoint(o.ckpt);
  SafetensorsFile weights = load_safetensors(model_path(unit));
  SafetensorsFile state = load_train_state(train_state_path(unit));

  // The run's options, all from its training state (none given here).
  TrainConfig c;
  read_run_options(c, state);
  c.quiet = true;
  const int64_t H_kv = c.model.kv_heads(), G = o.n_kv_head, d_h = c.model.n_embd / c.model.n_head;
  AG_CHECK(H_kv % G == 0, "convert: the checkpoint's " << H_kv << " kv heads do not split into --n-kv-head " << G
                                                        << " equal groups");

  LoadedModel source = load_model_to_run(model_path(unit));
  const Dataset data = make_dataset(read_text(c.run.data), c.model.block_size);
  const optim::ProcessGrid alone(dist::world(), 1);
  ConvertResult result{source.iter, evaluate(*source.model, data, c, source.iter, alone).val_loss, 0.0};

  for (NamedTensor& t : weights.tensors)
    if (is_kv_projection(t.name)) t.tensor = mean_pool_heads(t.tensor, H_kv, G, d_h);
  for (NamedTensor& t : state.tensors)
    if (t.name.starts_with("optim.exp_avg") && is_kv_projection(t.name))  // exp_avg and exp_avg_sq, not step
      t.tensor = mean_pool_heads(t.tensor, H_kv, G, d_h);
  c.model.vocab_size = source.model->config().vocab_size;  // from the text, not an option
  c.model.n_kv_head = G;

  Generator unused(0);  // every weight comes from the file
  nn::GPT model(c.model, unused);
  model.load_state(weights.tensors);
  model.set_activation_hook(source.model->activation_hook());  // the source's check of its forward
  optim::AdamW optimizer(optim::decay_groups(model.named_parameters(), c.optim.weight_decay),
                         {c.optim.lr, c.optim.beta1, c.optim.beta2, 1e-8});
  const TrainState train_state = restore_train_state(state, optimizer);
  result.val_loss_after = evaluate(model, data, c, result.iter, alone).val_loss;
  c.run.out = o.out;
  if (o.overwrite && std::filesystem::exists(o.out)) clear_run(o.out);
  save_checkpoint(o.out, result.iter, result.val_loss_after, model, source.tokenizer, train_state, c, optimizer,
                  c.run.keep_checkpoints);
  return result;
}

}  // namespace ag::char_lm
