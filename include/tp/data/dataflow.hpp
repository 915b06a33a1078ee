#pragma once
// Dataflows: ranges of datapoints composed with `|`, in range-v3's style. A dataflow may be
// iterated many times; each iteration is one pass over the data.
//
//   auto flow = tp::data::examples(images, labels)        // random access, one Example each
//             | ranges::views::transform(normalize)        // any range-v3 view composes
//             | tp::data::shuffle(seed)                    // a new seeded order every pass
//             | tp::data::batch(64);                       // stacked into one Example of 64
//
// Shuffling is reproducible: pass k of shuffle(seed) is the same permutation on every run and
// every platform (its own generator and Fisher-Yates, not std::shuffle, whose output the
// standard leaves to the implementation), and does not depend on how earlier passes were used.
#include <cstddef>
#include <cstdint>
#include <iterator>
#include <numeric>
#include <optional>
#include <stdexcept>
#include <string>
#include <tuple>
#include <type_traits>
#include <utility>
#include <vector>

#include <range/v3/iterator/default_sentinel.hpp>
#include <range/v3/range/access.hpp>
#include <range/v3/range/concepts.hpp>
#include <range/v3/range/primitives.hpp>
#include <range/v3/range/traits.hpp>
#include <range/v3/view/interface.hpp>
#include <range/v3/view/iota.hpp>
#include <range/v3/view/transform.hpp>
#include <torch/data/example.h>
#include <torch/types.h>

namespace tp::data {

// A random-access view of (data[i], target[i]) pairs; the tensors share their first dimension.
inline auto examples(torch::Tensor data, torch::Tensor target) {
  if (!data.defined() || !target.defined() || data.dim() == 0 || target.dim() == 0 ||
      data.size(0) != target.size(0))
    throw std::invalid_argument(
        "tp::data::examples: data and target must be tensors with the same first dimension (one "
        "row per example); got data " + (data.defined() ? c10::str(data.sizes()) : "undefined") +
        " and target " + (target.defined() ? c10::str(target.sizes()) : "undefined"));
  return ranges::views::iota(std::int64_t{0}, data.size(0)) |
         ranges::views::transform([data, target](std::int64_t i) {
           return torch::data::Example<>{data[i], target[i]};
         });
}

// ---------------------------------------------------------------------------------------------
// shuffle(seed)

namespace detail {
// SplitMix64: small, fast, and the same stream everywhere.
inline std::uint64_t splitmix64(std::uint64_t& state) noexcept {
  std::uint64_t z = (state += 0x9e3779b97f4a7c15ULL);
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
  return z ^ (z >> 31);
}

// The permutation of [0, n) used by pass `pass` of shuffle(seed).
inline std::vector<std::int64_t> permutation(std::int64_t n, std::uint64_t seed, std::uint64_t pass) {
  std::vector<std::int64_t> order(static_cast<std::size_t>(n));
  std::iota(order.begin(), order.end(), std::int64_t{0});
  std::uint64_t state = seed ^ (0xd1b54a32d192ed03ULL * (pass + 1));
  for (std::int64_t i = n - 1; i > 0; --i) {
    // Multiply-shift maps 64 random bits onto [0, i] with a bias below 2^-40 for any n here.
    const auto j = static_cast<std::int64_t>(
        (static_cast<unsigned __int128>(splitmix64(state)) * static_cast<std::uint64_t>(i + 1)) >> 64);
    std::swap(order[static_cast<std::size_t>(i)], order[static_cast<std::size_t>(j)]);
  }
  return order;
}
}  // namespace detail

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
  // Passes started so far.
  std::uint64_t passes() const noexcept { return passes_; }

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
// batch(n)

// Stacks datapoints along a new first dimension: tensors, Examples, and tuples of them.
struct collate_fn {
  torch::Tensor operator()(const std::vector<torch::Tensor>& items) const { return torch::stack(items); }

  template <class Data, class Target>
  torch::data::Example<Data, Target> operator()(const std::vector<torch::data::Example<Data, Target>>& items) const {
    std::vector<Data> data;
    std::vector<Target> target;
    data.reserve(items.size());
    target.reserve(items.size());
    for (const auto& item : items) {
      data.push_back(item.data);
      target.push_back(item.target);
    }
    return {(*this)(data), (*this)(target)};
  }
};

enum class remainder { keep, drop };

template <class Source, class Collate>
class batched_view : public ranges::view_base {
 public:
  using datapoint_type = ranges::range_value_t<Source>;
  using batch_type = std::remove_cvref_t<std::invoke_result_t<Collate&, const std::vector<datapoint_type>&>>;

  class iterator {
   public:
    using value_type = batch_type;
    using difference_type = std::ptrdiff_t;
    using iterator_concept = std::input_iterator_tag;

    iterator() = default;
    explicit iterator(batched_view* owner)
        : owner_(owner), position_(ranges::begin(owner->source_)), end_(ranges::end(owner->source_)) {
      fill();
    }
    const batch_type& operator*() const { return *current_; }
    iterator& operator++() {
      fill();
      return *this;
    }
    void operator++(int) { fill(); }
    friend bool operator==(const iterator& it, ranges::default_sentinel_t) { return !it.current_; }

   private:
    void fill() {
      std::vector<datapoint_type> items;
      items.reserve(static_cast<std::size_t>(owner_->size_));
      for (; position_ != end_ && static_cast<std::int64_t>(items.size()) < owner_->size_; ++position_)
        items.push_back(*position_);
      const bool full = static_cast<std::int64_t>(items.size()) == owner_->size_;
      if (items.empty() || (!full && owner_->remainder_ == remainder::drop)) current_.reset();
      else current_.emplace(owner_->collate_(items));
    }

    batched_view* owner_ = nullptr;
    ranges::iterator_t<Source> position_{};
    ranges::sentinel_t<Source> end_{};
    std::optional<batch_type> current_;
  };

  batched_view() = default;
  batched_view(Source source, std::int64_t size, remainder rest, Collate collate)
      : source_(std::move(source)), size_(size), remainder_(rest), collate_(std::move(collate)) {}

  iterator begin() { return iterator(this); }
  ranges::default_sentinel_t end() const { return {}; }

 private:
  Source source_;
  std::int64_t size_ = 1;
  remainder remainder_ = remainder::keep;
  Collate collate_;
};

template <class Collate = collate_fn>
struct batch {
  std::int64_t size;
  remainder rest;
  Collate collate;

  explicit batch(std::int64_t n, remainder r = remainder::keep, Collate c = {})
      : size(n), rest(r), collate(std::move(c)) {
    if (n <= 0) throw std::invalid_argument("tp::data::batch: the batch size must be > 0, got " + std::to_string(n));
  }

  template <class Source>
  friend auto operator|(Source&& source, batch b) {
    using S = std::remove_cvref_t<Source>;
    static_assert(ranges::input_range<S>, "tp::data::batch needs a range of datapoints on its left");
    return batched_view<S, Collate>(std::forward<Source>(source), b.size, b.rest, std::move(b.collate));
  }
};

}  // namespace tp::data
