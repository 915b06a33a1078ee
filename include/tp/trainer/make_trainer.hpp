#pragma once
// tp::make_trainer(input, tower, distribution, options, callbacks...): a trainer, with callback
// packs (tp::callbacks(...), tp::default_callbacks(logdir)) flattened into its callbacks. The
// trainer is neither copied nor moved: it is returned as it is built (C++17's guaranteed copy
// elision), so `auto trainer = tp::make_trainer(...)` works for a type that cannot move.
#include <tuple>
#include <type_traits>
#include <utility>

#include <tp/callback_pack.hpp>
#include <tp/train_options.hpp>
#include <tp/trainer.hpp>

namespace tp {

namespace detail {
template <class C>
std::tuple<C> callbacks_as_tuple(C&& callback) {
  return std::tuple<C>(std::move(callback));
}
template <class... Cs>
std::tuple<Cs...> callbacks_as_tuple(callback_pack<Cs...>&& pack) {
  return std::move(pack.callbacks);
}
}  // namespace detail

template <class Input, class Tower, class Distribution, class... Callbacks>
auto make_trainer(Input input, Tower tower, Distribution distribution, TrainOptions options, Callbacks... callbacks) {
  return std::apply(
      [&](auto&&... flat) {
        return Trainer<Input, Tower, Distribution, std::remove_cvref_t<decltype(flat)>...>(
            std::move(input), std::move(tower), std::move(distribution), std::move(options), std::move(flat)...);
      },
      std::tuple_cat(detail::callbacks_as_tuple(std::move(callbacks))...));
}

}  // namespace tp
