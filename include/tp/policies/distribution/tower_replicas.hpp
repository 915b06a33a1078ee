#pragma once
// The replicas of the one-process policies with many towers (Replicated, ParameterServer,
// Async): a tower_set, one model per device, besides what every policy's replicas hold; and,
// for ParameterServer and Async, the one shared model that the towers' gradients update.
#include <optional>
#include <vector>

#include <torch/types.h>

#include <tp/concepts/tower.hpp>
#include <tp/policies/distribution/replicas_base.hpp>
#include <tp/policies/distribution/detail/tower_set.hpp>
#include <tp/update_options.hpp>

namespace tp::detail {

template <class Tower>
class tower_replicas : public replicas_base<Tower> {
 public:
  using model_type = model_t<Tower>;

  model_type& model(int tower) { return towers_.model(tower); }
  int towers() const noexcept { return towers_.size(); }
  // Every tower takes its own micro-batches.
  int batches_per_step() const noexcept { return this->micro_batches() * towers(); }
  // Whether every tower holds exactly tower 0's weights and buffers.
  bool identical() { return towers_.identical(); }

 protected:
  tower_replicas(Tower& tower, const std::vector<torch::Device>& devices, const UpdateOptions& update)
      : replicas_base<Tower>(tower, update), towers_(tower, devices) {}

  tower_set<Tower> towers_;
};

// The shared model holds the authoritative weights and the one optimizer; it is built after the
// towers (on `place` where one is given) from tower 0's weights, and it is main_model(), so that
// what callbacks evaluate and savers save is what the updates go to.
template <class Tower>
class shared_model_replicas : public tower_replicas<Tower> {
 public:
  using model_type = model_t<Tower>;

  model_type& main_model() noexcept { return shared_; }

 protected:
  shared_model_replicas(Tower& tower, const std::vector<torch::Device>& devices, const UpdateOptions& update,
                        std::optional<torch::Device> place = std::nullopt)
      : tower_replicas<Tower>(tower, devices, update), shared_(tower.make_model()) {
    if (place) (*shared_).to(*place);
    copy_state(shared_, this->towers_.model(0));
    this->add_optimizer(tower, shared_);
    shared_parameters_ = (*shared_).parameters();
  }

  model_type shared_;
  std::vector<torch::Tensor> shared_parameters_;
};

}  // namespace tp::detail
