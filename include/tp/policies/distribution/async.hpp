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
#include <utility>
#include <vector>

#include <torch/types.h>

#include <tp/concepts/tower.hpp>
#include <tp/policies/distribution/policy_base.hpp>
#include <tp/policies/distribution/detail/run_tower.hpp>
#include <tp/policies/distribution/tower_replicas.hpp>
#include <tp/loss_scaler.hpp>
#include <tp/policies/comm/in_process.hpp>

namespace tp {

class Async : public detail::policy_base<Async> {
 public:
  static constexpr const char* policy_name = "Async";

  explicit Async(std::vector<torch::Device> towers) : devices_(detail::check_devices(std::move(towers), policy_name)) {
    InProcess::check_devices(devices_);  // CPU towers: the shared weights live on the CPU
  }
  static Async cpu(int towers) {
    return Async(detail::cpu_devices(towers, policy_name));
  }
  Async& scale_gradient(bool scale) {
    scale_ = scale;
    return *this;
  }

  // The towers' models, the shared model and its optimizer (none for a tower without one), and
  // the default step.
  template <class Tower>
  class Replicas : public detail::shared_model_replicas<Tower> {
   public:
    Replicas(Tower& tower, const Async& options)
        : detail::shared_model_replicas<Tower>(tower, options.devices_, options.update()), scale_(options.scale_) {
      this->names_ = detail::parameter_names(this->shared_);
    }

    // Updates applied to the shared weights so far.
    std::int64_t updates() const {
      std::lock_guard lock(mutex_);
      return updates_;
    }

    template <class Input>
      requires detail::steps_on<Tower, Input>
    torch::Tensor run_step(Tower& tower, Input& input) {
      auto& towers = this->towers_;
      auto& shared_parameters = this->shared_parameters_;
      const auto batches = towers.pull_micro_batches(input, this->micro_batches());
      std::vector<torch::Tensor> costs(static_cast<std::size_t>(towers.size()));
      const double scale = scale_ ? 1.0 / towers.size() : 1.0;
      towers.threads().run([&](int i) {
        auto& params = towers.parameters(i);
        double loss_scale = 1.0;
        {
          std::lock_guard lock(mutex_);  // start from the shared weights (and loss scale) as they are now
          torch::NoGradGuard no_grad;
          for (std::size_t k = 0; k < params.size(); ++k) params[k].copy_(shared_parameters[k]);
          loss_scale = detail::loss_scale(this->scaler_);
        }
        costs[static_cast<std::size_t>(i)] = towers.forward_backward(tower, i, batches, loss_scale);
        std::vector<torch::Tensor> gradients;
        for (auto& p : params) gradients.push_back(p.grad().defined() ? p.grad().mul(scale) : torch::zeros_like(p));
        std::lock_guard lock(mutex_);  // one update at a time: none is lost
        if (!this->ready_for_update(gradients, loss_scale)) return;
        for (std::size_t k = 0; k < params.size(); ++k)
          shared_parameters[k].mutable_grad() = gradients[k].to(shared_parameters[k].device());
        TP_PHASE("tp::optimizer_step");
        this->optimizer().step();
        ++updates_;
      });
      return costs[0];
    }

   private:
    bool scale_;
    mutable std::mutex mutex_;  // guards the shared weights, the loss scaler and updates_
    std::int64_t updates_ = 0;
  };

 private:
  std::vector<torch::Device> devices_;
  bool scale_ = true;
};

}  // namespace tp
