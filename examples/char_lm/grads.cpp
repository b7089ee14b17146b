#include "examples/char_lm/grads.h"

#include "core/safetensors.h"
#include "examples/common/checkpoint.h"

namespace ag::char_lm {

double compute_grads(const std::string& weights_path, const std::string& batch_path, const std::string& out_path,
                     Device device, const nn::GPTConfig& settings) {
  nn::GPTConfig no_dropout = settings;
  no_dropout.dropout = 0;  // train() below must compute the deterministic function
  LoadedModel loaded = load_model(weights_path, DType::Float64, no_dropout);
  nn::GPT& model = *loaded.model;
  model.to(device);
  const SafetensorsFile batch = load_safetensors(batch_path);
  const Tensor& idx = batch.at("idx");
  const Tensor& targets = batch.at("targets");
  AG_CHECK(idx.dim() == 2 && targets.shape() == idx.shape(),
           "grads: '" << batch_path << "': idx " << describe(idx) << " and targets " << describe(targets)
                      << " must both be [B, T]");

  int64_t scored = 0;
  for (int64_t t : targets.to_indices()) scored += t != -100;
  AG_CHECK(scored > 0, "grads: '" << batch_path << "': no target to score (the batch is empty or every target is -100)");
  model.train();  // dropout is 0: train and eval agree
  const Tensor loss = model.loss(idx.to(device), targets.to(device));
  loss.backward();

  std::vector<NamedTensor> out = {{"loss", loss.detach()}};
  for (const NamedTensor& p : model.named_parameters()) {
    AG_CHECK(p.tensor.grad().defined(), "grads: parameter '" << p.name << "' received no gradient");
    out.push_back({p.name, p.tensor.grad()});
  }
  save_safetensors(out_path, out);
  return loss.item();
}

}  // namespace ag::char_lm
