#pragma once
// Where a pass is in its global order: how many of its datapoints every rank together has
// consumed. A position kept so holds on any layout, which a count of one rank's batches does
// not: a run resumed on another number of ranks or another batch size goes on at exactly the
// next unseen datapoint (DeepSpeed's universal checkpoints reshard on load for the same reason).
//
// The global order is the order of the views beneath shard(rank, world_size): every rank
// shuffles alike and takes its stride (data/shard.hpp). So, walking a dataflow from the input
// down to its shard:
//   - batch(n) views above the shard make one consumed item n datapoints;
//   - the shard says the world size, and where the current pass started (a resumed pass starts
//     part-way: shard.start_next_pass_at);
//   - a seeded view above the shard (a shuffle after shard) makes each rank's order depend on
//     the number of ranks: such a pass has no global order to carry to another world size. A
//     view that counts passes only to seed what it does to each datapoint in its place says so
//     with keeps_order() (decode_images), and leaves the global order alone;
//   - a shard view may judge a position itself (a source that is its own shard: tar_shards):
//     check_movable(where) refuses what it cannot follow, go_to(where) goes there.
// A dataflow without a shard is one rank's whole order (world size 1).
#include <cstdint>
#include <optional>
#include <string>
#include <type_traits>

#include <tp/data/state.hpp>

namespace tp::data {

// How a dataflow's items map to the pass's global order: whether it is sharded and over how many
// ranks, and how many datapoints one item holds.
struct pass_layout {
  bool sharded = false;
  int world_size = 1;
  std::int64_t datapoints_per_item = 1;  // per item the input consumes (a batch of them)
  bool shuffled_per_rank = false;        // a seeded view sits above the shard
};

namespace detail {
template <class V>
concept shard_view = requires(V& v, const V& cv) {
  { cv.world_size() } -> std::convertible_to<int>;
  { cv.pass_start() } -> std::convertible_to<std::int64_t>;
  v.start_next_pass_at(std::int64_t{});
};
template <class V>
concept batch_view = requires(const V& v) {
  { v.batch_size() } -> std::convertible_to<std::int64_t>;
};
template <class V>
bool keeps_order(const V& v) {
  if constexpr (requires { { v.keeps_order() } -> std::convertible_to<bool>; }) return v.keeps_order();
  else return false;
}

// Calls f(shard) on the first shard view, if any, and g(view) on every view above it.
template <class Flow, class OnShard, class Above>
void walk_to_shard(Flow& flow, OnShard&& on_shard, Above&& above) {
  bool below = false;
  for_each_view(flow, [&](auto& view) {
    using V = std::remove_cvref_t<decltype(view)>;
    if (below) return;
    if constexpr (shard_view<V>) {
      below = true;
      on_shard(view);
    } else {
      above(view);
    }
  });
}
}  // namespace detail

// The pass layout of a dataflow, found by walking its views down to its shard.
template <class Flow>
pass_layout pass_layout_of(Flow& flow) {
  pass_layout layout;
  bool seeded_above = false;  // per rank only if a shard is found beneath it
  detail::walk_to_shard(
      flow,
      [&](auto& shard) {
        layout.sharded = true;
        layout.world_size = shard.world_size();
        layout.shuffled_per_rank = seeded_above;
      },
      [&](auto& view) {
        using V = std::remove_cvref_t<decltype(view)>;
        if constexpr (detail::batch_view<V>) layout.datapoints_per_item *= view.batch_size();
        if constexpr (counts_passes<V>) seeded_above = seeded_above || !detail::keeps_order(view);
      });
  return layout;
}

// Where the current pass started in the global order (0 without a shard).
template <class Flow>
std::int64_t pass_start(Flow& flow) {
  std::int64_t start = 0;
  detail::walk_to_shard(flow, [&](auto& shard) { start = shard.pass_start(); }, [](auto&) {});
  return start;
}

// The position of an input that has consumed `items` of the pass since it started (pass_start).
template <class Flow>
position position_in_pass(Flow& flow, dataflow_state pass_counters, std::int64_t pass_started_at, std::int64_t items) {
  const auto layout = pass_layout_of(flow);
  return {std::move(pass_counters), items, pass_started_at + items * layout.datapoints_per_item * layout.world_size, layout.world_size,
          layout.datapoints_per_item};
}

// Throws std::invalid_argument saying why `where` cannot be carried to this dataflow (its layout
// differs from the one that saved it in a way the dataflow cannot follow). Changes nothing.
template <class Flow>
void check_movable(Flow& flow, const position& where) {
  const auto here = pass_layout_of(flow);
  auto refuse = [](const std::string& why) { throw std::invalid_argument(why); };
  detail::walk_to_shard(flow, [&](auto& shard) {
    if constexpr (requires { shard.check_movable(where); }) shard.check_movable(where);
  }, [](auto&) {});
  if (here.shuffled_per_rank) {
    if (here.world_size != where.world_size)
      refuse("its dataflow shuffles after shard(rank, world_size), so each rank's order depends on the number of ranks; shuffle "
             "before shard (every rank shuffles alike, then takes its stride) to resume on another number of them");
    if (where.consumed * where.batch % here.datapoints_per_item != 0)
      refuse("each rank has consumed " + std::to_string(where.consumed * where.batch) + " datapoints of its own shuffled share, not a whole "
             "number of batches of " + std::to_string(here.datapoints_per_item));
  } else if (!here.sharded && where.datapoints % here.datapoints_per_item != 0) {
    refuse("the pass is " + std::to_string(where.datapoints) + " datapoints in, not a whole number of batches of " +
           std::to_string(here.datapoints_per_item) + ", and its dataflow has no shard view to start a pass part-way; add "
           "shard(env.rank, env.world_size) after the shuffle");
  }
}

// Makes the next pass go on at `where` (check_movable first): a sharded dataflow starts it at
// where.datapoints of the global order; otherwise the input skips the items this returns.
template <class Flow>
std::int64_t go_to(Flow& flow, const position& where) {
  const auto here = pass_layout_of(flow);
  if (here.shuffled_per_rank) return where.consumed * where.batch / here.datapoints_per_item;
  if (!here.sharded) return where.datapoints / here.datapoints_per_item;
  detail::walk_to_shard(flow, [&](auto& shard) {
    if constexpr (requires { shard.go_to(where); }) shard.go_to(where);
    else shard.start_next_pass_at(where.datapoints);
  }, [](auto&) {});
  return 0;
}

// What an input's restore(where) does to its dataflow before its next pass: checks that `where`
// can be carried here, loads the dataflow's state (seeds, pass counts), and makes the next pass
// go on there. Returns the items the input still skips (go_to). Throws, changing nothing, when
// `where` cannot be carried.
template <class Flow>
std::int64_t restore_flow(Flow& flow, const position& where) {
  check_movable(flow, where);
  load_state(flow, where.flow);
  return go_to(flow, where);
}

}  // namespace tp::data
