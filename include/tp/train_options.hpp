#pragma once
// Loop options, in LibTorch's fluent style: TrainOptions().steps_per_epoch(100).max_epoch(5).
#include <cstdint>
#include <stdexcept>
#include <string>

#include <torch/arg.h>

namespace tp {

struct TrainOptions {
  // Steps in one epoch. An epoch is only the period at which epoch callbacks fire; it need not
  // be a pass over the data. Required.
  TORCH_ARG(std::int64_t, steps_per_epoch) = 0;
  // Epochs run are starting_epoch .. max_epoch, both included (tensorpack's convention).
  TORCH_ARG(int, starting_epoch) = 1;
  TORCH_ARG(int, max_epoch) = 1;

 public:
  // Throws std::invalid_argument saying what is wrong and how to set it right.
  void validate() const {
    if (steps_per_epoch_ <= 0)
      throw std::invalid_argument(
          "tp::TrainOptions: steps_per_epoch must be > 0, got " + std::to_string(steps_per_epoch_) +
          "; set it with TrainOptions().steps_per_epoch(n) (an epoch is the period at which "
          "epoch callbacks fire, it need not be a pass over the data)");
    if (starting_epoch_ < 1)
      throw std::invalid_argument("tp::TrainOptions: starting_epoch must be >= 1, got " +
                                  std::to_string(starting_epoch_) + " (epochs are numbered from 1)");
    if (max_epoch_ < starting_epoch_)
      throw std::invalid_argument(
          "tp::TrainOptions: max_epoch (" + std::to_string(max_epoch_) +
          ") is smaller than starting_epoch (" + std::to_string(starting_epoch_) +
          "); epochs run from starting_epoch to max_epoch inclusive, so max_epoch must be >= "
          "starting_epoch");
  }
};

}  // namespace tp
