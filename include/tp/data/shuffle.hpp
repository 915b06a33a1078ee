#pragma once
// shuffle(seed): every pass of a random-access source in a new order.
// shuffle_buffer(size, seed): a local shuffle of any range, through a buffer of `size`.
//
// Reproducible: pass k of shuffle(seed) is the same permutation on every run and every platform
// (its own generator and Fisher-Yates, not std::shuffle, whose output the standard leaves to
// the implementation), and does not depend on how earlier passes were used. Its state across
// passes is the number of passes started (see state.hpp).
#include <cstddef>
#include <concepts>
#include <cstdint>
#include <iterator>
#include <optional>
#include <stdexcept>
#include <string>
#include <numeric>
#include <type_traits>
#include <utility>
#include <vector>

#include <range/v3/iterator/default_sentinel.hpp>
#include <range/v3/range/access.hpp>
#include <range/v3/range/concepts.hpp>
#include <range/v3/range/primitives.hpp>
#include <range/v3/range/traits.hpp>
#include <range/v3/view/interface.hpp>

#include <tp/data/length.hpp>
#include <tp/data/random.hpp>
#include <tp/data/state.hpp>

namespace tp::data {

// What `flow | shuffle(seed)` yields: each pass of the random-access source in a new order, the
// same on every run.
template <class Source>
class shuffled_view : public ranges::view_base {
  static_assert(ranges::random_access_range<Source> && ranges::sized_range<Source>,
                "tp::data::shuffle needs a random-access, sized source (e.g. tp::data::examples)");

 public:
  class iterator {
   public:
    using value_type = ranges::range_value_t<Source>;
    using difference_type = std::ptrdiff_t;
    using reference = value_type;
    using iterator_concept = std::forward_iterator_tag;
    using iterator_category = std::input_iterator_tag;

    iterator() = default;
    iterator(shuffled_view* owner, std::size_t position) : owner_(owner), position_(position) {}
    value_type operator*() const { return ranges::begin(owner_->source_)[owner_->order_[position_]]; }
    iterator& operator++() {
      ++position_;
      return *this;
    }
    iterator operator++(int) {
      auto before = *this;
      ++position_;
      return before;
    }
    friend bool operator==(const iterator& a, const iterator& b) { return a.position_ == b.position_; }

   private:
    shuffled_view* owner_ = nullptr;
    std::size_t position_ = 0;
  };

  shuffled_view() = default;
  shuffled_view(Source source, std::uint64_t seed) : source_(std::move(source)), seed_(seed) {}

  // Starts the next pass, in its own order.
  iterator begin() {
    order_ = detail::permutation(static_cast<std::int64_t>(ranges::size(source_)), seed_, passes_++);
    return iterator(this, 0);
  }
  iterator end() { return iterator(this, static_cast<std::size_t>(ranges::size(source_))); }
  std::size_t size() const { return static_cast<std::size_t>(ranges::size(source_)); }
  Source& base() noexcept { return source_; }
  // Passes started so far: the view's whole state across passes (see state.hpp).
  std::uint64_t passes() const noexcept { return passes_; }
  void set_passes(std::uint64_t passes) noexcept { passes_ = passes; }

 private:
  Source source_;
  std::uint64_t seed_ = 0;
  std::uint64_t passes_ = 0;
  std::vector<std::int64_t> order_;
};

struct shuffle {
  std::uint64_t seed;
  explicit shuffle(std::uint64_t s) : seed(s) {}

  template <class Source>
  friend auto operator|(Source&& source, shuffle s) {
    return shuffled_view<std::remove_cvref_t<Source>>(std::forward<Source>(source), s.seed);
  }
};

// ---------------------------------------------------------------------------------------------
// shuffle_buffer(size, seed): a local shuffle of any input range (tensorpack's
// LocallyShuffleData). It holds `size` datapoints and hands out a random one of them each time,
// refilling from the source; a datapoint moves at most about `size` places from where it was.

// What `flow | shuffle_buffer(size, seed)` yields: the source's datapoints, each handed out from a
// buffer of `size` at random.
template <class Source>
class buffer_shuffled_view : public ranges::view_base {
 public:
  using value_type = ranges::range_value_t<Source>;

  class iterator {
   public:
    using value_type = buffer_shuffled_view::value_type;
    using difference_type = std::ptrdiff_t;
    using iterator_concept = std::input_iterator_tag;

    iterator() = default;
    explicit iterator(buffer_shuffled_view* owner)
        : owner_(owner),
          position_(ranges::begin(owner->source_)),
          end_(ranges::end(owner->source_)),
          random_(detail::pass_state(owner->seed_, owner->passes_++)) {
      for (; position_ != end_ && buffer_.size() < owner_->size_; ++position_) buffer_.push_back(*position_);
      pick();
    }
    const value_type& operator*() const { return *current_; }
    iterator& operator++() {
      pick();
      return *this;
    }
    void operator++(int) { pick(); }
    friend bool operator==(const iterator& it, ranges::default_sentinel_t) { return !it.current_; }

   private:
    // Takes a random datapoint out of the buffer and puts the source's next one in its place.
    void pick() {
      if (buffer_.empty()) {
        current_.reset();
        return;
      }
      const auto j = static_cast<std::size_t>(detail::uniform_below(random_, static_cast<std::int64_t>(buffer_.size())));
      current_.emplace(std::move(buffer_[j]));
      if (position_ != end_) {
        buffer_[j] = *position_;
        ++position_;
      } else {
        buffer_[j] = std::move(buffer_.back());
        buffer_.pop_back();
      }
    }

    buffer_shuffled_view* owner_ = nullptr;
    ranges::iterator_t<Source> position_{};
    ranges::sentinel_t<Source> end_{};
    std::uint64_t random_ = 0;
    std::vector<value_type> buffer_;
    std::optional<value_type> current_;
  };

  buffer_shuffled_view() = default;
  buffer_shuffled_view(Source source, std::size_t size, std::uint64_t seed)
      : source_(std::move(source)), size_(size), seed_(seed) {}

  iterator begin() { return iterator(this); }
  ranges::default_sentinel_t end() const { return {}; }
  Source& base() noexcept { return source_; }
  std::uint64_t passes() const noexcept { return passes_; }
  void set_passes(std::uint64_t passes) noexcept { passes_ = passes; }
  // As many as the source's, where it can tell (data/length.hpp): a stream such as tar_shards.
  std::optional<std::int64_t> items_per_pass() { return data::items_per_pass(source_); }

 private:
  Source source_;
  std::size_t size_ = 1;
  std::uint64_t seed_ = 0;
  std::uint64_t passes_ = 0;
};

// shuffle_buffer(size, seed): a local shuffle of any range through a buffer of `size` (> 0)
// datapoints (see buffer_shuffled_view).
struct shuffle_buffer {
  std::size_t size;
  std::uint64_t seed;
  shuffle_buffer(std::int64_t buffer_size, std::uint64_t s) : size(static_cast<std::size_t>(buffer_size)), seed(s) {
    if (buffer_size <= 0)
      throw std::invalid_argument("tp::data::shuffle_buffer: the buffer must hold at least one datapoint, got " +
                                  std::to_string(buffer_size));
  }

  template <class Source>
  friend auto operator|(Source&& source, shuffle_buffer s) {
    static_assert(ranges::input_range<std::remove_cvref_t<Source>>, "tp::data::shuffle_buffer needs a range on its left");
    return buffer_shuffled_view<std::remove_cvref_t<Source>>(std::forward<Source>(source), s.size, s.seed);
  }
};

}  // namespace tp::data
