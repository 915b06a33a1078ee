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
template <class D, class Tower>
constexpr bool check_distribution() {
  static_assert(builds_replicas<D, Tower>,
                "tp rule [distribution_policy: build]: a distribution policy must have "
                "`build(tower_policy)` returning the replicas it trains (see SingleDevice)");
  return true;
}
}  // namespace detail

}  // namespace tp
