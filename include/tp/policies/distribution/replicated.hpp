#pragma once
// Replicated<Comm>: one process, one tower per device, each a full replica with its own
// optimizer (tensorpack's SyncMultiGPUTrainerReplicated). Every step each tower computes the
// gradient of its own batch; the gradients are fused into buckets and averaged across the
// towers by Comm (one call per bucket, however many tensors); gradient processing runs once on
// the average; every replica applies the same update. Replicas are made identical to tower 0
// when training starts (weights loaded into trainer.model() reach every tower) and, with
// resync_every_epochs(n), every n epochs.
//
//   tp::Replicated<tp::InProcess>::cpu(2)            two CPU towers, reduced in process
//   tp::Replicated<tp::NCCL>({torch::Device("cuda:0"), torch::Device("cuda:1")})
#include <cstddef>
#include <cstdint>
#include <stdexcept>
#include <string>
#include <type_traits>
#include <utility>
#include <vector>

#include <torch/types.h>

#include <tp/concepts/tower.hpp>
#include <tp/policies/distribution/detail/gradient_buckets.hpp>
#include <tp/policies/distribution/policy_base.hpp>
#include <tp/policies/distribution/detail/run_tower.hpp>
#include <tp/policies/distribution/tower_replicas.hpp>
#include <tp/loss_scaler.hpp>
#include <tp/policies/comm/in_process.hpp>
#include <tp/policies/comm/nccl.hpp>

namespace tp {

template <class Comm = InProcess>
class Replicated : public detail::policy_base<Replicated<Comm>, /*FusesGradients=*/true> {
 public:
  static constexpr const char* policy_name = "Replicated";

  explicit Replicated(std::vector<torch::Device> devices) : devices_(detail::check_devices(std::move(devices), policy_name)) {
    if constexpr (std::is_same_v<Comm, InProcess>) InProcess::check_devices(devices_);  // fail here, not at build()
  }
  static Replicated cpu(int towers) {
    return Replicated(detail::cpu_devices(towers, policy_name));
  }

  // Copies tower 0's weights to the other towers every n epochs (floating point can make
  // replicas drift apart over a long run).
  Replicated& resync_every_epochs(int n) {
    if (n <= 0) throw std::invalid_argument("tp::Replicated: resync_every_epochs must be > 0, got " + std::to_string(n));
    resync_every_ = n;
    return *this;
  }
  const std::vector<torch::Device>& devices() const noexcept { return devices_; }

  // Every tower's model and optimizer (none for a tower without one), and the default step.
  template <class Tower>
  class Replicas : public detail::tower_replicas<Tower> {
   public:
    using model_type = model_t<Tower>;

    Replicas(Tower& tower, const Replicated& options)
        : detail::tower_replicas<Tower>(tower, options.devices_, options.update()),
          comm_(options.devices_),
          resync_every_(options.resync_every_) {
      for (int i = 0; i < this->towers(); ++i) this->add_optimizer(tower, this->model(i));
      buckets_ = detail::make_buckets(this->towers_.parameters(0), this->update_.bucket_bytes());
      this->names_ = detail::bucket_names(buckets_, detail::parameter_names(this->model(0)));
    }

    // Every tower's optimizer steps on the same averaged gradients from the same weights: they
    // are copies, and a checkpoint keeps the main one (trainer/trainer_state.hpp).
    static constexpr bool optimizer_per_tower = true;

    model_type& main_model() { return this->model(0); }
    auto& optimizer(int tower = 0)
      requires detail::replicas_base<Tower>::has_optimizer
    {
      return this->optimizers_[static_cast<std::size_t>(tower)];
    }
    std::int64_t reduce_calls() const noexcept { return reduce_calls_; }
    std::size_t buckets() const noexcept { return buckets_.size(); }

    void start() { this->towers_.broadcast_from(0); }
    void end_epoch(int epoch) {
      if (resync_every_ > 0 && epoch % resync_every_ == 0) this->towers_.broadcast_from(0);
    }

    template <class Input>
      requires detail::steps_on<Tower, Input>
    torch::Tensor run_step(Tower& tower, Input& input) {
      auto costs = this->towers_.forward_backward(tower, input, this->micro_batches(), detail::loss_scale(this->scaler_));
      if (reduce_gradients()) {
        TP_PHASE("tp::optimizer_step");
        this->towers_.threads().run([&](int i) { optimizer(i).step(); });
      }
      return costs[0];
    }

    // Averages the towers' gradients, bucket by bucket, unscales (with loss scaling) and
    // processes the average. Returns false if the update is to be skipped.
    bool reduce_gradients() {
      TP_PHASE("tp::reduce");
      auto& towers = this->towers_;
      const auto n = static_cast<std::size_t>(towers.size());
      std::vector<std::vector<torch::Tensor>> reduced(n);  // [tower][bucket]
      std::vector<torch::Tensor> flats(n);
      for (const auto& b : buckets_) {
        for (std::size_t i = 0; i < n; ++i) flats[i] = detail::flatten_gradients(b, towers.parameters(static_cast<int>(i)));
        comm_.all_reduce_mean(flats);
        ++reduce_calls_;
        for (std::size_t i = 0; i < n; ++i) reduced[i].push_back(flats[i]);
      }
      // Once on the average; again on a tower's own copy only where the comm made one (the
      // same input gives every tower the same result and the same decision).
      const double scale = detail::loss_scale(this->scaler_);
      const bool apply = this->ready_for_update(reduced[0], scale);
      for (std::size_t i = 1; i < n && apply; ++i)
        if (!reduced[i].empty() && !reduced[i][0].is_same(reduced[0][0])) {
          if (this->scaler_) LossScaler::unscale(reduced[i], scale);
          this->update_.gradients().apply(reduced[i], this->names_);
        }
      if (!apply) return false;
      towers.threads().run([&](int i) {
        for (std::size_t k = 0; k < buckets_.size(); ++k)
          detail::unflatten_gradients(buckets_[k], reduced[static_cast<std::size_t>(i)][k], towers.parameters(i));
      });
      return true;
    }

   private:
    Comm comm_;
    int resync_every_;
    std::vector<detail::bucket> buckets_;
    std::int64_t reduce_calls_ = 0;
  };

 private:
  std::vector<torch::Device> devices_;
  int resync_every_ = 0;
};

}  // namespace tp
