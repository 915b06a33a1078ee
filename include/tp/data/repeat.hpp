#pragma once
// repeat(n): one pass is n passes of the source (each a new pass of it: a shuffle below gives a
// new order each time). take(n): one pass is the first n datapoints of a pass of the source.
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
#include <range/v3/range/traits.hpp>
#include <range/v3/view/interface.hpp>

namespace tp::data {

// What `flow | repeat(n)` yields: n passes of the source as one pass.
template <class Source>
class repeated_view : public ranges::view_base {
 public:
  using value_type = ranges::range_value_t<Source>;

  class iterator {
   public:
    using value_type = repeated_view::value_type;
    using difference_type = std::ptrdiff_t;
    using iterator_concept = std::input_iterator_tag;

    iterator() = default;
    explicit iterator(repeated_view* owner) : owner_(owner) { restart(); }
    decltype(auto) operator*() const { return **position_; }
    iterator& operator++() {
      ++*position_;
      if (*position_ == *end_) restart();
      return *this;
    }
    void operator++(int) { ++*this; }
    friend bool operator==(const iterator& it, ranges::default_sentinel_t) { return !it.position_; }

   private:
    // Starts the next pass of the source, or ends when n passes are done or one is empty.
    void restart() {
      position_.reset();
      end_.reset();
      if (started_ == owner_->times_) return;
      ++started_;
      position_.emplace(ranges::begin(owner_->source_));
      end_.emplace(ranges::end(owner_->source_));
      if (*position_ == *end_) position_.reset();
    }

    repeated_view* owner_ = nullptr;
    std::int64_t started_ = 0;
    std::optional<ranges::iterator_t<Source>> position_;
    std::optional<ranges::sentinel_t<Source>> end_;
  };

  repeated_view() = default;
  repeated_view(Source source, std::int64_t times) : source_(std::move(source)), times_(times) {}
  iterator begin() { return iterator(this); }
  ranges::default_sentinel_t end() const { return {}; }
  Source& base() noexcept { return source_; }

 private:
  Source source_;
  std::int64_t times_ = 1;
};

struct repeat {
  std::int64_t times;
  explicit repeat(std::int64_t n) : times(n) {
    if (n <= 0) throw std::invalid_argument("tp::data::repeat: the count must be > 0, got " + std::to_string(n));
  }
  template <class Source>
  friend auto operator|(Source&& source, repeat r) {
    static_assert(ranges::input_range<std::remove_cvref_t<Source>>, "tp::data::repeat needs a range on its left");
    return repeated_view<std::remove_cvref_t<Source>>(std::forward<Source>(source), r.times);
  }
};

// What `flow | take(n)` yields: the first n datapoints of each pass of the source.
template <class Source>
class taken_view : public ranges::view_base {
 public:
  using value_type = ranges::range_value_t<Source>;

  class iterator {
   public:
    using value_type = taken_view::value_type;
    using difference_type = std::ptrdiff_t;
    using iterator_concept = std::input_iterator_tag;

    iterator() = default;
    explicit iterator(taken_view* owner)
        : position_(ranges::begin(owner->source_)), end_(ranges::end(owner->source_)), left_(owner->count_) {}
    decltype(auto) operator*() const { return *position_; }
    iterator& operator++() {
      --left_;
      if (left_ > 0) ++position_;  // never read past the n-th datapoint
      return *this;
    }
    void operator++(int) { ++*this; }
    friend bool operator==(const iterator& it, ranges::default_sentinel_t) { return it.left_ == 0 || it.position_ == it.end_; }

   private:
    ranges::iterator_t<Source> position_{};
    ranges::sentinel_t<Source> end_{};
    std::int64_t left_ = 0;
  };

  taken_view() = default;
  taken_view(Source source, std::int64_t count) : source_(std::move(source)), count_(count) {}
  iterator begin() { return iterator(this); }
  ranges::default_sentinel_t end() const { return {}; }
  Source& base() noexcept { return source_; }

 private:
  Source source_;
  std::int64_t count_ = 0;
};

// take(n): one pass is the first n (> 0) datapoints of a pass of the source.
struct take {
  std::int64_t count;
  explicit take(std::int64_t n) : count(n) {
    if (n <= 0) throw std::invalid_argument("tp::data::take: the count must be > 0, got " + std::to_string(n));
  }
  template <class Source>
  friend auto operator|(Source&& source, take t) {
    static_assert(ranges::input_range<std::remove_cvref_t<Source>>, "tp::data::take needs a range on its left");
    return taken_view<std::remove_cvref_t<Source>>(std::forward<Source>(source), t.count);
  }
};

}  // namespace tp::data
