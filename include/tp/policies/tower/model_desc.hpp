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
#include <concepts>
#include <type_traits>
#include <utility>

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

  auto make_model() { return make_model_(); }

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
    return ModelDesc<MakeModel, F, MakeOptimizer>(std::move(make_model_), std::move(f), std::move(make_optimizer_));
  }
  template <class F>
  auto optimizer(F f) && {
    return ModelDesc<MakeModel, TowerFunction, F>(std::move(make_model_), std::move(tower_function_), std::move(f));
  }

 private:
  MakeModel make_model_;
  TowerFunction tower_function_;
  MakeOptimizer make_optimizer_;
};

template <class MakeModel>
  requires std::invocable<MakeModel&>
auto model_desc(MakeModel make_model) {
  return ModelDesc<MakeModel>(std::move(make_model));
}

}  // namespace tp
