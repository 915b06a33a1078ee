#pragma once
// tp::callbacks(a, b, ...): callbacks that go into a trainer together, in this order (what
// tp::default_callbacks returns). tp::make_trainer (trainer/make_trainer.hpp) flattens a pack
// into the trainer's callbacks. A header of its own, so that make_trainer does not pull in the
// default set's monitors.
#include <tuple>
#include <utility>

namespace tp {

// What tp::callbacks(...) returns: the callbacks in their order, which tp::make_trainer flattens
// into the trainer's own.
template <class... Callbacks>
struct callback_pack {
  std::tuple<Callbacks...> callbacks;
};
template <class... Callbacks>
callback_pack<Callbacks...> callbacks(Callbacks... callbacks) {
  return {{std::move(callbacks)...}};
}

}  // namespace tp
