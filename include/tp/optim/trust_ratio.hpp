#pragma once
// The layer-wise trust ratio that LARS and LAMB scale each parameter tensor's step by.
#include <torch/types.h>

namespace tp::optim::detail {

// ratio where both norms are > 0, 1 elsewhere; a 0-dim tensor, so no device sync.
inline torch::Tensor trust_ratio(const torch::Tensor& weight_norm, const torch::Tensor& other_norm, const torch::Tensor& ratio) {
  return torch::where((weight_norm > 0).logical_and(other_norm > 0), ratio, torch::ones_like(ratio));
}

}  // namespace tp::optim::detail
