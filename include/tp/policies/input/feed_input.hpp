#pragma once
// FeedInput: pulls the next batch from a dataflow in the training thread (tensorpack's
// FeedInput). When a pass over the dataflow ends, the next one starts: an epoch of training
// need not be a pass over the data.
#include <cstdint>
#include <memory>
#include <optional>
#include <stdexcept>
#include <string>
#include <utility>

#include <range/v3/range/access.hpp>
#include <range/v3/range/concepts.hpp>
#include <range/v3/range/traits.hpp>

#include <tp/batch.hpp>
#include <tp/data/length.hpp>
#include <tp/data/pass_position.hpp>
#include <tp/data/state.hpp>
#include <tp/precision.hpp>

namespace tp {

template <class Dataflow>
  requires ranges::input_range<Dataflow>
class FeedInput {
 public:
  static_assert(data::state_reachable<Dataflow>,
                "tp rule [input: dataflow state reachable]: a view of this dataflow returns its base() by copy, and a view "
                "below it keeps the pass count a resume needs (shuffle, a seeded augmentation); checkpoints could not reach it. "
                "Put that view above the seeded ones, or give it `auto& base()` returning a reference");
  explicit FeedInput(Dataflow dataflow) : dataflow_(std::make_unique<Dataflow>(std::move(dataflow))) {}

  ranges::range_value_t<Dataflow> next_batch() {
    // Advancing may make the next batch (and fail): do it only when that batch is asked for, so
    // that a failure never swallows a batch already made.
    if (advance_due_) {
      advance_due_ = false;
      ++position_;
    }
    if (!started_ || position_ == end_) start_pass();
    auto batch = *position_;
    advance_due_ = true;
    ++consumed_;
    if (channels_last_) return channels_last_batch(std::move(batch));
    return batch;
  }

  // Batches in one pass of the dataflow, where it can tell (data/length.hpp): what
  // steps_per_epoch defaults to.
  std::optional<std::int64_t> batches_per_pass() { return data::items_per_pass(*dataflow_); }

  // Batches in channels-last order (set by the trainer when the tower asks for it).
  void channels_last(bool on) noexcept { channels_last_ = on; }

  // Batches in pinned memory where the dataflow makes them so (decode_images | batch(n) decodes
  // into pinned buffers); StagingInput asks for it for a CUDA device, and pins the rest itself.
  void pin_memory(bool on) {
    if (on) detail::check_pinned_memory_available("tp::FeedInput::pin_memory");
    if constexpr (requires(Dataflow& d) { d.pin_memory(true); }) dataflow_->pin_memory(on);
  }

  // Where the next batch will come from; restore() goes back there, on this layout or another
  // (data/pass_position.hpp). A restore that throws changes nothing.
  data::position position() const {
    if (!started_) return data::position_in_pass(*dataflow_, data::save_state(*dataflow_), 0, 0);
    return data::position_in_pass(*dataflow_, pass_start_, pass_started_at_, consumed_);
  }
  void restore(const data::position& where) {
    const auto skip = data::restore_flow(*dataflow_, where);
    advance_due_ = false;
    start_pass(/*may_be_empty=*/true);  // a pass restored at its very end is empty: the next starts
    for (; consumed_ < skip; ++consumed_, ++position_)
      if (position_ == end_)
        throw std::invalid_argument("tp::FeedInput::restore: the pass ended after " + std::to_string(consumed_) +
                                    " batches, before the saved position (" + std::to_string(skip) +
                                    "); the dataflow is not the one the position was saved from");
  }

  // Passes started so far (the first call to next_batch starts pass 1).
  std::int64_t passes() const noexcept { return passes_; }
  Dataflow& dataflow() noexcept { return *dataflow_; }

 private:
  void start_pass(bool may_be_empty = false) {
    pass_start_ = data::save_state(*dataflow_);
    position_ = ranges::begin(*dataflow_);
    pass_started_at_ = data::pass_start(*dataflow_);
    end_ = ranges::end(*dataflow_);
    started_ = true;
    consumed_ = 0;
    ++passes_;
    if (position_ == end_ && !may_be_empty)
      throw std::runtime_error(
          "tp::FeedInput: the dataflow gave no datapoint in pass " + std::to_string(passes_) +
          "; check that the dataset is not empty (and, with batch(n, drop_remainder), that it "
          "holds at least n datapoints)");
  }

  // On the heap so that the iterators stay valid when the input is moved into the trainer.
  std::unique_ptr<Dataflow> dataflow_;
  // Plain members and a flag rather than std::optionals: g++ 12 warned, wrongly, that an
  // optional iterator's parts may be used uninitialized (-Wmaybe-uninitialized) in users' builds.
  ranges::iterator_t<Dataflow> position_{};
  ranges::sentinel_t<Dataflow> end_{};
  bool started_ = false;
  bool channels_last_ = false;
  data::dataflow_state pass_start_;
  std::int64_t consumed_ = 0;
  std::int64_t pass_started_at_ = 0;  // in the pass's global order (a resumed pass starts part-way)
  std::int64_t passes_ = 0;
  bool advance_due_ = false;
};

}  // namespace tp
