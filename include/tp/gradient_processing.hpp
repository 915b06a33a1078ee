#pragma once
// What happens to the gradients after the towers' reduction and before the update: NaN/Inf
// handling and clipping by global norm. Run on the reduced gradients, once, so that the result
// does not depend on the number of towers (N towers with batch b give the update of one tower
// with batch N x b).
//
//   tp::SingleDevice().gradients(tp::GradientProcessing().clip_global_norm(1.0)
//                                                        .on_non_finite(tp::non_finite::skip))
#include <atomic>
#include <cmath>
#include <limits>
#include <cstdint>
#include <functional>
#include <optional>
#include <stdexcept>
#include <string>
#include <vector>

#include <torch/types.h>

#include <tp/compiled_part.hpp>

namespace tp {

// What GradientProcessing does when a reduced gradient holds NaN or Inf.
enum class non_finite {
  ignore,  // apply the update as it is (the default: no check, no cost)
  zero,    // set the NaN and Inf entries to zero, apply the rest
  skip,    // skip the whole update (every tower)
  stop     // throw tp::non_finite_gradient, naming the parameter
};

struct non_finite_gradient : std::runtime_error {
  using std::runtime_error::runtime_error;
};

class GradientProcessing {
 public:
  GradientProcessing() = default;
  GradientProcessing(const GradientProcessing& other)
      : max_norm_(other.max_norm_), policy_(other.policy_), record_norm_(other.record_norm_), last_norm_(other.last_norm_.load()) {}
  GradientProcessing& operator=(const GradientProcessing& other) {
    max_norm_ = other.max_norm_;
    policy_ = other.policy_;
    record_norm_ = other.record_norm_;
    last_norm_ = other.last_norm_.load();
    return *this;
  }

  // Rescales the gradients so that their global L2 norm is at most max_norm (> 0). Alone (no
  // recorded norm, no NaN policy, gradients not sharded across processes) it never makes the
  // host wait for a device: the norm and the factor stay where the gradients are, as in
  // torch.nn.utils.clip_grad_norm_. The others need the norm on the host, once per update.
  GradientProcessing& clip_global_norm(double max_norm) {
    if (!(max_norm > 0))
      throw std::invalid_argument("tp::GradientProcessing: clip_global_norm must be > 0, got " + std::to_string(max_norm));
    max_norm_ = max_norm;
    return *this;
  }
  GradientProcessing& on_non_finite(non_finite policy) {
    policy_ = policy;
    return *this;
  }
  // Keeps the global norm of each update's gradients (before clipping) for last_norm(), which
  // tp::GradientNorm puts as scalars. It costs a device sync per step.
  GradientProcessing& record_norm(bool on = true) {
    record_norm_ = on;
    return *this;
  }
  bool records_norm() const noexcept { return record_norm_; }
  // The global norm of the last update's gradients (NaN before the first, or if not recorded).
  double last_norm() const noexcept { return last_norm_.load(std::memory_order_relaxed); }

  bool active() const noexcept { return max_norm_.has_value() || policy_ != non_finite::ignore || record_norm_; }

  // Processes the gradients in place (each a tensor, possibly a flat bucket of many, each
  // named for messages). Returns false if the update must be skipped. Where each rank holds a
  // shard of the gradients, `across` sums a number over the ranks: the norm is the whole one,
  // and every rank decides alike.
  bool apply(std::vector<torch::Tensor>& gradients, const std::vector<std::string>& names = {},
             const std::function<double(double)>& across = {}) const;

 private:
  static torch::Tensor squares_on_device(const std::vector<torch::Tensor>& gradients);
  static double sum_of_squares(const std::vector<torch::Tensor>& gradients, const std::function<double(double)>& across);
  bool clip(std::vector<torch::Tensor>& gradients, double norm) const;
  void clip_on_device(std::vector<torch::Tensor>& gradients) const;

  std::optional<double> max_norm_;
  non_finite policy_ = non_finite::ignore;
  bool record_norm_ = false;
  // Atomic: Async's towers process their gradients on their own threads.
  mutable std::atomic<double> last_norm_{std::numeric_limits<double>::quiet_NaN()};
};

}  // namespace tp

#if TP_DEFINE_COMPILED_PART
namespace tp {

TP_DECL bool GradientProcessing::apply(std::vector<torch::Tensor>& gradients, const std::vector<std::string>& names,
                                       const std::function<double(double)>& across) const {
  if (!active() || (gradients.empty() && !across)) return true;
  torch::NoGradGuard no_grad;
  if (!record_norm_ && policy_ == non_finite::ignore && !across) {
    clip_on_device(gradients);
    return true;
  }
  const double norm = std::sqrt(sum_of_squares(gradients, across));
  if (record_norm_) last_norm_.store(norm, std::memory_order_relaxed);
  if (!std::isfinite(norm) && policy_ != non_finite::ignore) {
    if (policy_ == non_finite::skip) return false;
    if (policy_ == non_finite::stop) {
      std::string where = "a gradient";
      for (std::size_t i = 0; i < gradients.size(); ++i)
        if (!torch::isfinite(gradients[i]).all().item<bool>()) {
          where = i < names.size() ? "the gradient of " + names[i] : "gradient " + std::to_string(i);
          break;
        }
      throw non_finite_gradient("tp: " + where + " holds NaN or Inf after the towers' reduction; lower the learning "
                                "rate, clip the gradients, or choose on_non_finite(zero or skip)");
    }
    for (auto& g : gradients) g.nan_to_num_(0.0, 0.0, 0.0);
    return clip(gradients, std::sqrt(sum_of_squares(gradients, across)));
  }
  return clip(gradients, norm);
}

// The sum of the squares of every gradient, in double, on the gradients' device.
TP_DECL torch::Tensor GradientProcessing::squares_on_device(const std::vector<torch::Tensor>& gradients) {
  std::vector<torch::Tensor> squares;
  squares.reserve(gradients.size());
  for (const auto& g : gradients) squares.push_back(g.pow(2).sum().to(torch::kDouble));
  return torch::stack(squares).sum();
}

TP_DECL double GradientProcessing::sum_of_squares(const std::vector<torch::Tensor>& gradients, const std::function<double(double)>& across) {
  const double mine = gradients.empty() ? 0.0 : squares_on_device(gradients).item<double>();
  return across ? across(mine) : mine;
}

// clip() without reading the norm: the same factor in double (1 where the norm is within
// max_norm or not finite), applied in the gradients' type, so the same values as clip().
TP_DECL void GradientProcessing::clip_on_device(std::vector<torch::Tensor>& gradients) const {
  if (!max_norm_ || gradients.empty()) return;
  const auto norm = squares_on_device(gradients).sqrt();
  const auto factor = torch::where(norm.isfinite().logical_and(norm > *max_norm_), *max_norm_ / (norm + 1e-6), torch::ones_like(norm));
  for (auto& g : gradients) g.mul_(factor.to(g.scalar_type()));
}

TP_DECL bool GradientProcessing::clip(std::vector<torch::Tensor>& gradients, double norm) const {
  if (max_norm_ && std::isfinite(norm) && norm > *max_norm_) {
    const double scale = *max_norm_ / (norm + 1e-6);
    for (auto& g : gradients) g.mul_(scale);
  }
  return true;
}

}  // namespace tp
#endif
