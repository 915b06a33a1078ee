#pragma once
// GradientNorm: puts the global norm of the gradients (after the towers' reduction, before
// clipping) as scalars at every epoch's end: gradient_norm/mean and gradient_norm/max over the
// epoch's steps. The distribution policy's gradient processing must record it:
//
//   tp::SingleDevice().gradients(tp::GradientProcessing().record_norm().clip_global_norm(5))
//   ... tp::GradientNorm()
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <stdexcept>

namespace tp {

class GradientNorm {
 public:
  template <class Trainer>
  void before_train(Trainer& trainer) {
    if (!trainer.replicas().gradient_processing().records_norm())
      throw std::invalid_argument("tp::GradientNorm: the distribution policy does not record the gradient norm; give it "
                                  ".gradients(tp::GradientProcessing().record_norm())");
  }
  template <class Trainer>
  void before_epoch(Trainer&) {
    sum_ = 0;
    max_ = 0;
    count_ = 0;
  }
  template <class Trainer>
  void after_step(Trainer& trainer) {
    const double norm = trainer.replicas().gradient_processing().last_norm();
    if (std::isnan(norm)) return;  // no update yet
    sum_ += norm;
    max_ = std::max(max_, norm);
    ++count_;
  }
  template <class Trainer>
  void after_epoch(Trainer& trainer) {
    if (count_ == 0) return;
    trainer.put_scalar("gradient_norm/mean", sum_ / static_cast<double>(count_));
    trainer.put_scalar("gradient_norm/max", max_);
  }

 private:
  double sum_ = 0, max_ = 0;
  std::int64_t count_ = 0;
};

}  // namespace tp
