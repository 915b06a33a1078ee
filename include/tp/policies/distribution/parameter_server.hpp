#pragma once
// ParameterServer<Place>: the weights and the one optimizer live on the parameter server's
// place (the CPU, or a GPU); towers hold working copies. Every step each tower computes the
// gradient of its own batch; the gradients are averaged on the place (bucket by bucket),
// processed once, applied by the one optimizer there, and the new weights are copied back to
// every tower (tensorpack's SyncMultiGPUTrainerParameterServer).
//
// main_model() is the parameter server's copy, so that what callbacks evaluate and savers save
// is the authoritative model; its buffers (batch-norm statistics) follow tower 0's.
#include <cstddef>
#include <stdexcept>
#include <string>
#include <utility>
#include <vector>

#include <torch/cuda.h>
#include <torch/types.h>

#include <tp/concepts/tower.hpp>
#include <tp/policies/distribution/detail/gradient_buckets.hpp>
#include <tp/policies/distribution/policy_base.hpp>
#include <tp/policies/distribution/detail/run_tower.hpp>
#include <tp/policies/distribution/tower_replicas.hpp>
#include <tp/loss_scaler.hpp>
#include <tp/policies/comm/in_process.hpp>

namespace tp {

// Where a parameter server keeps the weights.
struct CPU {
  torch::Device device() const { return torch::kCPU; }
};
// The weights on CUDA device `index`; an error when LibTorch does not see that device.
struct GPU {
  int index = 0;
  torch::Device device() const {
    if (!torch::cuda::is_available() || index >= static_cast<int>(torch::cuda::device_count()))
      throw std::invalid_argument("tp::GPU{" + std::to_string(index) + "}: this LibTorch sees " +
                                  std::to_string(torch::cuda::is_available() ? torch::cuda::device_count() : 0) +
                                  " CUDA device(s)");
    return {torch::kCUDA, static_cast<c10::DeviceIndex>(index)};
  }
};

template <class Place = CPU>
class ParameterServer : public detail::policy_base<ParameterServer<Place>, /*FusesGradients=*/true> {
 public:
  static constexpr const char* policy_name = "ParameterServer";

  explicit ParameterServer(std::vector<torch::Device> towers, Place place = {})
      : devices_(detail::check_devices(std::move(towers), policy_name)), place_(place.device()) {}
  static ParameterServer cpu(int towers, Place place = {}) {
    return ParameterServer(detail::cpu_devices(towers, policy_name), place);
  }

  // The towers' models, the server's model and its optimizer (none for a tower without one),
  // and the default step.
  template <class Tower>
  class Replicas : public detail::shared_model_replicas<Tower> {
   public:
    Replicas(Tower& tower, const ParameterServer& options)
        : detail::shared_model_replicas<Tower>(tower, options.devices_, options.update(), options.place_),
          place_(options.place_) {
      buckets_ = detail::make_buckets(this->shared_parameters_, this->update_.bucket_bytes());
      this->names_ = detail::bucket_names(buckets_, detail::parameter_names(this->shared_));
    }

    // Weights loaded into main_model() before training reach the towers.
    void start() { push_weights(); }

    template <class Input>
      requires detail::steps_on<Tower, Input>
    torch::Tensor run_step(Tower& tower, Input& input) {
      auto& towers = this->towers_;
      const double scale = detail::loss_scale(this->scaler_);
      auto costs = towers.forward_backward(tower, input, this->micro_batches(), scale);
      std::vector<torch::Tensor> reduced;
      std::vector<torch::Tensor> flats(static_cast<std::size_t>(towers.size()));
      {
        TP_PHASE("tp::reduce");
        for (const auto& b : buckets_) {
          for (int i = 0; i < towers.size(); ++i)
            flats[static_cast<std::size_t>(i)] = detail::flatten_gradients(b, towers.parameters(i)).to(place_);
          reduced.push_back(detail::mean_of(flats));
        }
      }
      if (this->ready_for_update(reduced, scale)) {
        for (std::size_t k = 0; k < buckets_.size(); ++k)
          detail::unflatten_gradients(buckets_[k], reduced[k], this->shared_parameters_);
        TP_PHASE("tp::optimizer_step");
        this->optimizer().step();
        push_weights();
      }
      return costs[0];
    }

   private:
    // The server's weights to every tower; tower 0's buffers to the server.
    void push_weights() {
      torch::NoGradGuard no_grad;
      auto& towers = this->towers_;
      towers.threads().run([&](int i) {
        torch::NoGradGuard in_this_thread;  // grad mode is per thread
        auto& params = towers.parameters(i);
        for (std::size_t k = 0; k < params.size(); ++k) params[k].copy_(this->shared_parameters_[k], /*non_blocking=*/true);
      });
      auto server_buffers = (*this->shared_).buffers(), tower_buffers = (*towers.model(0)).buffers();
      for (std::size_t k = 0; k < server_buffers.size(); ++k) server_buffers[k].copy_(tower_buffers[k]);
    }

    torch::Device place_;
    std::vector<detail::bucket> buckets_;
  };

 private:
  std::vector<torch::Device> devices_;
  torch::Device place_;
};

}  // namespace tp
