#pragma once
// The towers of a multi-tower distribution policy: one model per device, built by the tower
// policy's make_model() and made identical to tower 0; each step, every tower gets its own
// batches (k micro-batches with gradient accumulation) and runs forward and backward in its own
// thread.
#include <cstddef>
#include <cstdint>
#include <functional>
#include <stdexcept>
#include <string>
#include <utility>
#include <vector>

#include <torch/types.h>

#include <tp/batch.hpp>
#include <tp/concepts/tower.hpp>
#include <tp/policies/distribution/detail/micro_batches.hpp>
#include <tp/policies/distribution/detail/run_tower.hpp>
#include <tp/policies/distribution/detail/tower_threads.hpp>
#include <tp/tower_context.hpp>

namespace tp::detail {

inline std::vector<torch::Device> check_devices(std::vector<torch::Device> devices, const char* policy) {
  if (devices.empty())
    throw std::invalid_argument(std::string("tp::") + policy + ": give at least one device (one tower each)");
  return devices;
}

// `towers` CPU devices, for a policy's cpu(towers).
inline std::vector<torch::Device> cpu_devices(int towers, const char* policy) {
  if (towers <= 0)
    throw std::invalid_argument(std::string("tp::") + policy + "::cpu: the number of towers must be > 0, got " + std::to_string(towers));
  return std::vector<torch::Device>(static_cast<std::size_t>(towers), torch::kCPU);
}

// Copies a model's parameters and buffers into another model of the same structure.
template <class To, class From>
void copy_state(To& to, const From& from) {
  torch::NoGradGuard no_grad;
  auto to_params = (*to).parameters(), from_params = (*from).parameters();
  auto to_buffers = (*to).buffers(), from_buffers = (*from).buffers();
  if (to_params.size() != from_params.size() || to_buffers.size() != from_buffers.size())
    throw std::logic_error("tp: make_model() built models of different structures; it must build the same model every time");
  for (std::size_t i = 0; i < to_params.size(); ++i) to_params[i].copy_(from_params[i]);
  for (std::size_t i = 0; i < to_buffers.size(); ++i) to_buffers[i].copy_(from_buffers[i]);
}

template <class Tower>
class tower_set {
 public:
  using model_type = model_t<Tower>;

  tower_set(Tower& tower, const std::vector<torch::Device>& devices) : devices_(devices), threads_(static_cast<int>(devices.size())) {
    for (const auto& device : devices_) {
      models_.push_back(tower.make_model());
      auto& model = models_.back();
      for (std::size_t i = 0; i + 1 < models_.size(); ++i)
        if (&*models_[i] == &*model)
          throw std::invalid_argument("tp: make_model() returned the same module twice; a tower policy must build a new "
                                      "model at every call, one per tower (return `Net()`, not a model captured by reference)");
      (*model).to(device);
      (*model).train();
    }
    for (auto& model : models_) parameters_.push_back((*model).parameters());
    broadcast_from(0);
  }

  int size() const noexcept { return static_cast<int>(models_.size()); }
  model_type& model(int i) { return models_[static_cast<std::size_t>(i)]; }
  torch::Device device(int i) const { return devices_[static_cast<std::size_t>(i)]; }
  std::vector<torch::Tensor>& parameters(int i) { return parameters_[static_cast<std::size_t>(i)]; }
  tower_threads& threads() noexcept { return threads_; }

  // Makes every tower's weights and buffers those of tower `source`.
  void broadcast_from(int source) {
    for (int i = 0; i < size(); ++i)
      if (i != source) copy_state(model(i), model(source));
  }
  // Whether every tower holds exactly the weights and buffers of tower 0.
  bool identical() {
    for (int i = 1; i < size(); ++i) {
      auto a = (*model(0)).parameters(), b = (*model(i)).parameters();
      for (std::size_t k = 0; k < a.size(); ++k)
        if (!torch::equal(a[k].cpu(), b[k].cpu())) return false;
      auto x = (*model(0)).buffers(), y = (*model(i)).buffers();
      for (std::size_t k = 0; k < x.size(); ++k)
        if (!torch::equal(x[k].cpu(), y[k].cpu())) return false;
    }
    return true;
  }

  // One batch per tower, pulled in tower order (so a run is reproducible) and moved to the
  // tower's device.
  template <class Input>
  auto pull(Input& input) {
    std::vector<std::remove_cvref_t<decltype(input.next_batch())>> batches;
    batches.reserve(models_.size());
    for (int i = 0; i < size(); ++i) batches.push_back(next_batch_on(input, device(i)));
    return batches;
  }
  // A step's batches with k micro-batches per tower: [micro-batch][tower], pulled in that order.
  template <class Input>
  auto pull_micro_batches(Input& input, int k) {
    std::vector<decltype(pull(input))> batches;
    batches.reserve(static_cast<std::size_t>(k));
    for (int m = 0; m < k; ++m) batches.push_back(pull(input));
    return batches;
  }

  // Tower i's forward and backward over its k micro-batches, gradients zeroed first and then
  // accumulated (policies/distribution/detail/micro_batches.hpp). Returns its cost. Runs in tower i's thread.
  template <class Batch>
  torch::Tensor forward_backward(Tower& tower, int i, const std::vector<std::vector<Batch>>& batches, double loss_scale) {
    for (auto& p : parameters(i))
      if (p.grad().defined()) p.mutable_grad().zero_();
    const TowerContext ctx{.is_training = true, .index = i, .device = device(i), .is_main = i == 0};
    std::size_t m = 0;
    return over_micro_batches(static_cast<int>(batches.size()), loss_scale,
                              [&](bool) { return run_tower(tower, ctx, model(i), batches[m++][static_cast<std::size_t>(i)]); });
  }
  // The same on every tower at once. Returns the costs.
  template <class Input>
  std::vector<torch::Tensor> forward_backward(Tower& tower, Input& input, int micro_batches, double loss_scale) {
    const auto batches = pull_micro_batches(input, micro_batches);
    std::vector<torch::Tensor> costs(models_.size());
    threads_.run([&](int i) { costs[static_cast<std::size_t>(i)] = forward_backward(tower, i, batches, loss_scale); });
    return costs;
  }

 private:
  std::vector<torch::Device> devices_;
  std::vector<model_type> models_;
  std::vector<std::vector<torch::Tensor>> parameters_;
  tower_threads threads_;  // last: joined before the models go
};

}  // namespace tp::detail
