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
// One check is one device sync for all the parameters; a bad one is then looked for by name. In
// a parameter-sharded run each rank checks its rows of the units, and the ranks agree (one
// scalar all-reduce per check).
#include <cstdint>
#include <stdexcept>
#include <string>
#include <utility>
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
    // What this process holds: the parameters, but of a parameter-sharded run's units only its
    // rows (the units are empty between steps), whose verdict the processes then agree on.
    std::vector<std::pair<std::string, torch::Tensor>> held;
    for (const auto& p : trainer.model_module()->named_parameters()) {
      held.emplace_back("parameter " + p.key(), p.value());
      if (gradients_ && p.value().grad().defined()) held.emplace_back("gradient of " + p.key(), p.value().grad());
    }
    const bool sharded = trainer.parameters_are_sharded();
    if constexpr (requires { trainer.replicas().parameter_rows(); })
      if (sharded)
        for (const auto& item : trainer.replicas().parameter_rows()) {
          const auto piece = c10::IValue(item).toGenericDict();
          held.emplace_back("parameter " + piece.at("name").toStringRef() + " (this rank's row of it)", piece.at("value").toTensor());
        }
    std::vector<torch::Tensor> finite;
    for (const auto& entry : held) finite.push_back(entry.second.isfinite().all());
    const bool fine = finite.empty() || torch::stack(finite).all().item<bool>();
    if (sharded) {
      std::vector<double> bad{fine ? 0.0 : 1.0};
      trainer.sum_across_processes(bad);
      if (bad[0] == 0) return;
      if (fine)
        throw numerics_error("tp::NumericsWatch: another rank's row of a sharded parameter holds NaN or Inf after step " +
                             std::to_string(trainer.global_step()) + " (its own message names it); " + advice);
    }
    if (fine) return;
    for (const auto& entry : held) {  // which: only once something is wrong
      const torch::Tensor& t = entry.second;
      if (!t.isfinite().all().item<bool>())
        throw numerics_error("tp::NumericsWatch: the " + entry.first + " holds " + (t.isnan().any().item<bool>() ? "NaN" : "Inf") +
                             " after step " + std::to_string(trainer.global_step()) + "; " + advice);
    }
  }

 private:
  static constexpr const char* advice = "resume from the last checkpoint with a lower learning rate, gradient clipping or loss scaling";
  std::int64_t every_steps_ = 1;
  bool gradients_ = false;
};

}  // namespace tp
