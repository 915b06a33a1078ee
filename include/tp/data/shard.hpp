#pragma once
// shard(rank, world_size): this process's share of a dataflow in a multi-process run, so that
// the ranks see disjoint data (tensorpack's and PyTorch's DistributedSampler idea). Rank r takes
// datapoints r, r + world_size, r + 2 world_size, ... of each pass. Put it after the shuffle
// (every rank shuffles alike, from the same seed, then takes its stride) and before batch:
//
//   examples(x, y) | shuffle(42) | shard(env.rank, env.world_size) | batch(64)
//
// With a sized source every rank gets the same number of datapoints, size / world_size (the
// last few are left out of that pass), so that no rank runs short. The view adds no state of
// its own: a resume restores the passes of the views beneath it (state.hpp).
//
// A pass can start part-way, at a place in the pass's global order (start_next_pass_at(g): the
// first g datapoints, which ranks of some earlier layout consumed, are left out): rank r then
// takes g + r, g + r + world_size, ... That is how a run resumed on another number of ranks goes
// on at exactly the next unseen datapoint (data/pass_position.hpp).
#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <iterator>
#include <optional>
#include <stdexcept>
#include <string>
#include <type_traits>
#include <utility>

#include <range/v3/iterator/default_sentinel.hpp>
#include <range/v3/range/access.hpp>
#include <range/v3/range/concepts.hpp>
#include <range/v3/range/primitives.hpp>
#include <range/v3/range/traits.hpp>

#include <tp/data/length.hpp>

namespace tp::data {

// What `flow | shard(rank, world_size)` yields: this rank's stride of each pass of the source.
template <class Source>
class sharded_view : public ranges::view_base {
  using base_iterator = ranges::iterator_t<Source>;
  using base_sentinel = ranges::sentinel_t<Source>;

 public:
  class iterator {
   public:
    using value_type = ranges::range_value_t<Source>;
    using difference_type = std::ptrdiff_t;
    using reference = value_type;
    using iterator_concept = std::input_iterator_tag;
    using iterator_category = std::input_iterator_tag;

    iterator() = default;
    iterator(base_iterator it, base_sentinel end, std::int64_t stride, std::optional<std::int64_t> limit)
        : it_(std::move(it)), end_(std::move(end)), stride_(stride), left_(limit) {}
    value_type operator*() const { return *it_; }
    iterator& operator++() {
      if (left_) --*left_;
      for (std::int64_t k = 0; k < stride_ && !(it_ == end_); ++k) ++it_;
      return *this;
    }
    void operator++(int) { ++*this; }
    friend bool operator==(const iterator& i, ranges::default_sentinel_t) { return i.it_ == i.end_ || (i.left_ && *i.left_ <= 0); }

   private:
    base_iterator it_{};
    base_sentinel end_{};
    std::int64_t stride_ = 1;
    std::optional<std::int64_t> left_;
  };

  sharded_view() = default;
  sharded_view(Source source, int rank, int world_size) : source_(std::move(source)), rank_(rank), world_size_(world_size) {}

  iterator begin() {
    pass_start_ = std::exchange(next_pass_start_, 0);
    auto it = ranges::begin(source_);
    auto end = ranges::end(source_);
    for (std::int64_t k = 0; k < pass_start_ + rank_ && !(it == end); ++k) ++it;
    std::optional<std::int64_t> limit;
    if constexpr (ranges::sized_range<Source>)
      limit = std::max<std::int64_t>(0, (static_cast<std::int64_t>(ranges::size(source_)) - pass_start_) / world_size_);
    return iterator(std::move(it), std::move(end), world_size_, limit);
  }
  ranges::default_sentinel_t end() const { return {}; }
  Source& base() noexcept { return source_; }
  int rank() const noexcept { return rank_; }
  int world_size() const noexcept { return world_size_; }
  // The next pass (begin()) leaves out the first `datapoints` of the global order; later passes
  // start at 0 again.
  void start_next_pass_at(std::int64_t datapoints) {
    if (datapoints < 0) throw std::invalid_argument("tp::data::shard: a pass cannot start at " + std::to_string(datapoints));
    next_pass_start_ = datapoints;
  }
  // Where the current pass started in the global order (0 unless start_next_pass_at said).
  std::int64_t pass_start() const noexcept { return pass_start_; }
  // This rank's items in one pass, when the source can tell its length (data/length.hpp): as
  // begin() takes them (a sized source in equal shares, the rest dropped).
  std::optional<std::int64_t> items_per_pass() {
    const auto items = data::items_per_pass(source_);
    if (!items) return std::nullopt;
    if constexpr (ranges::sized_range<Source>) return *items / world_size_;
    else return *items > rank_ ? (*items - rank_ + world_size_ - 1) / world_size_ : 0;
  }

 private:
  Source source_;
  int rank_ = 0, world_size_ = 1;
  std::int64_t next_pass_start_ = 0, pass_start_ = 0;
};

struct shard {
  int rank, world_size;
  shard(int r, int w) : rank(r), world_size(w) {
    if (w < 1) throw std::invalid_argument("tp::data::shard: world_size must be >= 1, got " + std::to_string(w));
    if (r < 0 || r >= w)
      throw std::invalid_argument("tp::data::shard: rank must be in [0, " + std::to_string(w) + "), got " + std::to_string(r));
  }

  template <class Source>
  friend auto operator|(Source&& source, shard s) {
    using S = std::remove_cvref_t<Source>;
    static_assert(ranges::input_range<S>, "tp::data::shard needs a range of datapoints on its left");
    return sharded_view<S>(std::forward<Source>(source), s.rank, s.world_size);
  }
};

}  // namespace tp::data
