#pragma once
// ScheduledHyperParamSetter: sets a hyperparameter from a schedule of (epoch, value) points
// (or (global step, value) with schedule_unit::step), tensorpack's ScheduledHyperParamSetter.
// Piecewise constant by default (the value of the last point reached); with interpolation,
// linear between points. Before the first point the value is left alone; after the last it
// stays at the last. It is applied before every epoch (or step), so a resumed run gets the value
// its position calls for. The value is put as a scalar at every epoch's end.
//
//   tp::ScheduledHyperParamSetter(tp::learning_rate(), {{1, 1e-3}, {10, 1e-4}, {20, 1e-5}})
#include <cstdint>
#include <optional>
#include <stdexcept>
#include <string>
#include <utility>
#include <vector>

#include <tp/checkpoint/state_tree.hpp>
#include <tp/hyperparam.hpp>

namespace tp {

// What a schedule's points count: epochs (set before every epoch) or global steps (set before every
// step).
enum class schedule_unit { epoch, step };

template <class Param>
class ScheduledHyperParamSetter {
 public:
  ScheduledHyperParamSetter(Param param, std::vector<std::pair<std::int64_t, double>> points, bool interpolate = false,
                            schedule_unit unit = schedule_unit::epoch)
      : param_(std::move(param)), points_(std::move(points)), interpolate_(interpolate), unit_(unit) {
    if (points_.empty()) throw std::invalid_argument("tp::ScheduledHyperParamSetter: the schedule of " + param_.name + " is empty");
    for (std::size_t i = 1; i < points_.size(); ++i)
      if (points_[i].first <= points_[i - 1].first)
        throw std::invalid_argument("tp::ScheduledHyperParamSetter: the schedule of " + param_.name + " must be in increasing " +
                                    "order, but point " + std::to_string(i) + " (" + std::to_string(points_[i].first) +
                                    ") does not come after " + std::to_string(points_[i - 1].first));
  }

  // The value the schedule gives at x, or nothing before the first point.
  std::optional<double> value_at(std::int64_t x) const {
    if (x < points_.front().first) return std::nullopt;
    for (std::size_t i = points_.size(); i-- > 0;)
      if (points_[i].first <= x) {
        if (!interpolate_ || i + 1 == points_.size() || points_[i].first == x) return points_[i].second;
        const auto& [x0, y0] = points_[i];
        const auto& [x1, y1] = points_[i + 1];
        return y0 + (y1 - y0) * static_cast<double>(x - x0) / static_cast<double>(x1 - x0);
      }
    return std::nullopt;
  }

  template <class Trainer>
  void before_epoch(Trainer& trainer) {
    if (unit_ == schedule_unit::epoch) apply(trainer, trainer.epoch_num());
  }
  template <class Trainer>
  void before_step(Trainer& trainer) {
    if (unit_ == schedule_unit::step) apply(trainer, trainer.global_step() + 1);
  }
  template <class Trainer>
  void after_epoch(Trainer& trainer) {
    trainer.put_scalar(param_.name, param_.get(trainer));
  }

  // Its state in checkpoints, under a key of its own (two of them resume each their own).
  std::string state_key() const { return "ScheduledHyperParamSetter(" + param_.name + ")"; }
  template <class Trainer>
  void save_state(Trainer& trainer, state_tree& out) {
    detail::save_hyperparam(param_, trainer, out);
  }
  template <class Trainer>
  void load_state(Trainer& trainer, const state_tree& in) {
    detail::load_hyperparam(param_, trainer, in);
  }

 private:
  template <class Trainer>
  void apply(Trainer& trainer, std::int64_t x) {
    if (const auto value = value_at(x)) param_.set(trainer, *value);
  }

  Param param_;
  std::vector<std::pair<std::int64_t, double>> points_;
  bool interpolate_;
  schedule_unit unit_;
};

// HyperParamSetterWithFunc: value = f(epoch_num, current value) at every epoch's start.
//
//   tp::HyperParamSetterWithFunc(tp::learning_rate(), [](int epoch, double lr) { return lr * 0.9; })
template <class Param, class F>
class HyperParamSetterWithFunc {
 public:
  HyperParamSetterWithFunc(Param param, F f) : param_(std::move(param)), f_(std::move(f)) {}

  template <class Trainer>
  void before_epoch(Trainer& trainer) {
    param_.set(trainer, f_(trainer.epoch_num(), param_.get(trainer)));
  }
  template <class Trainer>
  void after_epoch(Trainer& trainer) {
    trainer.put_scalar(param_.name, param_.get(trainer));
  }

  // Its state in checkpoints, under a key of its own (two of them resume each their own).
  std::string state_key() const { return "HyperParamSetterWithFunc(" + param_.name + ")"; }
  template <class Trainer>
  void save_state(Trainer& trainer, state_tree& out) {
    detail::save_hyperparam(param_, trainer, out);
  }
  template <class Trainer>
  void load_state(Trainer& trainer, const state_tree& in) {
    detail::load_hyperparam(param_, trainer, in);
  }

 private:
  Param param_;
  F f_;
};

}  // namespace tp
