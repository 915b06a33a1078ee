#pragma once
// batch(n): groups n consecutive datapoints into one batch (stacked tensors by default), keeping
// or dropping a last, smaller batch.
#include <cstddef>
#include <concepts>
#include <cstdint>
#include <optional>
#include <stdexcept>
#include <string>
#include <type_traits>
#include <utility>
#include <vector>

#include <range/v3/iterator/default_sentinel.hpp>
#include <range/v3/range/access.hpp>
#include <range/v3/range/concepts.hpp>
#include <range/v3/range/traits.hpp>
#include <range/v3/view/interface.hpp>
#include <torch/data/example.h>
#include <torch/types.h>

#include <tp/data/length.hpp>

namespace tp::data {

namespace detail {

// Memory made to be batched in place (decode_images writes a batch's images into one buffer):
// the context of its DataPtr derives from batch_memory, and free_batch_memory is its deleter.
// That is how collate_fn tells it from a user's tensors, whose rows it copies, so that a batch
// never aliases the data it came from.
struct batch_memory {
  virtual ~batch_memory() = default;
};
inline void free_batch_memory(void* context) { delete static_cast<batch_memory*>(context); }

}  // namespace detail

// Stacks datapoints along a new first dimension: tensors, Examples, and tuples of them. Tensors
// that lie one after the other in memory made to be batched in place (detail::batch_memory)
// become a view of it: nothing is copied.
struct collate_fn {
  torch::Tensor operator()(const std::vector<torch::Tensor>& items) const {
    if (const auto view = adjacent(items); view.defined()) return view;
    return torch::stack(items);
  }

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

 private:
  // [n, ...] over the items' own memory when it was made to be batched in place and they are
  // contiguous tensors of one type and sizes, each starting where the one before it ends;
  // undefined otherwise.
  static torch::Tensor adjacent(const std::vector<torch::Tensor>& items) {
    if (items.empty() || !items[0].defined() || !items[0].has_storage() || !items[0].is_contiguous() ||
        items[0].storage().data_ptr().get_deleter() != &detail::free_batch_memory)
      return {};
    const auto& first = items[0];
    const auto bytes = static_cast<std::ptrdiff_t>(first.nbytes());
    const auto* start = static_cast<const char*>(first.data_ptr());
    for (std::size_t i = 1; i < items.size(); ++i) {
      const auto& t = items[i];
      if (!t.defined() || !t.has_storage() || !t.storage().is_alias_of(first.storage()) || t.scalar_type() != first.scalar_type() ||
          t.sizes() != first.sizes() || !t.is_contiguous() || static_cast<const char*>(t.data_ptr()) != start + bytes * std::ptrdiff_t(i))
        return {};
    }
    std::vector<std::int64_t> sizes{static_cast<std::int64_t>(items.size())}, strides{first.numel()};
    sizes.insert(sizes.end(), first.sizes().begin(), first.sizes().end());
    strides.insert(strides.end(), first.strides().begin(), first.strides().end());
    return first.as_strided(sizes, strides);
  }
};

// What batch(n) does with the last datapoints of a pass when fewer than n are left: a smaller last
// batch, or none.
enum class remainder { keep, drop };

// What `flow | batch(n)` yields: the source's datapoints n at a time, each group collated into one
// batch.
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
    // Advances the source only when its next datapoint is needed: advancing may compute that
    // datapoint (a parallel_map below), and a failure there must not cost this batch.
    void fill() {
      if constexpr (std::is_same_v<Collate, collate_fn> &&
                    requires(ranges::iterator_t<Source>& it) { { it.whole_batch(std::int64_t{}) } -> std::same_as<std::optional<batch_type>>; }) {
        // A source that made the next batch whole (decode_images) hands it over as it is.
        if (advance_due_) {
          advance_due_ = false;
          ++position_;
        }
        if (position_ == end_) return current_.reset();
        if (auto whole = position_.whole_batch(owner_->size_)) {
          current_ = std::move(whole);
          advance_due_ = true;
          return;
        }
      }
      std::vector<datapoint_type> items;
      items.reserve(static_cast<std::size_t>(owner_->size_));
      while (static_cast<std::int64_t>(items.size()) < owner_->size_) {
        if (advance_due_) {
          advance_due_ = false;
          ++position_;
        }
        if (position_ == end_) break;
        items.push_back(*position_);
        advance_due_ = true;
      }
      const bool full = static_cast<std::int64_t>(items.size()) == owner_->size_;
      if (items.empty() || (!full && owner_->remainder_ == remainder::drop)) current_.reset();
      else current_.emplace(owner_->collate_(items));
    }

    batched_view* owner_ = nullptr;
    ranges::iterator_t<Source> position_{};
    ranges::sentinel_t<Source> end_{};
    bool advance_due_ = false;
    std::optional<batch_type> current_;
  };

  batched_view() = default;
  batched_view(Source source, std::int64_t size, remainder rest, Collate collate)
      : source_(std::move(source)), size_(size), remainder_(rest), collate_(std::move(collate)) {}

  iterator begin() { return iterator(this); }
  ranges::default_sentinel_t end() const { return {}; }
  Source& base() noexcept { return source_; }
  std::int64_t batch_size() const noexcept { return size_; }
  // Batches in pinned memory, where the source makes them in place (decode_images; QueueInput
  // pins the others on its thread).
  void pin_memory(bool on)
    requires requires(Source& s) { s.pin_memory(true); }
  {
    source_.pin_memory(on);
  }
  // Batches in one pass, when the source can tell its length (data/length.hpp).
  std::optional<std::int64_t> items_per_pass() {
    const auto items = data::items_per_pass(source_);
    if (!items) return std::nullopt;
    return remainder_ == remainder::keep ? (*items + size_ - 1) / size_ : *items / size_;
  }

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
    batched_view<S, Collate> view(std::forward<Source>(source), b.size, b.rest, std::move(b.collate));
    if constexpr (std::is_same_v<Collate, collate_fn> && requires(S& s) { s.batch_in_place(std::int64_t{}); })
      view.base().batch_in_place(b.size);  // decode_images: the examples of a batch land in one buffer
    return view;
  }
};

}  // namespace tp::data
