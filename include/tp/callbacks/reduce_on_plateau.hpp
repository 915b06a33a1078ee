#pragma once
// ReduceOnPlateau: multiplies a hyperparameter by `factor` when a monitored scalar has not
// improved for `patience` epochs (tensorpack's StatMonitorParamSetter, Keras's
// ReduceLROnPlateau), never going below min_value. Epochs that did not put the scalar do not
// count; after a reduction the count starts again.
//
//   tp::ReduceOnPlateau(tp::learning_rate(), "val/error", /*patience=*/3, /*factor=*/0.1)
#include <algorithm>
#include <stdexcept>
#include <string>
#include <string_view>
#include <utility>

#include <tp/checkpoint/state_tree.hpp>
#include <tp/callbacks/detail/plateau.hpp>
#include <tp/hyperparam.hpp>

namespace tp {

template <class Param>
class ReduceOnPlateau {
 public:
  using goal = detail::plateau::goal;
  static constexpr goal minimize = goal::minimize, maximize = goal::maximize;

  ReduceOnPlateau(Param param, std::string scalar, int patience, double factor, goal g = minimize, double min_value = 0.0)
      : param_(std::move(param)), plateau_(std::move(scalar), g, 0.0), patience_(patience), factor_(factor), min_value_(min_value) {
    if (patience <= 0) throw std::invalid_argument("tp::ReduceOnPlateau: patience must be > 0 epochs, got " + std::to_string(patience));
    if (!(factor > 0 && factor < 1)) throw std::invalid_argument("tp::ReduceOnPlateau: factor must be in (0, 1), got " + std::to_string(factor));
  }

  template <class Trainer>
  void on_scalar(Trainer&, std::string_view name, double value) {
    plateau_.see(name, value);
  }
  template <class Trainer>
  void after_epoch(Trainer& trainer) {
    const auto stalled = plateau_.end_epoch(trainer.epoch_num());
    if (!stalled || *stalled < patience_) return;
    plateau_.restart_count();
    param_.set(trainer, std::max(min_value_, param_.get(trainer) * factor_));
  }

  // Its state in checkpoints, under a key of its own (two of them resume each their own).
  std::string state_key() const { return "ReduceOnPlateau(" + param_.name + ")"; }
  // For checkpoints.
  template <class Trainer>
  void save_state(Trainer& trainer, state_tree& out) {
    detail::save_hyperparam(param_, trainer, out);
    auto plateau = out.child("plateau");
    plateau_.save(plateau);
  }
  template <class Trainer>
  void load_state(Trainer& trainer, const state_tree& in) {
    detail::load_hyperparam(param_, trainer, in);
    plateau_.load(in.at("plateau"));
  }

 private:
  Param param_;
  detail::plateau plateau_;
  int patience_;
  double factor_;
  double min_value_;
};

}  // namespace tp
