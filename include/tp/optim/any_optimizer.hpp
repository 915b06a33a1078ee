#pragma once
// AnyOptimizer: an optimizer chosen at run time (a command-line flag, a config file) as one
// type, so that one trainer type serves them all. It owns any torch::optim::Optimizer and
// forwards what tp calls on an optimizer (zero_grad, step, param_groups, save, load) through
// LibTorch's own virtual functions; get() gives the optimizer itself.
//
//   .optimizer([&](Net& net) -> tp::optim::AnyOptimizer {
//     if (name == "sgd") return torch::optim::SGD(net->parameters(), 0.05);
//     return tp::optim::NAdam(net->parameters());
//   })
#include <concepts>
#include <memory>
#include <stdexcept>
#include <utility>
#include <vector>

#include <torch/optim/optimizer.h>
#include <torch/serialize/archive.h>

// Optimizers LibTorch lacks (NAdam, RAdam, LARS, LAMB), an optimizer chosen at run time
// (AnyOptimizer), weight decay groups, and optimizer state as plain values, in torch.optim's
// format, or cut into pieces across processes.
namespace tp::optim {

class AnyOptimizer {
 public:
  template <class O>
    requires std::derived_from<O, torch::optim::Optimizer> && std::move_constructible<O>
  AnyOptimizer(O optimizer) : optimizer_(std::make_unique<O>(std::move(optimizer))) {}
  explicit AnyOptimizer(std::unique_ptr<torch::optim::Optimizer> optimizer) : optimizer_(std::move(optimizer)) {
    if (!optimizer_) throw std::invalid_argument("tp::optim::AnyOptimizer: given no optimizer (a null pointer)");
  }

  void zero_grad() { optimizer_->zero_grad(); }
  torch::Tensor step(torch::optim::Optimizer::LossClosure closure = nullptr) { return optimizer_->step(std::move(closure)); }
  std::vector<torch::optim::OptimizerParamGroup>& param_groups() noexcept { return optimizer_->param_groups(); }
  const std::vector<torch::optim::OptimizerParamGroup>& param_groups() const noexcept { return optimizer_->param_groups(); }
  void save(torch::serialize::OutputArchive& archive) const { optimizer_->save(archive); }
  void load(torch::serialize::InputArchive& archive) { optimizer_->load(archive); }

  torch::optim::Optimizer& get() noexcept { return *optimizer_; }

 private:
  std::unique_ptr<torch::optim::Optimizer> optimizer_;
};

}  // namespace tp::optim

namespace tp::detail {

// The optimizer as LibTorch's base class (through AnyOptimizer's get()), or null.
template <class Optimizer>
torch::optim::Optimizer* torch_optimizer_of(Optimizer& optimizer) {
  if constexpr (std::derived_from<Optimizer, torch::optim::Optimizer>) return &optimizer;
  else if constexpr (requires { { optimizer.get() } -> std::convertible_to<torch::optim::Optimizer&>; }) return &optimizer.get();
  else return nullptr;
}

}  // namespace tp::detail
