#pragma once
// What the replicas of every distribution policy hold alike: the update options they were built
// with, the tower policy's loss scaler, the gradients' names for messages, and the optimizers.
// A tower without an optimizer factory (a run with its own step) gets none: for_each_optimizer
// visits none, optimizer() does not exist, and the default step (run_step) requires a
// trainable_tower. The derived replicas add the models and the step.
#include <cstdint>
#include <deque>
#include <functional>
#include <string>
#include <type_traits>
#include <utility>
#include <variant>
#include <vector>

#include <torch/types.h>

#include <tp/concepts/tower.hpp>
#include <tp/gradient_processing.hpp>
#include <tp/loss_scaler.hpp>
#include <tp/update_options.hpp>

namespace tp::detail {

// The tower's optimizer type, or std::monostate for a tower without one.
template <class Tower, bool = has_optimizer_factory<Tower, model_t<Tower>>>
struct optimizer_or_none {
  using type = std::monostate;
};
template <class Tower>
struct optimizer_or_none<Tower, true> {
  using type = optimizer_t<Tower>;
};

// What every default step (run_step) requires: a tower function for the input's batches and an
// optimizer.
template <class Tower, class Input>
concept steps_on = trainable_tower<Tower, std::remove_cvref_t<decltype(std::declval<Input&>().next_batch())>>;

template <class Tower>
class replicas_base {
 public:
  using model_type = model_t<Tower>;
  static constexpr bool has_optimizer = has_optimizer_factory<Tower, model_type>;

  const GradientProcessing& gradient_processing() const noexcept { return update_.gradients(); }
  // The optimizer (the first, where each tower has its own).
  auto& optimizer()
    requires has_optimizer
  {
    return optimizers_.front();
  }
  // Batches the default step takes from the input: one per micro-batch (tower_replicas: per
  // tower too). What steps_per_epoch's default, one pass of the input, is counted in.
  int batches_per_step() const noexcept { return update_.accumulate(); }
  // The global step the next run_step is (the trainer says so before each): what keyed
  // randomness keys by.
  void at_step(std::int64_t global_step) noexcept { step_ = global_step; }
  // Calls f on every optimizer: what hyperparameter setters go through.
  template <class F>
  void for_each_optimizer(F&& f) {
    if constexpr (has_optimizer)
      for (auto& o : optimizers_) f(o);
  }

 protected:
  replicas_base(Tower& tower, const UpdateOptions& update) : update_(update), scaler_(loss_scaler_of(tower)) {}

  void add_optimizer([[maybe_unused]] Tower& tower, [[maybe_unused]] model_type& model) {
    if constexpr (has_optimizer) optimizers_.emplace_back(tower.make_optimizer(model));
  }
  int micro_batches() const noexcept { return update_.accumulate(); }

  // Unscales (with loss scaling) and processes the reduced gradients in place; false: skip
  // this update. `across` sums a number over the ranks when each holds a shard of the gradients.
  bool ready_for_update(std::vector<torch::Tensor>& gradients, double used_scale, const std::function<double(double)>& across = {}) {
    return detail::ready_for_update(scaler_, used_scale, update_.gradients(), gradients, across ? std::vector<std::string>{} : names_, across);
  }
  // The same on a model's .grad (zeros for a parameter the cost did not reach), where there is
  // anything to do.
  bool process_gradients(model_type& model, double used_scale) {
    if (!scaler_ && !update_.gradients().active()) return true;
    std::vector<torch::Tensor> gradients;
    for (auto& p : (*model).parameters()) {
      if (!p.grad().defined()) p.mutable_grad() = torch::zeros_like(p);
      gradients.push_back(p.grad());
    }
    return ready_for_update(gradients, used_scale);
  }

  UpdateOptions update_;
  std::int64_t step_ = 0;           // the global step under way (at_step)
  LossScaler* scaler_;              // the tower policy's (or none), which outlives the replicas
  std::vector<std::string> names_;  // the gradients' names, for messages
  // A deque: adding one moves none of the others (the references handed out stay good).
  std::deque<typename optimizer_or_none<Tower>::type> optimizers_;
};

}  // namespace tp::detail
