#pragma once
// MovingAverage: an exponential moving average of a per-step quantity, put as a scalar at every
// epoch's end (tensorpack's MovingAverageSummary): a smoother curve than the last step's value.
// By default the quantity is the step's cost; any other is a function of the trainer returning
// a one-element tensor. The average stays on the quantity's device (no sync per step) and is
// part of the checkpoint. It starts from the first value (no bias toward zero).
//
//   tp::MovingAverage("cost", 0.95)                                     the step's cost
//   tp::MovingAverage("accuracy", 0.9, [](auto& t) { return t.model()->last_accuracy; })
#include <stdexcept>
#include <string>
#include <utility>

#include <torch/types.h>

#include <tp/checkpoint/state_tree.hpp>

namespace tp {

// MovingAverage's default quantity: the cost the last step returned (trainer.last_cost()).
struct last_cost_of_step {
  template <class Trainer>
  torch::Tensor operator()(Trainer& trainer) const {
    return trainer.last_cost();
  }
};

template <class Quantity = last_cost_of_step>
class MovingAverage {
 public:
  explicit MovingAverage(std::string name = "cost", double decay = 0.95, Quantity quantity = {})
      : name_(std::move(name)), decay_(decay), quantity_(std::move(quantity)) {
    if (!(decay >= 0 && decay < 1)) throw std::invalid_argument("tp::MovingAverage: decay must be in [0, 1), got " + std::to_string(decay));
  }

  template <class Trainer>
  void after_step(Trainer& trainer) {
    const torch::Tensor value = quantity_(trainer);
    if (!value.defined()) return;  // a step that returns no cost
    if (value.numel() != 1)
      throw std::invalid_argument("tp::MovingAverage: '" + name_ + "' must be one number per step, got shape " + c10::str(value.sizes()));
    torch::NoGradGuard no_grad;
    const auto current = value.detach().to(torch::kDouble).reshape({});
    if (!average_.defined()) {
      average_ = current.clone();
      return;
    }
    if (average_.device() != current.device()) average_ = average_.to(current.device());  // loaded on the CPU
    average_.mul_(decay_).add_(current, 1.0 - decay_);
  }
  template <class Trainer>
  void after_epoch(Trainer& trainer) {
    if (!average_.defined()) return;
    if (trainer.process_count() == 1) trainer.put_scalar(name_, average_);  // no device sync without a monitor
    else trainer.put_scalar(name_, trainer.mean_across_processes(average_.template item<double>()));
  }

  // Its state in checkpoints, under a key of its own (two of them resume each their own).
  std::string state_key() const { return "MovingAverage(" + name_ + ")"; }
  template <class Trainer>
  void save_state(Trainer&, state_tree& out) const {
    out.put("average", average_.defined() ? c10::IValue(average_) : c10::IValue());  // None before the first step
  }
  template <class Trainer>
  void load_state(Trainer&, const state_tree& in) {
    average_ = in.value("average").isNone() ? torch::Tensor() : in.tensor("average").clone();
  }

  // The current average (undefined before the first step).
  const torch::Tensor& average() const noexcept { return average_; }

 private:
  std::string name_;
  double decay_;
  Quantity quantity_;
  torch::Tensor average_;
};

MovingAverage()->MovingAverage<last_cost_of_step>;  // without a quantity, the average is of the step's cost
MovingAverage(std::string)->MovingAverage<last_cost_of_step>;  // the same, put under another name
MovingAverage(std::string, double)->MovingAverage<last_cost_of_step>;  // the same, with another decay

}  // namespace tp
