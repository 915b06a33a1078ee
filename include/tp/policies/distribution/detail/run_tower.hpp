#pragma once
// Runs a tower function and checks what it returned, so that a mistake in user code is
// reported in terms of towers and batches, not as a LibTorch stack trace.
#include <sstream>
#include <stdexcept>
#include <string>
#include <vector>

#include <c10/util/Exception.h>
#include <torch/types.h>

#include <tp/batch.hpp>
#include <tp/compiled_part.hpp>
#include <tp/trainer/detail/phase_marker.hpp>
#include <tp/precision.hpp>
#include <tp/tower_context.hpp>

namespace tp::detail {

// A model's parameter names, in parameters() order, for messages.
template <class Model>
std::vector<std::string> parameter_names(Model& model) {
  std::vector<std::string> names;
  for (const auto& item : (*model).named_parameters()) names.push_back(item.key());
  return names;
}

// The input's next batch, on `device`: the time this takes is the step's input wait.
template <class Input>
auto next_batch_on(Input& input, torch::Device device) {
  TP_PHASE("tp::input_wait");
  return to_device(input.next_batch(), device);
}

// "tower 0 (cpu)", for messages.
TP_DECL std::string tower_name(const TowerContext& ctx);

// The cost of one tower on one batch; throws std::runtime_error naming the tower, the batch's
// shapes and LibTorch's own message when the tower function fails (typically: a batch whose
// shape does not fit the model) or returns something that is not a differentiable scalar.
template <class Tower, class Model, class Batch>
torch::Tensor run_tower(Tower& tower, const TowerContext& ctx, Model& model, const Batch& batch) {
  TP_PHASE("tp::tower_forward");
  torch::Tensor cost;
  try {
    if constexpr (requires { tower.precision(); }) {
      // The forward pass in the tower's precision; backward runs after the scope, as autocast wants.
      const autocast_scope autocast(tower.precision(), ctx.device.type());
      cost = tower.cost(ctx, model, batch);
    } else {
      cost = tower.cost(ctx, model, batch);
    }
  } catch (const c10::Error& e) {
    throw std::runtime_error(tower_name(ctx) + ": the tower function failed on a batch of shape " +
                             describe_shapes(batch) +
                             "; check that the batch fits the model. LibTorch said: " +
                             e.what_without_backtrace());
  }
  if (!cost.defined())
    throw std::runtime_error(tower_name(ctx) + ": the tower function returned an undefined tensor "
                                               "as its cost");
  if (cost.dim() != 0) {
    std::ostringstream shape;
    shape << cost.sizes();
    throw std::runtime_error(tower_name(ctx) + ": the cost must be a scalar (a 0-dim tensor), "
                             "but the tower function returned a tensor of shape " + shape.str() +
                             "; reduce it with .mean() or .sum()");
  }
  if (ctx.is_training && !cost.requires_grad())
    throw std::runtime_error(tower_name(ctx) + ": the cost does not require grad, so no gradient "
                             "can flow to the model; the tower function must not detach it or "
                             "compute it under torch::NoGradGuard");
  return cost;
}

}  // namespace tp::detail

#if TP_DEFINE_COMPILED_PART
namespace tp::detail {
TP_DECL std::string tower_name(const TowerContext& ctx) { return "tower " + std::to_string(ctx.index) + " (" + ctx.device.str() + ")"; }
}  // namespace tp::detail
#endif
