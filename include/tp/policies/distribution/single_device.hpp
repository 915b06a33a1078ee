#pragma once
// SingleDevice: one tower on one device (the CPU, or one GPU when LibTorch has CUDA).
#include <stdexcept>
#include <string>

#include <torch/cuda.h>
#include <torch/types.h>

#include <tp/batch.hpp>

#include <tp/compiled_part.hpp>
#include <tp/concepts/tower.hpp>
#include <tp/policies/distribution/detail/keyed_randomness.hpp>
#include <tp/policies/distribution/detail/micro_batches.hpp>
#include <tp/policies/distribution/policy_base.hpp>
#include <tp/policies/distribution/replicas_base.hpp>
#include <tp/policies/distribution/detail/run_tower.hpp>
#include <tp/loss_scaler.hpp>
#include <tp/tower_context.hpp>

namespace tp {

class SingleDevice : public detail::policy_base<SingleDevice, /*FusesGradients=*/false, /*KeysRandomness=*/true> {
 public:
  static constexpr const char* policy_name = "SingleDevice";

  explicit SingleDevice(torch::Device device = torch::kCPU);

  // The first GPU if LibTorch can use one, the CPU otherwise.
  static SingleDevice best_available() {
    return SingleDevice(torch::cuda::is_available() ? torch::Device(torch::kCUDA, 0) : torch::Device(torch::kCPU));
  }

  torch::Device device() const noexcept { return device_; }

  // The model, its optimizer (none for a tower without one) and the default step.
  template <class Tower>
  class Replicas : public detail::replicas_base<Tower> {
   public:
    using model_type = model_t<Tower>;

    Replicas(Tower& tower, const SingleDevice& options)
        : detail::replicas_base<Tower>(tower, options.update()), model_(tower.make_model()), device_(options.device_) {
      (*model_).to(device_);
      (*model_).train();
      if (this->update_.gradients().active()) this->names_ = detail::parameter_names(model_);
      this->add_optimizer(tower, model_);
    }

    model_type& main_model() noexcept { return model_; }
    torch::Device device() const noexcept { return device_; }

    // Pull a batch, forward, backward, update. Returns the cost (the trainer detaches it when
    // it is read).
    template <class Input>
      requires detail::steps_on<Tower, Input>
    torch::Tensor run_step(Tower& tower, Input& input) {
      const TowerContext ctx{.is_training = true, .index = 0, .device = device_, .is_main = true};
      auto& optimizer = this->optimizer();
      optimizer.zero_grad();
      const double scale = detail::loss_scale(this->scaler_);
      int micro = 0;
      auto cost = detail::over_micro_batches(this->micro_batches(), scale, [&](bool) {
        const auto batch = detail::next_batch_on(input, device_);
        const detail::keyed_generators keyed(this->update_.keyed_randomness(), device_, this->step_, micro++);
        return detail::run_tower(tower, ctx, model_, batch);
      });
      if (!this->process_gradients(model_, scale)) return cost;
      TP_PHASE("tp::optimizer_step");
      optimizer.step();
      return cost;
    }

   private:
    model_type model_;
    torch::Device device_;
  };

 private:
  torch::Device device_;
};

}  // namespace tp

#if TP_DEFINE_COMPILED_PART
namespace tp {

TP_DECL SingleDevice::SingleDevice(torch::Device device) : device_(device) {
  if (device_.is_cuda() && !torch::cuda::is_available())
    throw std::invalid_argument("tp::SingleDevice: device " + device_.str() +
                                " was asked for, but this LibTorch has no usable CUDA device; "
                                "use torch::kCPU or SingleDevice::best_available()");
  if (device_.is_cuda() && device_.has_index() &&
      device_.index() >= static_cast<int>(torch::cuda::device_count()))
    throw std::invalid_argument("tp::SingleDevice: device " + device_.str() + " does not exist; " +
                                std::to_string(torch::cuda::device_count()) + " CUDA device(s) are visible");
}

}  // namespace tp
#endif
