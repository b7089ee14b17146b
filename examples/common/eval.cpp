#include "examples/common/eval.h"

#include "examples/common/checkpoint.h"

namespace ag::char_lm {

EvalResult evaluate_checkpoint(const EvalOptions& o) {
  // Before any CUDA work, as train does: under mpirun each process takes its own GPU and joins
  // NCCL, which evaluate's all-reduce of the losses needs (alone: nothing to do).
  dist::world().use_device(o.device);
  const std::string unit = find_checkpoint(o.ckpt);
  TrainConfig c;  // the run's options, all from its training state (its data, batch size, eval batches)
  read_run_options(c, load_train_state(train_state_path(unit)));
  LoadedModel loaded = load_model_to_run(model_path(unit));
  loaded.model->to(o.device);
  const nn::GPTConfig& model = loaded.model->config();
  const int64_t T = o.block_size > 0 ? o.block_size : model.block_size;
  AG_CHECK(T <= model.block_size || !model.positions_end_at_block_size(),
           "eval: --block-size " << T << " passes the model's block_size " << model.block_size
                                 << ": learned positions end there (position = learned); rope, alibi and none extrapolate");
  if (o.eval_iters > 0) c.run.eval_iters = o.eval_iters;
  if (!o.data.empty()) c.run.data = o.data;
  c.run.device = o.device;
  const text::Dataset data = text::make_dataset(text::read_text(c.run.data), T);
  const optim::ProcessGrid data_parallel(dist::world(), 1);
  return {evaluate(*loaded.model, data, c, loaded.iter, data_parallel), data.eval_window, model.block_size,
          nn::describe(model)};
}

}  // namespace ag::char_lm
