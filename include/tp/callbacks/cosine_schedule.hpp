#pragma once
// CosineSchedule: a hyperparameter (the learning rate, usually) that rises linearly over the
// first warmup_steps steps, then falls along half a cosine from `peak` to `floor` until step
// decay_steps, and stays at `floor` after it: the schedule of nanoGPT, GPT-2 and most language
// models since. Step s (the global step, from 0) runs with
//
//   s < warmup:          peak * (s + 1) / (warmup + 1)
//   s > decay_steps:     floor
//   otherwise:           floor + (peak - floor) * (1 + cos(pi * (s - warmup) / (decay_steps - warmup))) / 2
//
//   tp::CosineSchedule(tp::learning_rate(), /*peak=*/1e-3, /*floor=*/1e-4, /*warmup_steps=*/100,
//                      /*decay_steps=*/5000)
//
// It is set before every step from the global step alone, so a resumed run gets the value its
// position calls for, and there is nothing to checkpoint. The value is put as a scalar at
// every epoch's end.
#include <cmath>
#include <cstdint>
#include <numbers>
#include <stdexcept>
#include <string>
#include <utility>

#include <tp/hyperparam.hpp>

namespace tp {

template <class Param>
class CosineSchedule {
 public:
  CosineSchedule(Param param, double peak, double floor, std::int64_t warmup_steps, std::int64_t decay_steps)
      : param_(std::move(param)), peak_(peak), floor_(floor), warmup_(warmup_steps), decay_(decay_steps) {
    const std::string who = "tp::CosineSchedule(" + param_.name + "): ";
    if (!std::isfinite(peak) || !std::isfinite(floor) || floor > peak)
      throw std::invalid_argument(who + "floor (" + std::to_string(floor) + ") must be at most peak (" + std::to_string(peak) + "), both finite");
    if (warmup_steps < 0) throw std::invalid_argument(who + "warmup_steps must be >= 0, not " + std::to_string(warmup_steps));
    if (decay_steps <= warmup_steps)
      throw std::invalid_argument(who + "decay_steps (" + std::to_string(decay_steps) + ") must come after warmup_steps (" +
                                  std::to_string(warmup_steps) + ")");
  }

  // The value step s (from 0) runs with.
  double value_at(std::int64_t s) const {
    if (s < warmup_) return peak_ * static_cast<double>(s + 1) / static_cast<double>(warmup_ + 1);
    if (s > decay_) return floor_;
    const double progress = static_cast<double>(s - warmup_) / static_cast<double>(decay_ - warmup_);
    return floor_ + 0.5 * (1.0 + std::cos(std::numbers::pi * progress)) * (peak_ - floor_);
  }

  template <class Trainer>
  void before_step(Trainer& trainer) {
    param_.set(trainer, value_at(trainer.global_step()));
  }

  template <class Trainer>
  void after_epoch(Trainer& trainer) {
    trainer.put_scalar(param_.name, param_.get(trainer));
  }

 private:
  Param param_;
  double peak_, floor_;
  std::int64_t warmup_, decay_;
};

}  // namespace tp
