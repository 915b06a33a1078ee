#pragma once
// ReduceOnPlateau: multiplies a hyperparameter by `factor` when a monitored scalar has not
// improved for `patience` epochs (tensorpack's StatMonitorParamSetter, Keras's
// ReduceLROnPlateau), never going below min_value. Epochs that did not put the scalar do not
// count; after a reduction the count starts again.
//
//   tp::ReduceOnPlateau(tp::learning_rate(), "val/error", /*patience=*/3, /*factor=*/0.1)
#include <algorithm>
#include <cmath>
#include <optional>
#include <stdexcept>
#include <string>
#include <string_view>
#include <utility>

namespace tp {

template <class Param>
class ReduceOnPlateau {
 public:
  enum goal { minimize, maximize };

  ReduceOnPlateau(Param param, std::string scalar, int patience, double factor, goal g = minimize, double min_value = 0.0)
      : param_(std::move(param)), scalar_(std::move(scalar)), patience_(patience), factor_(factor), goal_(g), min_value_(min_value) {
    if (patience <= 0) throw std::invalid_argument("tp::ReduceOnPlateau: patience must be > 0 epochs, got " + std::to_string(patience));
    if (!(factor > 0 && factor < 1)) throw std::invalid_argument("tp::ReduceOnPlateau: factor must be in (0, 1), got " + std::to_string(factor));
  }

  template <class Trainer>
  void on_scalar(Trainer&, std::string_view name, double value) {
    if (name == scalar_) latest_ = value;
  }
  template <class Trainer>
  void after_epoch(Trainer& trainer) {
    if (!latest_) return;
    const double value = *std::exchange(latest_, std::nullopt);
    if (std::isfinite(value) && (!best_ || (goal_ == minimize ? value < *best_ : value > *best_))) {
      best_ = value;
      waited_ = 0;
      return;
    }
    if (++waited_ < patience_) return;
    waited_ = 0;
    param_.set(trainer, std::max(min_value_, param_.get(trainer) * factor_));
  }

 private:
  Param param_;
  std::string scalar_;
  int patience_;
  double factor_;
  goal goal_;
  double min_value_;
  std::optional<double> latest_, best_;
  int waited_ = 0;
};

}  // namespace tp
