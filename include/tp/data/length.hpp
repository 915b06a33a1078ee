#pragma once
// items_per_pass(flow): how many items one pass of a dataflow yields, where it can tell: a sized
// range (examples, shuffle, a LibTorch dataset), or a view of tp's that knows it from its source
// (batch, shard). Streams and endless flows cannot tell (std::nullopt). What TrainOptions'
// default steps_per_epoch (one pass of the input) is computed from.
#include <concepts>
#include <cstdint>
#include <optional>

#include <range/v3/range/concepts.hpp>
#include <range/v3/range/primitives.hpp>

namespace tp::data {

template <class Flow>
std::optional<std::int64_t> items_per_pass(Flow& flow) {
  if constexpr (ranges::sized_range<Flow>) {
    return static_cast<std::int64_t>(ranges::size(flow));
  } else if constexpr (requires {
                         { flow.items_per_pass() } -> std::convertible_to<std::optional<std::int64_t>>;
                       }) {
    return flow.items_per_pass();
  } else {
    return std::nullopt;
  }
}

}  // namespace tp::data
