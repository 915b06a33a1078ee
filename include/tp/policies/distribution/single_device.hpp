#pragma once
// SingleDevice: one tower on one device (the CPU, or one GPU when LibTorch has CUDA).
#include <optional>
#include <string>
#include <vector>
#include <stdexcept>
#include <type_traits>
#include <utility>
#include <variant>

#include <torch/cuda.h>
#include <torch/types.h>

#include <tp/batch.hpp>
#include <tp/concepts/tower.hpp>
#include <tp/detail/micro_batches.hpp>
#include <tp/detail/run_tower.hpp>
#include <tp/gradient_processing.hpp>
#include <tp/loss_scaler.hpp>
#include <tp/tower_context.hpp>

namespace tp {

class SingleDevice {
 public:
  explicit SingleDevice(torch::Device device = torch::kCPU) : device_(device) {
    if (device_.is_cuda() && !torch::cuda::is_available())
      throw std::invalid_argument("tp::SingleDevice: device " + device_.str() +
                                  " was asked for, but this LibTorch has no usable CUDA device; "
                                  "use torch::kCPU or SingleDevice::best_available()");
    if (device_.is_cuda() && device_.has_index() &&
        device_.index() >= static_cast<int>(torch::cuda::device_count()))
      throw std::invalid_argument("tp::SingleDevice: device " + device_.str() + " does not exist; " +
                                  std::to_string(torch::cuda::device_count()) + " CUDA device(s) are visible");
  }

  // The first GPU if LibTorch can use one, the CPU otherwise.
  static SingleDevice best_available() {
    return SingleDevice(torch::cuda::is_available() ? torch::Device(torch::kCUDA, 0) : torch::Device(torch::kCPU));
  }

  torch::Device device() const noexcept { return device_; }

  // Gradient processing before each update (clipping, NaN policy).
  SingleDevice& gradients(GradientProcessing processing) {
    processing_ = std::move(processing);
    return *this;
  }
  // Gradient accumulation: k micro-batches per optimizer step (see detail/micro_batches.hpp).
  SingleDevice& accumulate(int k) {
    micro_batches_ = detail::micro_batches(k, "SingleDevice");
    return *this;
  }

  template <class Tower>
  class Replica {
   public:
    using model_type = model_t<Tower>;

    Replica(Tower& tower, torch::Device device, GradientProcessing processing, int micro_batches = 1)
        : model_(tower.make_model()), device_(device), processing_(std::move(processing)), micro_batches_(micro_batches) {
      (*model_).to(device_);
      (*model_).train();
      if (processing_.active()) names_ = detail::parameter_names(model_);
      if constexpr (detail::has_optimizer_factory<Tower, model_type>) optimizer_.emplace(tower.make_optimizer(model_));
      scaler_ = detail::loss_scaler_of(tower);
    }

    model_type& main_model() noexcept { return model_; }
    const GradientProcessing& gradient_processing() const noexcept { return processing_; }
    torch::Device device() const noexcept { return device_; }
    // The optimizer the tower policy made (only for towers that make one).
    auto& optimizer()
      requires detail::has_optimizer_factory<Tower, model_type>
    {
      return *optimizer_;
    }

    // Calls f on every optimizer (here at most one): what hyperparameter setters go through.
    template <class F>
    void for_each_optimizer(F&& f) {
      if constexpr (detail::has_optimizer_factory<Tower, model_type>) f(*optimizer_);
    }

    // Pull a batch, forward, backward, update. Returns the cost (the trainer detaches it when
    // it is read).
    template <class Input>
      requires trainable_tower<Tower, std::remove_cvref_t<decltype(std::declval<Input&>().next_batch())>>
    torch::Tensor run_step(Tower& tower, Input& input) {
      const TowerContext ctx{.is_training = true, .index = 0, .device = device_, .is_main = true};
      optimizer_->zero_grad();
      const double scale = detail::loss_scale(scaler_);
      auto cost = detail::over_micro_batches(micro_batches_, scale, [&](bool) {
        const auto batch = detail::next_batch_on(input, device_);
        return detail::run_tower(tower, ctx, model_, batch);
      });
      if ((scaler_ || processing_.active()) && !process_gradients(scale)) return cost;
      TP_PHASE("tp::optimizer_step");
      optimizer_->step();
      return cost;
    }

   private:
    bool process_gradients(double used_scale) {
      std::vector<torch::Tensor> gradients;
      for (auto& p : (*model_).parameters()) {
        if (!p.grad().defined()) p.mutable_grad() = torch::zeros_like(p);
        gradients.push_back(p.grad());
      }
      return detail::ready_for_update(scaler_, used_scale, processing_, gradients, names_);
    }

    // The tower's optimizer type, or std::monostate for a tower without one (a user step).
    using optimizer_type = typename decltype([] {
      if constexpr (detail::has_optimizer_factory<Tower, model_type>) return std::type_identity<optimizer_t<Tower>>{};
      else return std::type_identity<std::monostate>{};
    }())::type;

    model_type model_;
    torch::Device device_;
    GradientProcessing processing_;
    int micro_batches_;
    std::vector<std::string> names_;
    std::optional<optimizer_type> optimizer_;
    LossScaler* scaler_ = nullptr;  // the tower policy's, which outlives the replica
  };

  template <class Tower>
  Replica<Tower> build(Tower& tower) {
    return Replica<Tower>(tower, device_, processing_, micro_batches_);
  }

 private:
  torch::Device device_;
  GradientProcessing processing_;
  int micro_batches_ = 1;
};

}  // namespace tp
