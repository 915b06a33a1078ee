#pragma once
// EarlyStopping: ends training when a monitored scalar has stopped improving (Keras's
// EarlyStopping). An epoch in which the scalar was put and did not improve on the best value by
// more than min_delta counts against `patience`; after `patience` such epochs in a row, it
// requests a stop (the epoch still closes normally). Epochs in which the scalar was not put
// (validation every few epochs, say) do not count. A NaN never improves.
//
//   tp::EarlyStopping("val/error", /*patience=*/3)                      lower is better
//   tp::EarlyStopping("val/accuracy", 3, tp::EarlyStopping::maximize)
//
// It receives scalars, so it runs after the epoch's other callbacks have put theirs.
#include <cmath>
#include <optional>
#include <stdexcept>
#include <string>
#include <string_view>
#include <utility>

namespace tp {

class EarlyStopping {
 public:
  enum goal { minimize, maximize };

  EarlyStopping(std::string scalar, int patience, goal g = minimize, double min_delta = 0.0)
      : scalar_(std::move(scalar)), patience_(patience), goal_(g), min_delta_(min_delta) {
    if (patience <= 0) throw std::invalid_argument("tp::EarlyStopping: patience must be > 0 epochs, got " + std::to_string(patience));
    if (min_delta < 0) throw std::invalid_argument("tp::EarlyStopping: min_delta must be >= 0, got " + std::to_string(min_delta));
  }

  template <class Trainer>
  void on_scalar(Trainer&, std::string_view name, double value) {
    if (name == scalar_) latest_ = value;
  }

  template <class Trainer>
  void after_epoch(Trainer& trainer) {
    if (!latest_) return;
    const double value = *std::exchange(latest_, std::nullopt);
    const bool improved = std::isfinite(value) && (!best_ || (goal_ == minimize ? value < *best_ - min_delta_ : value > *best_ + min_delta_));
    if (improved) {
      best_ = value;
      best_epoch_ = trainer.epoch_num();
      epochs_without_improvement_ = 0;
      return;
    }
    if (++epochs_without_improvement_ >= patience_) {
      stopped_at_epoch_ = trainer.epoch_num();
      trainer.request_stop();
    }
  }

  std::optional<double> best() const noexcept { return best_; }
  int best_epoch() const noexcept { return best_epoch_; }
  // The epoch at whose end it asked to stop, if it did.
  std::optional<int> stopped_at_epoch() const noexcept { return stopped_at_epoch_; }

 private:
  std::string scalar_;
  int patience_;
  goal goal_;
  double min_delta_;
  std::optional<double> latest_, best_;
  int best_epoch_ = 0, epochs_without_improvement_ = 0;
  std::optional<int> stopped_at_epoch_;
};

}  // namespace tp
