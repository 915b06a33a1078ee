#pragma once
// The tower concept family.
//
// A tower is one replica of the model on one device. A tower policy (tensorpack's ModelDesc)
// owns what is needed to build one:
//
//   make_model()                    a new model: a module handle (a `torch::nn::ModuleHolder`
//                                   such as the type TORCH_MODULE declares, or a
//                                   `std::shared_ptr` to a `torch::nn::Module`)
//   cost(ctx, model, batch)         the tower function: given the TowerContext, the replica and a
//                                   batch, returns the cost as a scalar torch::Tensor
//   make_optimizer(model)           an optimizer over the model's parameters: anything with
//                                   zero_grad() and step()
//
// Only make_model() is needed by every trainer. A run that uses the distribution policy's
// default step also needs the tower function and the optimizer (`trainable_tower`); a run with
// its own step (a GAN, k-means) may leave them out.
#include <concepts>
#include <memory>
#include <type_traits>

#include <torch/nn/module.h>
#include <torch/types.h>

#include <tp/tower_context.hpp>

namespace tp {

// A copyable handle to a torch::nn::Module.
template <class M>
concept module_handle = std::copy_constructible<M> && requires(M& m) {
  { *m } -> std::convertible_to<torch::nn::Module&>;
};

namespace detail {
template <class P>
concept has_make_model = requires(P& p) {
  { p.make_model() };
};
}  // namespace detail

// A tower policy: make_model() returns a new model as a module handle (concepts/tower.hpp says what
// else it may have).
template <class P>
concept tower_policy = detail::has_make_model<P> && module_handle<decltype(std::declval<P&>().make_model())>;

// The model type a tower policy builds.
template <tower_policy P>
using model_t = std::remove_cvref_t<decltype(std::declval<P&>().make_model())>;

namespace detail {
template <class P, class Model, class Batch>
concept has_tower_function = requires(P& p, const TowerContext& ctx, Model& model, const Batch& batch) {
  p.cost(ctx, model, batch);
};
template <class P, class Model, class Batch>
concept tower_function_returns_tensor = requires(P& p, const TowerContext& ctx, Model& model, const Batch& batch) {
  { p.cost(ctx, model, batch) } -> std::same_as<torch::Tensor>;
};
template <class P, class Model>
concept has_optimizer_factory = requires(P& p, Model& model) {
  { p.make_optimizer(model) };
};
}  // namespace detail

// An optimizer as the default step uses it.
template <class O>
concept optimizer = std::move_constructible<O> && requires(O& o) {
  o.zero_grad();
  o.step();
};

// The optimizer type a tower policy makes.
template <class P>
  requires detail::has_optimizer_factory<P, model_t<P>>
using optimizer_t = std::remove_cvref_t<decltype(std::declval<P&>().make_optimizer(std::declval<model_t<P>&>()))>;

// A tower policy whose tower function and optimizer the default step can use on `Batch`.
template <class P, class Batch>
concept trainable_tower =
    tower_policy<P> && detail::tower_function_returns_tensor<P, model_t<P>, Batch> &&
    detail::has_optimizer_factory<P, model_t<P>> &&
    optimizer<std::remove_cvref_t<decltype(std::declval<P&>().make_optimizer(std::declval<model_t<P>&>()))>>;

namespace detail {
// Each check returns whether its rules hold (see check_callback). A rule about a part is checked
// only once the rules it rests on hold: it could only repeat their error.
template <class P>
constexpr bool check_tower_policy() {
  static_assert(has_make_model<P>,
                "tp rule [tower_policy: make_model]: a tower policy must have `make_model()`; "
                "build one with tp::model_desc(make_model)");
  if constexpr (has_make_model<P>)
    static_assert(module_handle<decltype(std::declval<P&>().make_model())>,
                  "tp rule [tower_policy: module handle]: make_model() must return a handle to a "
                  "torch::nn::Module (a TORCH_MODULE holder or a std::shared_ptr<Module>)");
  return tower_policy<P>;
}

template <class P, class Batch>
constexpr bool check_trainable_tower() {
  if constexpr (!tower_policy<P>) {
    return false;  // check_tower_policy names the rule
  } else {
    using Model = model_t<P>;
    static_assert(has_tower_function<P, Model, Batch>,
                  "tp rule [tower_function: callable]: the tower function must be callable as "
                  "f(const tp::TowerContext&, Model&, const Batch&) with the model that "
                  "make_model() returns and the batch that the input policy produces");
    static_assert(!has_tower_function<P, Model, Batch> ||
                      tower_function_returns_tensor<P, Model, Batch>,
                  "tp rule [tower_function: returns tensor]: the tower function must return the "
                  "cost as a torch::Tensor (a scalar); a float or a pair is not a cost");
    static_assert(has_optimizer_factory<P, Model>,
                  "tp rule [tower_policy: optimizer]: the default step needs an optimizer; give "
                  "one with .optimizer([](Model& m) { return torch::optim::SGD(...); }) or pass "
                  "your own step to train()");
    if constexpr (has_optimizer_factory<P, Model>)
      static_assert(optimizer<optimizer_t<P>>,
                    "tp rule [optimizer: zero_grad and step]: the optimizer factory must return "
                    "the optimizer itself, movable and with zero_grad() and step() (not a "
                    "pointer to it)");
    return trainable_tower<P, Batch>;
  }
}
}  // namespace detail

}  // namespace tp
