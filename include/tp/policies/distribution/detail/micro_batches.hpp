#pragma once
// Gradient accumulation: one optimizer step over k micro-batches (docs/DESIGN.md, "Distribution
// policies and the update": a property of the update, so it is one of the UpdateOptions every
// distribution policy holds). Each micro-batch's
// cost is divided by k before its backward, so the accumulated gradient is the mean over the k
// micro-batches: for equal micro-batches of b examples and a mean loss, the gradient of one
// batch of k·b. global_step counts optimizer steps, as Lightning's does; a step is never cut
// between micro-batches, so a checkpoint (or a stop signal) never falls inside an accumulation.
#include <torch/types.h>

#include <tp/trainer/detail/phase_marker.hpp>

namespace tp::detail {

// Runs k micro-steps and the backward of each; micro_step(last) returns a micro-batch's cost
// (`last`: the final micro-batch, after whose backward the gradients are complete). Each
// backward runs on cost · loss_scale / k (see tp/loss_scaler.hpp; a power-of-two scale changes
// no bit of the unscaled gradients). Returns the step's cost, unscaled: the micro-batches' mean
// (detached when k > 1).
template <class MicroStep>
torch::Tensor over_micro_batches(int k, double loss_scale, MicroStep&& micro_step) {
  const auto backward = [&](const torch::Tensor& cost) {
    TP_PHASE("tp::tower_backward");
    auto scaled = loss_scale == 1.0 ? cost : cost * loss_scale;
    (k == 1 ? scaled : scaled / k).backward();
  };
  if (k == 1) {
    auto cost = micro_step(true);
    backward(cost);
    return cost;
  }
  torch::Tensor sum;
  for (int m = 0; m < k; ++m) {
    auto cost = micro_step(m + 1 == k);
    backward(cost);
    sum = m == 0 ? cost.detach() : sum + cost.detach();
  }
  return sum / k;
}

}  // namespace tp::detail
