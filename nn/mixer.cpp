#include "nn/mixer.h"

namespace ag::nn {

bool Mixer::keeps_own_init(std::string_view) const { return false; }

void Mixer::set_context(dist::Communicator* group) {
  AG_CHECK(group == nullptr, kind_ << ": it reads each sequence whole, in order from its first position: it takes no "
                                      "context parallelism");
}

void Mixer::set_head_gates(const Tensor& gates) {
  AG_CHECK(!gates.defined(), kind_ << ": it has no heads to switch off (head_mask)");
}

}  // namespace ag::nn
