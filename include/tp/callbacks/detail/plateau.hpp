#pragma once
// Whether a monitored scalar has stopped improving: what EarlyStopping and ReduceOnPlateau both
// watch. Epochs in which the scalar was not put do not count; a NaN or Inf never improves.
#include <cmath>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <utility>

#include <tp/checkpoint/state_tree.hpp>

namespace tp::detail {

class plateau {
 public:
  enum goal { minimize, maximize };

  plateau(std::string scalar, goal g, double min_delta) : scalar_(std::move(scalar)), goal_(g), min_delta_(min_delta) {}
  const std::string& scalar() const noexcept { return scalar_; }

  void see(std::string_view name, double value) {
    if (name == scalar_) latest_ = value;
  }

  // At an epoch's end: the number of epochs in a row without improvement so far (0 if this
  // epoch improved), or nothing if the scalar was not put this epoch.
  std::optional<int> end_epoch(int epoch) {
    if (!latest_) return std::nullopt;
    const double value = *std::exchange(latest_, std::nullopt);
    const bool improved =
        std::isfinite(value) && (!best_ || (goal_ == minimize ? value < *best_ - min_delta_ : value > *best_ + min_delta_));
    if (!improved) return ++stalled_;
    best_ = value;
    best_epoch_ = epoch;
    return stalled_ = 0;
  }
  void restart_count() noexcept { stalled_ = 0; }

  std::optional<double> best() const noexcept { return best_; }

  // For checkpoints: what a resumed run needs to judge the next epochs as this one would.
  // (best is None before the first value.)
  void save(state_tree& out) const {
    out.put("best", best_ ? c10::IValue(*best_) : c10::IValue());
    out.put("best_epoch", std::int64_t{best_epoch_});
    out.put("stalled", std::int64_t{stalled_});
  }
  void load(const state_tree& in) {
    best_ = in.optional_real("best");
    best_epoch_ = static_cast<int>(in.integer("best_epoch"));
    stalled_ = static_cast<int>(in.integer("stalled"));
    latest_.reset();
  }
  int best_epoch() const noexcept { return best_epoch_; }

 private:
  std::string scalar_;
  goal goal_;
  double min_delta_;
  std::optional<double> latest_, best_;
  int best_epoch_ = 0, stalled_ = 0;
};

}  // namespace tp::detail
