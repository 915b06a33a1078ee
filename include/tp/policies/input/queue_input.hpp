#pragma once
// QueueInput: a background thread runs the dataflow and keeps a bounded queue of batches
// filled; the step pops (tensorpack's QueueInput). Data work then overlaps with the step: a
// step costs max(data, compute) rather than their sum.
//
// - The thread starts at the first batch (or start()) and stops at stop(), which the trainer
//   calls when training ends, however it ends. Batches already made stay queued for the next
//   run: nothing is lost, and position() stays exact.
// - An exception in the dataflow reaches next_batch() with its own type and message, and every
//   later call rethrows it: nothing waits forever for a thread that is gone.
// - next_batch() may be called from several threads (one per tower); each gets its own batch.
#include <condition_variable>
#include <cstddef>
#include <cstdint>
#include <deque>
#include <exception>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <stdexcept>
#include <string>
#include <thread>
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
class QueueInput {
 public:
  static_assert(data::state_reachable<Dataflow>,
                "tp rule [input: dataflow state reachable]: a view of this dataflow returns its base() by copy, and a view "
                "below it keeps the pass count a resume needs (shuffle, a seeded augmentation); checkpoints could not reach it. "
                "Put that view above the seeded ones, or give it `auto& base()` returning a reference");
  using batch_type = ranges::range_value_t<Dataflow>;

  explicit QueueInput(Dataflow dataflow, std::size_t capacity = 50)
      : state_(std::make_unique<shared>(std::move(dataflow), capacity)) {
    if (capacity == 0) throw std::invalid_argument("tp::QueueInput: the queue capacity must be > 0");
  }
  QueueInput(QueueInput&&) noexcept = default;
  QueueInput& operator=(QueueInput&&) = delete;
  ~QueueInput() {
    if (state_) stop();
  }

  batch_type next_batch() {
    auto& s = *state_;
    std::unique_lock lock(s.mutex);
    if (s.failure) std::rethrow_exception(s.failure);
    if (s.queue.empty() && !s.producer.joinable()) start_locked();
    s.not_empty.wait(lock, [&] { return !s.queue.empty(); });
    item it = std::move(s.queue.front());
    s.queue.pop_front();
    s.not_full.notify_one();
    if (it.error) {
      s.failure = it.error;
      std::rethrow_exception(it.error);
    }
    s.consumed = {it.pass, it.offset + 1};
    s.pass_starts.erase(s.pass_starts.begin(), s.pass_starts.lower_bound(it.pass));
    return std::move(*it.batch);
  }

  void start() {
    std::lock_guard lock(state_->mutex);
    if (!state_->producer.joinable()) start_locked();
  }

  // Stops and joins the thread; what it made stays queued.
  void stop() {
    auto& s = *state_;
    {
      std::lock_guard lock(s.mutex);
      s.stopping = true;
    }
    s.not_full.notify_all();
    if (s.producer.joinable()) s.producer.join();
    std::lock_guard lock(s.mutex);
    s.stopping = false;
  }

  // Batches in one pass of the dataflow, where it can tell (data/length.hpp): what
  // steps_per_epoch defaults to. Asked before start(), when the trainer is made.
  std::optional<std::int64_t> batches_per_pass() {
    std::lock_guard lock(state_->mutex);
    return data::items_per_pass(state_->dataflow);
  }

  // Batches in channels-last order (set by the trainer when the tower asks for it; before start).
  void channels_last(bool on) {
    std::lock_guard lock(state_->mutex);
    state_->channels_last = on;
  }

  // Batches in pinned memory (StagingInput asks for it when it feeds a CUDA device; before
  // start): made there by a dataflow that can (decode_images | batch(n) decodes into pinned
  // buffers), copied there on this input's thread otherwise, so that the step does not pay.
  void pin_memory(bool on) {
    if (on) detail::check_pinned_memory_available("tp::QueueInput::pin_memory");
    std::lock_guard lock(state_->mutex);
    if constexpr (requires(Dataflow& d) { d.pin_memory(true); }) state_->dataflow.pin_memory(on);
    state_->pin = on;
  }

  // Where the next batch popped will come from.
  data::position position() const {
    auto& s = *state_;
    std::lock_guard lock(s.mutex);
    if (!s.consumed) return s.restored;
    const auto& pass = s.pass_starts.at(s.consumed->first);
    // Reads only the views' settings, which the producer never changes.
    return data::position_in_pass(s.dataflow, pass.counters, pass.started_at, s.consumed->second);
  }
  // Drops what is queued and goes back to `where`, on this layout or another
  // (data/pass_position.hpp). A restore that throws changes nothing but stopping the thread.
  void restore(const data::position& where) {
    stop();
    auto& s = *state_;
    std::lock_guard lock(s.mutex);
    s.skip = data::restore_flow(s.dataflow, where);
    s.resuming = true;
    s.queue.clear();
    s.pending.reset();
    s.advance_due = false;
    s.read.reset();
    s.end.reset();
    s.pass_starts.clear();
    s.consumed.reset();
    s.failure = nullptr;
    s.restored = where;
  }

  // Batches waiting in the queue (tensorpack monitors this to tell whether input is the
  // bottleneck).
  std::size_t queued() const {
    std::lock_guard lock(state_->mutex);
    return state_->queue.size();
  }
  std::size_t capacity() const noexcept { return state_->capacity; }
  // Whether the background thread is running.
  bool running() const {
    std::lock_guard lock(state_->mutex);
    return state_->producer.joinable();
  }

 private:
  struct item {
    std::optional<batch_type> batch;
    std::uint64_t pass = 0;
    std::int64_t offset = 0;
    std::exception_ptr error;
  };

  struct shared {
    shared(Dataflow flow, std::size_t cap)
        : dataflow(std::move(flow)), capacity(cap), restored(data::position_in_pass(dataflow, data::save_state(dataflow), 0, 0)) {}

    Dataflow dataflow;
    const std::size_t capacity;
    mutable std::mutex mutex;
    std::condition_variable not_empty, not_full;
    std::deque<item> queue;
    std::thread producer;
    bool stopping = false;
    bool channels_last = false, pin = false;
    std::exception_ptr failure;  // the dataflow failed: every call rethrows this
    // The producer's place in the dataflow. Only the producer touches it while it runs.
    std::optional<ranges::iterator_t<Dataflow>> read;
    std::optional<ranges::sentinel_t<Dataflow>> end;
    std::optional<item> pending;  // made but not queued when the producer was stopped
    bool advance_due = false;     // `read` points at a batch already taken
    std::uint64_t pass = 0;
    std::int64_t offset = 0, skip = 0;
    bool resuming = false;  // the next pass is the one restore() went back into: it may be empty
    // For position(): the dataflow's state at the start of each pass not yet consumed (and
    // where in the global order it started), and the (pass, batches consumed in it) of the last
    // batch popped.
    struct pass_start {
      data::dataflow_state counters;
      std::int64_t started_at = 0;
    };
    std::map<std::uint64_t, pass_start> pass_starts;
    std::optional<std::pair<std::uint64_t, std::int64_t>> consumed;
    data::position restored;
  };

  void start_locked() {
    state_->producer = std::thread([s = state_.get()] { produce(*s); });
  }

  static void begin_pass(shared& s) {
    auto start = data::save_state(s.dataflow);
    s.read.emplace(ranges::begin(s.dataflow));
    s.end.emplace(ranges::end(s.dataflow));
    const auto started_at = data::pass_start(s.dataflow);
    ++s.pass;
    s.offset = 0;
    if (std::exchange(s.resuming, false)) {
      // A pass restored at its very end is empty: the next one starts.
    } else if (*s.read == *s.end)
      throw std::runtime_error("tp::QueueInput: the dataflow gave no datapoint in pass " + std::to_string(s.pass) +
                               "; check that the dataset is not empty (and, with batch(n, drop_remainder), that it "
                               "holds at least n datapoints)");
    for (; s.skip > 0; --s.skip, ++s.offset, ++*s.read)
      if (*s.read == *s.end) throw std::invalid_argument("tp::QueueInput::restore: the saved position is past the end of its pass; the dataflow is not the one the position was saved from");
    std::lock_guard lock(s.mutex);
    s.pass_starts[s.pass] = {std::move(start), started_at};
  }

  static batch_type prepared(const shared& s, batch_type batch) {
    if (s.channels_last) batch = channels_last_batch(std::move(batch));
    return s.pin ? pin_batch(std::move(batch)) : batch;
  }

  static void produce(shared& s) {
    try {
      for (;;) {
        if (!s.pending) {
          // Advance only now (it may make the next batch, and fail): everything made before a
          // failure is queued ahead of it.
          if (s.advance_due) {
            s.advance_due = false;
            ++*s.read;
          }
          // A loop: a position restored at a pass's very end skips all of it (begin_pass throws
          // on an empty pass, so this ends).
          while (!s.read || *s.read == *s.end) begin_pass(s);
          // Converted here, on the producer's thread, so that the step does not pay for it.
          s.pending.emplace(item{std::optional<batch_type>(prepared(s, **s.read)), s.pass, s.offset++, nullptr});
          s.advance_due = true;
        }
        std::unique_lock lock(s.mutex);
        s.not_full.wait(lock, [&] { return s.stopping || s.queue.size() < s.capacity; });
        if (s.stopping) return;
        s.queue.push_back(std::move(*s.pending));
        s.pending.reset();
        s.not_empty.notify_one();
      }
    } catch (...) {
      std::lock_guard lock(s.mutex);
      s.queue.push_back(item{std::nullopt, 0, 0, std::current_exception()});
      s.not_empty.notify_all();
    }
  }

  std::unique_ptr<shared> state_;
};

}  // namespace tp
