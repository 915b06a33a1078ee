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
#include <optional>
#include <stdexcept>
#include <string>
#include <string_view>
#include <utility>

#include <tp/callbacks/detail/plateau.hpp>

namespace tp {

class EarlyStopping {
 public:
  using goal = detail::plateau::goal;
  static constexpr goal minimize = goal::minimize, maximize = goal::maximize;

  EarlyStopping(std::string scalar, int patience, goal g = minimize, double min_delta = 0.0)
      : plateau_(std::move(scalar), g, min_delta), patience_(patience) {
    if (patience <= 0) throw std::invalid_argument("tp::EarlyStopping: patience must be > 0 epochs, got " + std::to_string(patience));
    if (min_delta < 0) throw std::invalid_argument("tp::EarlyStopping: min_delta must be >= 0, got " + std::to_string(min_delta));
  }

  template <class Trainer>
  void on_scalar(Trainer&, std::string_view name, double value) {
    plateau_.see(name, value);
  }

  template <class Trainer>
  void after_epoch(Trainer& trainer) {
    const auto stalled = plateau_.end_epoch(trainer.epoch_num());
    if (stalled && *stalled >= patience_) {
      stopped_at_epoch_ = trainer.epoch_num();
      trainer.request_stop();
    }
  }

  std::optional<double> best() const noexcept { return plateau_.best(); }
  int best_epoch() const noexcept { return plateau_.best_epoch(); }
  // The epoch at whose end it asked to stop, if it did.
  std::optional<int> stopped_at_epoch() const noexcept { return stopped_at_epoch_; }

  // Its state in checkpoints, under a key of its own (two of them resume each their own).
  std::string state_key() const { return "EarlyStopping(" + plateau_.scalar() + ")"; }
  template <class Trainer>
  void save_state(Trainer&, state_tree& out) const {
    plateau_.save(out);
  }
  template <class Trainer>
  void load_state(Trainer&, const state_tree& in) {
    plateau_.load(in);
  }

 private:
  detail::plateau plateau_;
  int patience_;
  std::optional<int> stopped_at_epoch_;
};

}  // namespace tp
