#pragma once
// Warmup: raises a hyperparameter linearly from `from` to its target over the first `steps`
// global steps (the target is the value the hyperparameter has when training starts, or the
// one given). Step s (1-based) runs with from + (target - from) * s / steps; after warmup the
// value is left to the optimizer and the other setters.
//
//   tp::Warmup(tp::learning_rate(), /*steps=*/500, /*from=*/0.0)
#include <cstdint>
#include <optional>
#include <stdexcept>
#include <string>
#include <utility>

#include <tp/checkpoint/state_tree.hpp>
#include <tp/hyperparam.hpp>

namespace tp {

template <class Param>
class Warmup {
 public:
  Warmup(Param param, std::int64_t steps, double from, std::optional<double> target = std::nullopt)
      : param_(std::move(param)), steps_(steps), from_(from), target_(target) {
    if (steps <= 0) throw std::invalid_argument("tp::Warmup: the warmup of " + param_.name + " must last > 0 steps, got " + std::to_string(steps));
  }

  template <class Trainer>
  void before_train(Trainer& trainer) {
    if (!target_) target_ = param_.get(trainer);
  }
  template <class Trainer>
  void before_step(Trainer& trainer) {
    const auto step = trainer.global_step() + 1;
    if (step <= steps_) param_.set(trainer, from_ + (*target_ - from_) * static_cast<double>(step) / static_cast<double>(steps_));
  }

  // Its state in checkpoints, under a key of its own (two of them resume each their own).
  std::string state_key() const { return "Warmup(" + param_.name + ")"; }
  // For checkpoints.
  template <class Trainer>
  void save_state(Trainer& trainer, state_tree& out) {
    detail::save_hyperparam(param_, trainer, out);
    out.put("target", target_ ? c10::IValue(*target_) : c10::IValue());
  }
  template <class Trainer>
  void load_state(Trainer& trainer, const state_tree& in) {
    detail::load_hyperparam(param_, trainer, in);
    target_ = in.optional_real("target");
  }

 private:
  Param param_;
  std::int64_t steps_;
  double from_;
  std::optional<double> target_;
};

}  // namespace tp
