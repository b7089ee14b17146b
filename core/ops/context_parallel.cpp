// gather_chunks (core/ops.h): every chunk's value of a sequence split over a
// context-parallel group, on every process of it.
#include "core/context_parallel.h"
#include "core/ops/common.h"
#include "dist/communicator.h"

namespace ag {

// all = Σ_p slots_p(own_p), every process's two rows at its chunks' slots, the rest zeros. Each
// process's loss terms read `all`, so ∂L/∂own_p[h] = Σ_q ∂L_q/∂all[chunk_of_p(h)]: the same
// all-reduce on the gradients, then this process's two slots.
Tensor gather_chunks(const Tensor& own, dist::Communicator& group) {
  AG_CHECK(own.dim() >= 1 && own.size(0) == 2,
           "gather_chunks: " << describe(own) << " is not [2, ...] (a value for each of this process's two chunks)");
  const ZigzagSplit chunks(2 * group.size(), group.size(), group.rank());  // chunks of one position: their indices
  const int64_t n = own.numel() / 2;
  Shape slots = own.shape();
  slots[0] = 2 * chunks.P;
  Tensor all = Tensor::zeros(slots, own.dtype(), own.device());
  {
    NoGradGuard no_grad;
    const Tensor values = own.detach();
    for (int64_t h = 0; h < 2; ++h) {
      Tensor slot = all.view(chunks.chunk_of(h) * n, {n});
      kernel::cast(values.view(h * n, {n}), slot);
    }
  }
  group.all_reduce_sum(all);
  dist::Communicator* members = &group;
  return record("gather_chunks", {own}, all, [members, chunks](const Tensor& dAll) -> Gradients {
    const Tensor summed = dAll.clone();
    members->all_reduce_sum(summed);
    const auto slot = [&](int64_t h) { return slice(summed, 0, chunks.chunk_of(h), chunks.chunk_of(h) + 1); };
    return {concat({slot(0), slot(1)}, 0)};
  });
}

}  // namespace ag
