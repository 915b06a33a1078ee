#pragma once
// LossScaler: dynamic loss scaling for fp16-mixed precision, with the semantics of PyTorch's
// GradScaler. fp16 flushes gradients below 6e-8 to zero; the scaler multiplies the cost by S
// before backward so that they stay representable, divides the gradients by S before the
// update (and before gradient processing, so that clipping sees true norms), and:
//   - skips an update whose gradients hold inf or NaN, and multiplies S by backoff_factor;
//   - multiplies S by growth_factor after growth_interval updates in a row without inf/NaN
//     (unless that would make S infinite).
// global_step counts skipped updates too (as Lightning does with GradScaler).
//
// .precision(tp::precision::fp16_mixed) on a ModelDesc turns on a scaler with GradScaler's
// defaults; .loss_scaling(tp::LossScaler().init_scale(1024)) chooses its options, in any
// precision (in fp32 it only costs a multiply, which makes the whole path testable on a CPU).
// The distribution policies reduce the scaled fp32 gradients and unscale the reduced ones, so
// every tower and rank sees the same inf check and takes the same decision. Its state (S and
// the count of updates since the last change) is in checkpoints.
//
// In a step of one's own:
//   auto& scaler = *trainer.tower().loss_scaler();
//   scaler.scale_loss(cost).backward();
//   scaler.step(optimizer);             // unscale, step unless inf/NaN, update S
#include <cmath>
#include <functional>
#include <concepts>
#include <cstdint>
#include <stdexcept>
#include <string>
#include <vector>

#include <torch/optim/optimizer.h>
#include <torch/types.h>

#include <tp/compiled_part.hpp>

#include <tp/checkpoint/state_tree.hpp>
#include <tp/gradient_processing.hpp>

namespace tp {

class LossScaler {
 public:
  LossScaler& init_scale(double s) {
    if (!(s > 0) || !std::isfinite(s))
      throw std::invalid_argument("tp::LossScaler: init_scale must be a finite number > 0, got " + std::to_string(s));
    scale_ = s;
    return *this;
  }
  LossScaler& growth_factor(double f) {
    if (!(f > 1) || !std::isfinite(f)) throw std::invalid_argument("tp::LossScaler: growth_factor must be > 1, got " + std::to_string(f));
    growth_factor_ = f;
    return *this;
  }
  LossScaler& backoff_factor(double f) {
    if (!(f > 0 && f < 1)) throw std::invalid_argument("tp::LossScaler: backoff_factor must be in (0, 1), got " + std::to_string(f));
    backoff_factor_ = f;
    return *this;
  }
  LossScaler& growth_interval(std::int64_t n) {
    if (n < 1) throw std::invalid_argument("tp::LossScaler: growth_interval must be >= 1 update, got " + std::to_string(n));
    growth_interval_ = n;
    return *this;
  }

  double scale() const noexcept { return scale_; }
  // Updates without inf/NaN since S last changed.
  std::int64_t growth_tracker() const noexcept { return growth_tracker_; }
  // Updates skipped so far (not in checkpoints: it counts this run's).
  std::int64_t skipped() const noexcept { return skipped_; }

  torch::Tensor scale_loss(const torch::Tensor& cost) const { return cost * scale_; }

  // Divides the gradients by `used` (the scale their backward ran with), in place. Returns
  // whether every entry is finite. Undefined gradients are left alone. One device sync.
  static bool unscale(std::vector<torch::Tensor>& gradients, double used);
  bool unscale(std::vector<torch::Tensor>& gradients) const { return unscale(gradients, scale_); }

  // GradScaler.update: after each update (applied or skipped).
  void update(bool finite);

  // GradScaler.step then update, for a step of one's own: unscales the optimizer's gradients,
  // steps unless they hold inf/NaN, updates S. Returns whether it stepped.
  bool step(torch::optim::Optimizer& optimizer);

  // For checkpoints.
  void save(state_tree& out) const {
    out.put("scale", scale_);
    out.put("growth_tracker", growth_tracker_);
  }
  void load(const state_tree& in) {
    const double s = in.real("scale");
    const auto tracker = in.integer("growth_tracker");
    if (!(s > 0) || !std::isfinite(s) || tracker < 0)
      throw checkpoint_error("the checkpoint's loss scale (" + std::to_string(s) + ", after " + std::to_string(tracker) +
                             " updates) is not a valid state; the checkpoint is corrupt");
    scale_ = s;
    growth_tracker_ = tracker;
  }

 private:
  double scale_ = 65536.0;  // GradScaler's defaults
  double growth_factor_ = 2.0;
  double backoff_factor_ = 0.5;
  std::int64_t growth_interval_ = 2000;
  std::int64_t growth_tracker_ = 0;
  std::int64_t skipped_ = 0;
};

namespace detail {

// The tower policy's loss scaler, or nullptr when it has none.
template <class Tower>
LossScaler* loss_scaler_of(Tower& tower) {
  if constexpr (requires { { tower.loss_scaler() } -> std::convertible_to<LossScaler*>; }) return tower.loss_scaler();
  else return nullptr;
}

// The scale a backward runs with (1 without a scaler).
inline double loss_scale(const LossScaler* scaler) { return scaler ? scaler->scale() : 1.0; }

// What runs between the reduction and the update: unscaling (skipping an update with inf/NaN
// and adjusting the scale), then gradient processing. Returns whether to apply the update.
inline bool ready_for_update(LossScaler* scaler, double used_scale, const GradientProcessing& processing,
                             std::vector<torch::Tensor>& gradients, const std::vector<std::string>& names,
                             const std::function<double(double)>& across = {}) {
  if (scaler) {
    bool finite = LossScaler::unscale(gradients, used_scale);
    if (across) finite = across(finite ? 0.0 : 1.0) == 0.0;  // each rank saw a shard: finite only if all were
    scaler->update(finite);
    if (!finite) return false;
  }
  return processing.apply(gradients, names, across);
}

}  // namespace detail
}  // namespace tp

#if TP_DEFINE_COMPILED_PART
namespace tp {

TP_DECL bool LossScaler::unscale(std::vector<torch::Tensor>& gradients, double used) {
  torch::NoGradGuard no_grad;
  // GradScaler's reciprocal: computed in double, applied in the gradients' type.
  const double inverse = 1.0 / used;
  std::vector<torch::Tensor> finite;
  for (auto& g : gradients) {
    if (!g.defined()) continue;
    g.mul_(inverse);
    finite.push_back(torch::isfinite(g).all());
  }
  return finite.empty() || torch::stack(finite).all().item<bool>();
}

TP_DECL void LossScaler::update(bool finite) {
  if (!finite) {
    scale_ *= backoff_factor_;
    growth_tracker_ = 0;
    ++skipped_;
    return;
  }
  if (++growth_tracker_ == growth_interval_) {
    if (const double grown = scale_ * growth_factor_; std::isfinite(grown)) scale_ = grown;
    growth_tracker_ = 0;
  }
}

TP_DECL bool LossScaler::step(torch::optim::Optimizer& optimizer) {
  std::vector<torch::Tensor> gradients;
  for (auto& group : optimizer.param_groups())
    for (auto& p : group.params()) gradients.push_back(p.mutable_grad());
  const bool finite = unscale(gradients);
  if (finite) optimizer.step();
  update(finite);
  return finite;
}

}  // namespace tp
#endif
