#pragma once
// The distribution concept family.
//
// A distribution policy says how towers turn their gradients into one update. It is a small
// value (devices, options) whose `build(tower_policy)` creates the replicas: one model per tower
// and the optimizer state the policy needs. The built replicas give:
//
//   main_model()                the main tower's model (what callbacks read and savers save)
//   run_step(tower, input)      the default step: every tower pulls its own batch, computes its
//                               cost, and the policy makes one update; returns the main tower's
//                               cost (the trainer detaches it when it is read)
//
// Level 1: `detail::builds_replicas<D, Tower>`; level 2: `distribution_policy<D, Tower>` (the
// replicas expose a main model) and `stepping_distribution<D, Tower, Input>` (they can also run
// the default step on that input).
#include <concepts>
#include <utility>

#include <torch/types.h>

#include <tp/concepts/input.hpp>
#include <tp/concepts/tower.hpp>

namespace tp::detail {
template <class D, class Tower>
concept builds_replicas = requires(D& d, Tower& tower) {
  { d.build(tower) };
};
}  // namespace tp::detail

namespace tp {

template <class D, class Tower>
using replicas_t = std::remove_cvref_t<decltype(std::declval<D&>().build(std::declval<Tower&>()))>;

template <class D, class Tower>
concept distribution_policy = detail::builds_replicas<D, Tower> && requires(replicas_t<D, Tower>& r) {
  { r.main_model() } -> module_handle;
};

template <class D, class Tower, class Input>
concept stepping_distribution =
    distribution_policy<D, Tower> && requires(replicas_t<D, Tower>& r, Tower& tower, Input& input) {
      { r.run_step(tower, input) } -> std::same_as<torch::Tensor>;
    };

namespace detail {
// replicas_t, formed only where std::conditional_t picks it (a trainer whose parts break a rule
// holds a placeholder instead).
template <class D, class Tower>
struct replicas_of {
  using type = replicas_t<D, Tower>;
};

// Each check returns whether its rules hold (see check_callback), and checks a rule only once
// the rules it rests on hold.
template <class D, class Tower>
constexpr bool check_distribution() {
  if constexpr (!tower_policy<Tower>) {
    return false;  // check_tower_policy names the rule
  } else {
    static_assert(builds_replicas<D, Tower>,
                  "tp rule [distribution_policy: build]: a distribution policy must have "
                  "`build(tower_policy)` returning the replicas it trains (see SingleDevice)");
    if constexpr (builds_replicas<D, Tower>)
      static_assert(distribution_policy<D, Tower>,
                    "tp rule [distribution_policy: main_model]: the replicas that build() returns "
                    "must have main_model(), returning the main tower's model as a module handle");
    return distribution_policy<D, Tower>;
  }
}

// The rules the default step (trainer.train() with no step) rests on.
template <class D, class Tower, class Input>
constexpr bool check_default_step() {
  if constexpr (!input_policy<Input> || !check_distribution<D, Tower>()) {
    return false;  // check_input or check_distribution names the rule
  } else if constexpr (!check_trainable_tower<Tower, batch_t<Input>>()) {
    return false;
  } else {
    static_assert(stepping_distribution<D, Tower, Input>,
                  "tp rule [distribution_policy: run_step]: this distribution policy has no "
                  "default step for this tower and input; pass your own step to train()");
    return stepping_distribution<D, Tower, Input>;
  }
}
}  // namespace detail

}  // namespace tp
