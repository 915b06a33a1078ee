#pragma once
// Async: every tower applies its own gradient to the shared weights as soon as it has it,
// without waiting for the others (tensorpack's AsyncMultiGPUTrainer). A tower starts its step
// from the shared weights as they are then, so its gradient may be a few updates stale; each
// gradient is scaled by 1/towers unless scale_gradient(false). Updates are applied one at a
// time under a lock, so none is lost; updates() counts them. A skipped update (inf/NaN with loss
// scaling, or GradientProcessing's skip) is not counted.
#include <cstddef>
#include <cstdint>
#include <mutex>
#include <optional>
#include <stdexcept>
#include <string>
#include <utility>
#include <vector>

#include <torch/types.h>

#include <tp/concepts/tower.hpp>
#include <tp/detail/run_tower.hpp>
#include <tp/detail/tower_set.hpp>
#include <tp/gradient_processing.hpp>
#include <tp/loss_scaler.hpp>
#include <tp/policies/comm/in_process.hpp>
#include <tp/policies/distribution/replicated.hpp>

namespace tp {

class Async {
 public:
  explicit Async(std::vector<torch::Device> towers) : devices_(detail::check_devices(std::move(towers), "Async")) {
    InProcess::check_devices(devices_);  // CPU towers: the shared weights live on the CPU
  }
  static Async cpu(int towers) {
    return Async(detail::cpu_devices(towers, "Async"));
  }
  Async& scale_gradient(bool scale) {
    scale_ = scale;
    return *this;
  }
  // Gradient accumulation: each tower accumulates k micro-batches before its update
  // (detail/micro_batches.hpp).
  Async& accumulate(int k) {
    micro_batches_ = detail::micro_batches(k, "Async");
    return *this;
  }
  Async& gradients(GradientProcessing processing) {
    processing_ = std::move(processing);
    return *this;
  }

  template <class Tower>
  class Replica {
   public:
    using model_type = model_t<Tower>;

    Replica(Tower& tower, const Async& options)
        : scale_(options.scale_),
          micro_batches_(options.micro_batches_),
          processing_(options.processing_),
          towers_(tower, options.devices_),
          shared_(tower.make_model()),
          scaler_(detail::loss_scaler_of(tower)) {
      detail::copy_state(shared_, towers_.model(0));
      optimizer_.emplace(tower.make_optimizer(shared_));
      shared_parameters_ = (*shared_).parameters();
      names_ = detail::parameter_names(shared_);
    }

    model_type& main_model() { return shared_; }
    const GradientProcessing& gradient_processing() const noexcept { return processing_; }
    auto& optimizer() { return *optimizer_; }
    template <class F>
    void for_each_optimizer(F&& f) {
      f(*optimizer_);
    }
    int towers() const noexcept { return towers_.size(); }
    // Updates applied to the shared weights so far.
    std::int64_t updates() const {
      std::lock_guard lock(mutex_);
      return updates_;
    }

    template <class Input>
    torch::Tensor run_step(Tower& tower, Input& input) {
      const auto batches = towers_.pull_micro_batches(input, micro_batches_);
      std::vector<torch::Tensor> costs(static_cast<std::size_t>(towers_.size()));
      const double scale = scale_ ? 1.0 / towers_.size() : 1.0;
      towers_.threads().run([&](int i) {
        auto& params = towers_.parameters(i);
        double loss_scale = 1.0;
        {
          std::lock_guard lock(mutex_);  // start from the shared weights (and loss scale) as they are now
          torch::NoGradGuard no_grad;
          for (std::size_t k = 0; k < params.size(); ++k) params[k].copy_(shared_parameters_[k]);
          loss_scale = detail::loss_scale(scaler_);
        }
        costs[static_cast<std::size_t>(i)] = towers_.forward_backward(tower, i, batches, loss_scale);
        std::vector<torch::Tensor> gradients;
        for (auto& p : params) gradients.push_back(p.grad().defined() ? p.grad().mul(scale) : torch::zeros_like(p));
        std::lock_guard lock(mutex_);  // one update at a time: none is lost
        if (!detail::ready_for_update(scaler_, loss_scale, processing_, gradients, names_)) return;
        for (std::size_t k = 0; k < params.size(); ++k) shared_parameters_[k].mutable_grad() = gradients[k].to(shared_parameters_[k].device());
        TP_PHASE("tp::optimizer_step");
        optimizer_->step();
        ++updates_;
      });
      return costs[0];
    }

   private:
    bool scale_;
    int micro_batches_;
    GradientProcessing processing_;
    detail::tower_set<Tower> towers_;
    model_type shared_;
    std::optional<optimizer_t<Tower>> optimizer_;
    std::vector<torch::Tensor> shared_parameters_;
    std::vector<std::string> names_;
    LossScaler* scaler_;  // the tower policy's (or none); read and updated under mutex_
    mutable std::mutex mutex_;
    std::int64_t updates_ = 0;
  };

  template <class Tower>
  Replica<Tower> build(Tower& tower) {
    return Replica<Tower>(tower, *this);
  }

 private:
  std::vector<torch::Device> devices_;
  bool scale_ = true;
  int micro_batches_ = 1;
  GradientProcessing processing_;
};

}  // namespace tp
