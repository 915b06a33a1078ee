#pragma once
// A dataflow's position, so that a resumed run sees exactly the data the interrupted one would
// have seen, on the layout that saved it or another.
//
// Across passes, a dataflow's only state is how many passes each of its seeded views has
// started (a view's pass k is a pure function of its seed and k). save_state() collects those
// counters, outermost view first, walking from view to source through `base()` (our views and
// range-v3's have it); load_state() puts them back. Within a pass, an input policy counts the
// batches it has handed out, and where that is in the pass's global order: the datapoints
// consumed across all ranks (data/pass_position.hpp). An input restores a position by loading
// the pass counters and starting the pass at that place in the global order, which holds on any
// number of ranks and any batch size.
#include <concepts>
#include <cstdint>
#include <stdexcept>
#include <string>
#include <type_traits>
#include <vector>

namespace tp::data {

// A dataflow's state across passes: the number of passes each seeded view has started, outermost
// view first.
using dataflow_state = std::vector<std::uint64_t>;

// Where an input policy is in its dataflow: the dataflow's state before the current pass began,
// how many batches of that pass this process has consumed, and where that is in the pass's
// global order (data/pass_position.hpp): the datapoints every rank together has consumed, on
// how many ranks, in batches of how many.
struct position {
  dataflow_state flow;
  std::int64_t consumed = 0;
  std::int64_t datapoints = 0;
  int world_size = 1;
  std::int64_t batch = 1;
  friend bool operator==(const position&, const position&) = default;
};

// A view that can say how many passes it has started, and be told.
template <class V>
concept counts_passes = requires(V& v, const V& cv) {
  { cv.passes() } -> std::convertible_to<std::uint64_t>;
  v.set_passes(std::uint64_t{});
};

namespace detail {
// Whether V, or a view below it through base(), counts passes.
template <class V>
constexpr bool holds_pass_state() {
  if constexpr (counts_passes<V>) return true;
  else if constexpr (requires(V& v) { v.base(); }) return holds_pass_state<std::remove_cvref_t<decltype(std::declval<V&>().base())>>();
  else return false;
}
// Whether every view below V that counts passes is reached through base() returning references:
// a base() returning a copy hides what is below it from save_state and load_state.
template <class V>
constexpr bool reaches_pass_state() {
  if constexpr (requires(V& v) { v.base(); }) {
    using base_type = decltype(std::declval<V&>().base());
    if constexpr (std::is_lvalue_reference_v<base_type>) return reaches_pass_state<std::remove_cvref_t<base_type>>();
    else return !holds_pass_state<std::remove_cvref_t<base_type>>();
  } else {
    return true;
  }
}
}  // namespace detail

// A dataflow whose state a checkpoint can reach whole: no view that keeps a pass count sits
// below a view whose base() returns a copy (range-v3's take, for one). Input policies require
// it, so that a resume is never silently inexact.
template <class Flow>
concept state_reachable = detail::reaches_pass_state<Flow>();

namespace detail {
template <class V, class F>
void for_each_view(V& view, F&& f) {
  f(view);
  if constexpr (requires { view.base(); }) {
    if constexpr (std::is_lvalue_reference_v<decltype(view.base())>) for_each_view(view.base(), f);
  }
}
}  // namespace detail

// The dataflow's state: the pass counters of its seeded views, walking from view to source.
template <class Flow>
dataflow_state save_state(Flow& flow) {
  dataflow_state state;
  detail::for_each_view(flow, [&](auto& view) {
    if constexpr (counts_passes<std::remove_cvref_t<decltype(view)>>) state.push_back(view.passes());
  });
  return state;
}

// Puts a state from save_state back into a dataflow of the same views; throws if the number of
// counters differs.
template <class Flow>
void load_state(Flow& flow, const dataflow_state& state) {
  const auto expected = save_state(flow).size();
  if (state.size() != expected)
    throw std::invalid_argument("tp::data::load_state: the saved state holds " + std::to_string(state.size()) +
                                " pass counters but this dataflow has " + std::to_string(expected) +
                                " seeded views; it must be built the same way as the one that was saved");
  std::size_t i = 0;
  detail::for_each_view(flow, [&](auto& view) {
    if constexpr (counts_passes<std::remove_cvref_t<decltype(view)>>) view.set_passes(state[i++]);
  });
}

}  // namespace tp::data
