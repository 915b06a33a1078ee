#pragma once
// NumericsWatch: stops training when a weight (or, optionally, a gradient) holds NaN or Inf, and
// says which and after which step (tensorpack's CheckNumerics, Keras's TerminateOnNaN), rather
// than training on garbage and checkpointing it.
//
//   tp::NumericsWatch()                               the weights, after every step
//   tp::NumericsWatch().every_steps(50).gradients(true)
//
// It throws tp::numerics_error from after_step: the run ends as on any exception (after_train
// runs; the on-stop checkpoint is not written, so the last checkpoint is the last good state).
// One check is one device sync for all the parameters; a bad one is then looked for by name.
#include <cstdint>
#include <stdexcept>
#include <string>
#include <vector>

#include <torch/types.h>

namespace tp {

struct numerics_error : std::runtime_error {
  using std::runtime_error::runtime_error;
};

class NumericsWatch {
 public:
  NumericsWatch& every_steps(std::int64_t n) {
    if (n < 1) throw std::invalid_argument("tp::NumericsWatch: every_steps must be >= 1, got " + std::to_string(n));
    every_steps_ = n;
    return *this;
  }
  NumericsWatch& gradients(bool on) {
    gradients_ = on;
    return *this;
  }

  template <class Trainer>
  void after_step(Trainer& trainer) {
    if (trainer.global_step() % every_steps_ != 0) return;
    torch::NoGradGuard no_grad;
    std::vector<torch::Tensor> finite;
    const auto parameters = trainer.model_module()->named_parameters();
    for (const auto& p : parameters) {
      finite.push_back(p.value().isfinite().all());
      if (gradients_ && p.value().grad().defined()) finite.push_back(p.value().grad().isfinite().all());
    }
    if (finite.empty() || torch::stack(finite).all().item<bool>()) return;
    for (const auto& p : parameters) {  // which: only once something is wrong
      const auto bad = [&](const torch::Tensor& t, const char* what) {
        if (t.isfinite().all().item<bool>()) return;
        throw numerics_error("tp::NumericsWatch: the " + std::string(what) + p.key() + " holds " + (t.isnan().any().item<bool>() ? "NaN" : "Inf") +
                             " after step " + std::to_string(trainer.global_step()) +
                             "; resume from the last checkpoint with a lower learning rate, gradient clipping or loss scaling");
      };
      bad(p.value(), "parameter ");
      if (gradients_ && p.value().grad().defined()) bad(p.value().grad(), "gradient of ");
    }
  }

 private:
  std::int64_t every_steps_ = 1;
  bool gradients_ = false;
};

}  // namespace tp
