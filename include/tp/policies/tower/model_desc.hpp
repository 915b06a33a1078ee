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
// batches the input gives, in channels-last order; fp16_mixed turns on dynamic loss scaling
// (tp/loss_scaler.hpp), whose options .loss_scaling(tp::LossScaler()...) sets.
#include <concepts>
#include <type_traits>
#include <utility>

#include <optional>

#include <tp/loss_scaler.hpp>
#include <tp/precision.hpp>
#include <tp/tower_context.hpp>

namespace tp {

struct no_tower_function {};
struct no_optimizer {};

// What a tower computes in: precision, memory format, and the loss scaler (state included).
struct tower_format {
  tp::precision precision = tp::precision::fp32;
  bool channels_last = false;
  std::optional<LossScaler> loss_scaler;
};

template <class MakeModel, class TowerFunction = no_tower_function, class MakeOptimizer = no_optimizer>
class ModelDesc {
 public:
  explicit ModelDesc(MakeModel make_model, TowerFunction tower_function = {}, MakeOptimizer make_optimizer = {})
      : make_model_(std::move(make_model)),
        tower_function_(std::move(tower_function)),
        make_optimizer_(std::move(make_optimizer)) {}

  auto make_model() {
    auto model = make_model_();
    if (format_.channels_last) {
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
    return ModelDesc<MakeModel, F, MakeOptimizer>(std::move(make_model_), std::move(f), std::move(make_optimizer_)).with_format(std::move(format_));
  }
  template <class F>
  auto optimizer(F f) && {
    return ModelDesc<MakeModel, TowerFunction, F>(std::move(make_model_), std::move(tower_function_), std::move(f)).with_format(std::move(format_));
  }

  // The precision the tower function runs in (fp32 by default); fp16_mixed brings a loss
  // scaler with GradScaler's defaults unless one was set.
  ModelDesc precision(tp::precision p) && {
    format_.precision = p;
    if (p == tp::precision::fp16_mixed && !format_.loss_scaler) format_.loss_scaler.emplace();
    return std::move(*this);
  }
  tp::precision precision() const noexcept { return format_.precision; }
  // Whether models and batches are in channels-last order (false by default).
  ModelDesc channels_last(bool on = true) && {
    format_.channels_last = on;
    return std::move(*this);
  }
  bool channels_last() const noexcept { return format_.channels_last; }
  // Dynamic loss scaling with these options, in any precision (on by default in fp16_mixed).
  ModelDesc loss_scaling(LossScaler scaler) && {
    format_.loss_scaler = scaler;
    return std::move(*this);
  }
  // The loss scaler, or nullptr without loss scaling.
  LossScaler* loss_scaler() noexcept { return format_.loss_scaler ? &*format_.loss_scaler : nullptr; }

  ModelDesc with_format(tower_format format) && {
    format_ = std::move(format);
    return std::move(*this);
  }

 private:
  MakeModel make_model_;
  TowerFunction tower_function_;
  MakeOptimizer make_optimizer_;
  tower_format format_;
};

// A ModelDesc that builds each tower's model with make_model(); give it a tower function and an
// optimizer next.
template <class MakeModel>
  requires std::invocable<MakeModel&>
auto model_desc(MakeModel make_model) {
  return ModelDesc<MakeModel>(std::move(make_model));
}

}  // namespace tp
