#pragma once
// ParamHistograms: the distribution of every parameter of the main model, and of its gradient,
// put as histograms (tensorpack's add_param_summary): `param/<name>` and `grad/<name>`, which
// TensorBoardWriter draws in TensorBoard's Histograms and Distributions tabs.
//
//   tp::ParamHistograms()                       every parameter and gradient, each epoch
//   tp::ParamHistograms().every_steps(500)      every 500 steps instead
//   tp::ParamHistograms().only("conv").gradients(false)   parameters whose name holds "conv"
//
// A gradient is the last step's (the one the update used), where the parameter has one.
// Chief-only: the models are the same in every process.
#include <cstdint>
#include <stdexcept>
#include <string>

namespace tp {

class ParamHistograms {
 public:
  static constexpr bool chief_only = true;

  ParamHistograms& every_steps(std::int64_t n) {
    if (n < 0) throw std::invalid_argument("tp::ParamHistograms: every_steps must be >= 0 (0: each epoch), got " + std::to_string(n));
    every_steps_ = n;
    return *this;
  }
  ParamHistograms& only(std::string part_of_name) {
    only_ = std::move(part_of_name);
    return *this;
  }
  ParamHistograms& gradients(bool on) {
    gradients_ = on;
    return *this;
  }

  template <class Trainer>
  void before_train(Trainer& trainer) {
    if (trainer.parameters_are_sharded())
      throw std::invalid_argument("tp::ParamHistograms: this run shards the parameters (tp::sharding::parameters), so the chief holds "
                                  "only its rows of them between steps; draw the histograms in a run that shards the gradients at most");
  }
  template <class Trainer>
  void after_step(Trainer& trainer) {
    if (every_steps_ > 0 && trainer.global_step() % every_steps_ == 0) put(trainer);
  }
  template <class Trainer>
  void after_epoch(Trainer& trainer) {
    if (every_steps_ == 0) put(trainer);
  }

 private:
  template <class Trainer>
  void put(Trainer& trainer) {
    for (const auto& p : trainer.model_module()->named_parameters()) {
      if (!only_.empty() && p.key().find(only_) == std::string::npos) continue;
      trainer.put_histogram("param/" + p.key(), p.value());
      if (gradients_ && p.value().grad().defined()) trainer.put_histogram("grad/" + p.key(), p.value().grad());
    }
  }

  std::int64_t every_steps_ = 0;
  std::string only_;
  bool gradients_ = true;
};

}  // namespace tp
