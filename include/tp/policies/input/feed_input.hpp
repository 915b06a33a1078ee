#pragma once
// FeedInput: pulls the next batch from a dataflow in the training thread (tensorpack's
// FeedInput). When a pass over the dataflow ends, the next one starts: an epoch of training
// need not be a pass over the data.
#include <cstdint>
#include <memory>
#include <optional>
#include <stdexcept>
#include <utility>

#include <range/v3/range/access.hpp>
#include <range/v3/range/concepts.hpp>
#include <range/v3/range/traits.hpp>

namespace tp {

template <class Dataflow>
  requires ranges::input_range<Dataflow>
class FeedInput {
 public:
  explicit FeedInput(Dataflow dataflow)
      : dataflow_(std::make_unique<Dataflow>(std::move(dataflow))) {}

  ranges::range_value_t<Dataflow> next_batch() {
    if (!position_ || *position_ == *end_) start_pass();
    auto batch = **position_;
    ++*position_;
    return batch;
  }

  // Passes started so far (the first call to next_batch starts pass 1).
  std::int64_t passes() const noexcept { return passes_; }
  Dataflow& dataflow() noexcept { return *dataflow_; }

 private:
  void start_pass() {
    position_.emplace(ranges::begin(*dataflow_));
    end_.emplace(ranges::end(*dataflow_));
    ++passes_;
    if (*position_ == *end_)
      throw std::runtime_error(
          "tp::FeedInput: the dataflow gave no datapoint in pass " + std::to_string(passes_) +
          "; check that the dataset is not empty (and, with batch(n, drop_remainder), that it "
          "holds at least n datapoints)");
  }

  // On the heap so that the iterators stay valid when the input is moved into the trainer.
  std::unique_ptr<Dataflow> dataflow_;
  std::optional<ranges::iterator_t<Dataflow>> position_;
  std::optional<ranges::sentinel_t<Dataflow>> end_;
  std::int64_t passes_ = 0;
};

}  // namespace tp
