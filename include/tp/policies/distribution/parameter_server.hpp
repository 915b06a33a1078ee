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
#include <cstdint>
#include <optional>
#include <stdexcept>
#include <string>
#include <utility>
#include <vector>

#include <torch/cuda.h>
#include <torch/types.h>

#include <tp/concepts/tower.hpp>
#include <tp/detail/gradient_buckets.hpp>
#include <tp/detail/tower_set.hpp>
#include <tp/gradient_processing.hpp>
#include <tp/loss_scaler.hpp>
#include <tp/policies/comm/in_process.hpp>
#include <tp/policies/distribution/replicated.hpp>

namespace tp {

// Where a parameter server keeps the weights.
struct CPU {
  torch::Device device() const { return torch::kCPU; }
};
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
class ParameterServer {
 public:
  explicit ParameterServer(std::vector<torch::Device> towers, Place place = {})
      : devices_(detail::check_devices(std::move(towers), "ParameterServer")), place_(place.device()) {}
  static ParameterServer cpu(int towers, Place place = {}) {
    return ParameterServer(detail::cpu_devices(towers, "ParameterServer"), place);
  }
  ParameterServer& bucket_bytes(std::size_t bytes) {
    if (bytes == 0) throw std::invalid_argument("tp::ParameterServer: bucket_bytes must be > 0");
    bucket_bytes_ = bytes;
    return *this;
  }
  // Gradient accumulation: k micro-batches per tower per optimizer step (detail/micro_batches.hpp).
  ParameterServer& accumulate(int k) {
    micro_batches_ = detail::micro_batches(k, "ParameterServer");
    return *this;
  }
  ParameterServer& gradients(GradientProcessing processing) {
    processing_ = std::move(processing);
    return *this;
  }

  template <class Tower>
  class Replica {
   public:
    using model_type = model_t<Tower>;

    Replica(Tower& tower, const ParameterServer& options)
        : options_(options), towers_(tower, options.devices_), server_(tower.make_model()), scaler_(detail::loss_scaler_of(tower)) {
      (*server_).to(options_.place_);
      detail::copy_state(server_, towers_.model(0));
      optimizer_.emplace(tower.make_optimizer(server_));
      server_parameters_ = (*server_).parameters();
      buckets_ = detail::make_buckets(server_parameters_, options_.bucket_bytes_);
      names_ = detail::bucket_names(buckets_, detail::parameter_names(server_));
    }

    model_type& main_model() { return server_; }
    const GradientProcessing& gradient_processing() const noexcept { return options_.processing_; }
    model_type& model(int tower) { return towers_.model(tower); }
    auto& optimizer() { return *optimizer_; }
    template <class F>
    void for_each_optimizer(F&& f) {
      f(*optimizer_);
    }
    int towers() const noexcept { return towers_.size(); }
    bool identical() { return towers_.identical(); }

    // Weights loaded into main_model() before training reach the towers.
    void start() { push_weights(); }

    template <class Input>
    torch::Tensor run_step(Tower& tower, Input& input) {
      const double scale = detail::loss_scale(scaler_);
      auto costs = towers_.forward_backward(tower, input, options_.micro_batches_, scale);
      std::vector<torch::Tensor> reduced;
      std::vector<torch::Tensor> flats(static_cast<std::size_t>(towers_.size()));
      {
        TP_PHASE("tp::reduce");
        for (const auto& b : buckets_) {
          for (int i = 0; i < towers_.size(); ++i)
            flats[static_cast<std::size_t>(i)] = detail::flatten_gradients(b, towers_.parameters(i)).to(options_.place_);
          reduced.push_back(detail::mean_of(flats));
        }
      }
      if (detail::ready_for_update(scaler_, scale, options_.processing_, reduced, names_)) {
        for (std::size_t k = 0; k < buckets_.size(); ++k) detail::unflatten_gradients(buckets_[k], reduced[k], server_parameters_);
        TP_PHASE("tp::optimizer_step");
        optimizer_->step();
        push_weights();
      }
      return costs[0];
    }

   private:
    // The server's weights to every tower; tower 0's buffers to the server.
    void push_weights() {
      torch::NoGradGuard no_grad;
      towers_.threads().run([&](int i) {
        torch::NoGradGuard in_this_thread;  // grad mode is per thread
        auto& params = towers_.parameters(i);
        for (std::size_t k = 0; k < params.size(); ++k) params[k].copy_(server_parameters_[k], /*non_blocking=*/true);
      });
      auto server_buffers = (*server_).buffers(), tower_buffers = (*towers_.model(0)).buffers();
      for (std::size_t k = 0; k < server_buffers.size(); ++k) server_buffers[k].copy_(tower_buffers[k]);
    }

    ParameterServer options_;
    detail::tower_set<Tower> towers_;
    model_type server_;
    std::optional<optimizer_t<Tower>> optimizer_;
    std::vector<torch::Tensor> server_parameters_;
    std::vector<detail::bucket> buckets_;
    std::vector<std::string> names_;
    LossScaler* scaler_;  // the tower policy's (or none), which outlives the replica
  };

  template <class Tower>
  Replica<Tower> build(Tower& tower) {
    return Replica<Tower>(tower, *this);
  }

 private:
  std::vector<torch::Device> devices_;
  torch::Device place_;
  std::size_t bucket_bytes_ = 25u << 20;
  GradientProcessing processing_;
  int micro_batches_ = 1;
};

}  // namespace tp
