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
#include <tp/detail/gradient_buckets.hpp>
#include <tp/detail/tower_set.hpp>
#include <tp/gradient_processing.hpp>
#include <tp/loss_scaler.hpp>
#include <tp/policies/comm/in_process.hpp>
#include <tp/policies/comm/nccl.hpp>

namespace tp {

namespace detail {
// "conv1.weight, conv1.bias, ..." for messages about a bucket.
inline std::vector<std::string> bucket_names(const std::vector<bucket>& buckets, const std::vector<std::string>& names) {
  std::vector<std::string> out;
  for (const auto& b : buckets) {
    std::string text = b.parameters.size() == 1 ? "" : "one of ";
    for (std::size_t k = 0; k < b.parameters.size() && k < 4; ++k) text += (k ? ", " : "") + names[b.parameters[k]];
    if (b.parameters.size() > 4) text += ", ...";
    out.push_back(text);
  }
  return out;
}
}  // namespace detail

template <class Comm = InProcess>
class Replicated {
 public:
  explicit Replicated(std::vector<torch::Device> devices) : devices_(detail::check_devices(std::move(devices), "Replicated")) {
    if constexpr (std::is_same_v<Comm, InProcess>) InProcess::check_devices(devices_);  // fail here, not at build()
  }
  static Replicated cpu(int towers) {
    return Replicated(detail::cpu_devices(towers, "Replicated"));
  }

  // Largest bucket of fused gradients (default 25 MB).
  Replicated& bucket_bytes(std::size_t bytes) {
    if (bytes == 0) throw std::invalid_argument("tp::Replicated: bucket_bytes must be > 0");
    bucket_bytes_ = bytes;
    return *this;
  }
  Replicated& gradients(GradientProcessing processing) {
    processing_ = std::move(processing);
    return *this;
  }
  // Gradient accumulation: k micro-batches per tower per optimizer step, reduced once (see
  // detail/micro_batches.hpp).
  Replicated& accumulate(int k) {
    micro_batches_ = detail::micro_batches(k, "Replicated");
    return *this;
  }
  // Copies tower 0's weights to the other towers every n epochs (floating point can make
  // replicas drift apart over a long run).
  Replicated& resync_every_epochs(int n) {
    if (n <= 0) throw std::invalid_argument("tp::Replicated: resync_every_epochs must be > 0, got " + std::to_string(n));
    resync_every_ = n;
    return *this;
  }
  const std::vector<torch::Device>& devices() const noexcept { return devices_; }

  template <class Tower>
  class Replica {
   public:
    using model_type = model_t<Tower>;

    Replica(Tower& tower, const Replicated& options)
        : options_(options), towers_(tower, options.devices_), comm_(options.devices_), scaler_(detail::loss_scaler_of(tower)) {
      for (int i = 0; i < towers_.size(); ++i) optimizers_.push_back(tower.make_optimizer(towers_.model(i)));
      buckets_ = detail::make_buckets(towers_.parameters(0), options_.bucket_bytes_);
      names_ = detail::bucket_names(buckets_, detail::parameter_names(towers_.model(0)));
    }

    model_type& main_model() { return towers_.model(0); }
    const GradientProcessing& gradient_processing() const noexcept { return options_.processing_; }
    model_type& model(int tower) { return towers_.model(tower); }
    auto& optimizer(int tower = 0) { return optimizers_[static_cast<std::size_t>(tower)]; }
    // Every tower's optimizer: a hyperparameter must reach all the replicas.
    template <class F>
    void for_each_optimizer(F&& f) {
      for (auto& o : optimizers_) f(o);
    }
    int towers() const noexcept { return towers_.size(); }
    bool identical() { return towers_.identical(); }
    std::int64_t reduce_calls() const noexcept { return reduce_calls_; }
    std::size_t buckets() const noexcept { return buckets_.size(); }

    void start() { towers_.broadcast_from(0); }
    void end_epoch(int epoch) {
      if (options_.resync_every_ > 0 && epoch % options_.resync_every_ == 0) towers_.broadcast_from(0);
    }

    template <class Input>
    torch::Tensor run_step(Tower& tower, Input& input) {
      auto costs = towers_.forward_backward(tower, input, options_.micro_batches_, detail::loss_scale(scaler_));
      if (reduce_gradients()) {
        TP_PHASE("tp::optimizer_step");
        towers_.threads().run([&](int i) { optimizers_[static_cast<std::size_t>(i)].step(); });
      }
      return costs[0];
    }

    // Averages the towers' gradients, bucket by bucket, unscales (with loss scaling) and
    // processes the average. Returns false if the update is to be skipped.
    bool reduce_gradients() {
      TP_PHASE("tp::reduce");
      const auto n = static_cast<std::size_t>(towers_.size());
      std::vector<std::vector<torch::Tensor>> reduced(n);  // [tower][bucket]
      std::vector<torch::Tensor> flats(n);
      for (const auto& b : buckets_) {
        for (std::size_t i = 0; i < n; ++i) flats[i] = detail::flatten_gradients(b, towers_.parameters(static_cast<int>(i)));
        comm_.all_reduce_mean(flats);
        ++reduce_calls_;
        for (std::size_t i = 0; i < n; ++i) reduced[i].push_back(flats[i]);
      }
      // Once on the average; again on a tower's own copy only where the comm made one (the
      // same input gives every tower the same result and the same decision).
      const double scale = detail::loss_scale(scaler_);
      const bool apply = detail::ready_for_update(scaler_, scale, options_.processing_, reduced[0], names_);
      for (std::size_t i = 1; i < n && apply; ++i)
        if (!reduced[i].empty() && !reduced[i][0].is_same(reduced[0][0])) {
          if (scaler_) LossScaler::unscale(reduced[i], scale);
          options_.processing_.apply(reduced[i], names_);
        }
      if (!apply) return false;
      towers_.threads().run([&](int i) {
        for (std::size_t k = 0; k < buckets_.size(); ++k)
          detail::unflatten_gradients(buckets_[k], reduced[static_cast<std::size_t>(i)][k], towers_.parameters(i));
      });
      return true;
    }

   private:
    Replicated options_;
    detail::tower_set<Tower> towers_;
    Comm comm_;
    std::vector<optimizer_t<Tower>> optimizers_;
    std::vector<detail::bucket> buckets_;
    std::vector<std::string> names_;
    std::int64_t reduce_calls_ = 0;
    LossScaler* scaler_;  // the tower policy's (or none), which outlives the replica
  };

  template <class Tower>
  Replica<Tower> build(Tower& tower) {
    return Replica<Tower>(tower, *this);
  }

 private:
  std::vector<torch::Device> devices_;
  std::size_t bucket_bytes_ = 25u << 20;
  GradientProcessing processing_;
  int resync_every_ = 0;
  int micro_batches_ = 1;
};

}  // namespace tp
