#pragma once
// ModelDesc: a tower policy built from functions (tensorpack's ModelDesc), in fluent style:
//
//   auto desc = tp::model_desc([] { return Net(); })
//                   .tower_function([](const tp::TowerContext& ctx, Net& net, const Batch& b) {
//                     return torch::cross_entropy_loss(net->forward(b.data), b.target);
//                   })
//                   .optimizer([](Net& net) { return torch::optim::Adam(net->parameters()); });
//
// make_model() is called once per tower, so it must build a fresh model each time. A run with
// its own step may leave out the tower function and the optimizer.
//
// What the towers compute in (tp/precision.hpp): .precision(tp::precision::bf16_mixed) runs the
// tower function under autocast; .channels_last() puts the model's 4-D weights, and the
// batches the input gives, in channels-last order.
#include <concepts>
#include <type_traits>
#include <utility>

#include <tp/precision.hpp>
#include <tp/tower_context.hpp>

namespace tp {

struct no_tower_function {};
struct no_optimizer {};

template <class MakeModel, class TowerFunction = no_tower_function, class MakeOptimizer = no_optimizer>
class ModelDesc {
 public:
  explicit ModelDesc(MakeModel make_model, TowerFunction tower_function = {}, MakeOptimizer make_optimizer = {})
      : make_model_(std::move(make_model)),
        tower_function_(std::move(tower_function)),
        make_optimizer_(std::move(make_optimizer)) {}

  auto make_model() {
    auto model = make_model_();
    if (channels_last_) {
      if constexpr (requires { channels_last_module(*model); }) channels_last_module(*model);  // a module holder
      else if constexpr (std::is_base_of_v<torch::nn::Module, decltype(model)>) channels_last_module(model);
    }
    return model;
  }

  template <class Model, class Batch>
    requires std::invocable<TowerFunction&, const TowerContext&, Model&, const Batch&>
  decltype(auto) cost(const TowerContext& ctx, Model& model, const Batch& batch) {
    return tower_function_(ctx, model, batch);
  }

  template <class Model>
    requires std::invocable<MakeOptimizer&, Model&>
  auto make_optimizer(Model& model) {
    return make_optimizer_(model);
  }

  template <class F>
  auto tower_function(F f) && {
    return ModelDesc<MakeModel, F, MakeOptimizer>(std::move(make_model_), std::move(f), std::move(make_optimizer_)).same_format_as(*this);
  }
  template <class F>
  auto optimizer(F f) && {
    return ModelDesc<MakeModel, TowerFunction, F>(std::move(make_model_), std::move(tower_function_), std::move(f)).same_format_as(*this);
  }

  // The precision the tower function runs in (fp32 by default).
  ModelDesc precision(tp::precision p) && {
    precision_ = p;
    return std::move(*this);
  }
  tp::precision precision() const noexcept { return precision_; }
  // Whether models and batches are in channels-last order (false by default).
  ModelDesc channels_last(bool on = true) && {
    channels_last_ = on;
    return std::move(*this);
  }
  bool channels_last() const noexcept { return channels_last_; }

  template <class Other>
  ModelDesc same_format_as(const Other& other) && {
    precision_ = other.precision();
    channels_last_ = other.channels_last();
    return std::move(*this);
  }

 private:
  MakeModel make_model_;
  TowerFunction tower_function_;
  MakeOptimizer make_optimizer_;
  tp::precision precision_ = tp::precision::fp32;
  bool channels_last_ = false;
};

template <class MakeModel>
  requires std::invocable<MakeModel&>
auto model_desc(MakeModel make_model) {
  return ModelDesc<MakeModel>(std::move(make_model));
}

}  // namespace tp
