#pragma once
// parallel_map(f, threads, order): applies f to every datapoint in `threads` worker threads.
//
// - The source is read in the consuming thread, in order; at most `depth` datapoints (default:
//   2 per thread) are in the workers at once, so memory stays bounded.
// - order::keep hands results out in the source's order (reproducible); order::any hands them
//   out as they finish (faster when f's cost varies, but the order then depends on timing).
// - Each worker calls its own copy of f, so a stateful f needs no locking.
// - An exception thrown by f reaches the consumer with its own type and message, at the
//   datapoint that raised it (order::keep) or when it happens (order::any).
// - The workers stop and are joined when the view is destroyed, whatever they were doing; a new
//   pass drops the results of an abandoned one.
#include <algorithm>
#include <condition_variable>
#include <cstddef>
#include <cstdint>
#include <deque>
#include <exception>
#include <functional>
#include <iterator>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <stdexcept>
#include <string>
#include <thread>
#include <type_traits>
#include <utility>
#include <vector>

#include <range/v3/iterator/default_sentinel.hpp>
#include <range/v3/range/access.hpp>
#include <range/v3/range/concepts.hpp>
#include <range/v3/range/traits.hpp>
#include <range/v3/view/interface.hpp>

namespace tp::data {

// The order parallel_map hands its results out in: the source's (reproducible), or as they finish.
enum class order { keep, any };

namespace detail {

// Worker threads and the queues between them and the consumer.
template <class Input, class Output, class F>
class map_workers {
 public:
  map_workers(const F& f, int threads) {
    for (int i = 0; i < threads; ++i) threads_.emplace_back([this, own = f]() mutable { work(own); });  // a copy of f per thread
  }
  ~map_workers() {
    {
      std::lock_guard lock(mutex_);
      stopping_ = true;
    }
    work_ready_.notify_all();
    for (auto& t : threads_) t.join();
  }
  map_workers(const map_workers&) = delete;
  map_workers& operator=(const map_workers&) = delete;

  // Forgets the tasks and results of the previous pass.
  void new_pass() {
    std::lock_guard lock(mutex_);
    ++generation_;
    tasks_.clear();
    done_.clear();
  }
  void submit(std::uint64_t sequence, Input input) {
    {
      std::lock_guard lock(mutex_);
      tasks_.push_back({generation_, sequence, std::move(input)});
    }
    work_ready_.notify_one();
  }
  // The result with this sequence number (keep), or the first one to finish (any).
  Output take(std::optional<std::uint64_t> sequence) {
    std::unique_lock lock(mutex_);
    result_ready_.wait(lock, [&] { return sequence ? done_.contains(*sequence) : !done_.empty(); });
    auto node = done_.extract(sequence ? done_.find(*sequence) : done_.begin());
    lock.unlock();
    if (node.mapped().error) std::rethrow_exception(node.mapped().error);
    return std::move(*node.mapped().value);
  }

 private:
  struct task {
    std::uint64_t generation, sequence;
    Input input;
  };
  struct result {
    std::optional<Output> value;
    std::exception_ptr error;
  };

  void work(F& f) {
    for (;;) {
      std::unique_lock lock(mutex_);
      work_ready_.wait(lock, [&] { return stopping_ || !tasks_.empty(); });
      if (stopping_) return;
      task t = std::move(tasks_.front());
      tasks_.pop_front();
      lock.unlock();
      result r;
      try {
        r.value.emplace(std::invoke(f, std::move(t.input)));
      } catch (...) {
        r.error = std::current_exception();
      }
      lock.lock();
      if (t.generation != generation_) continue;  // from an abandoned pass
      done_.emplace(t.sequence, std::move(r));
      lock.unlock();
      result_ready_.notify_all();
    }
  }

  std::mutex mutex_;
  std::condition_variable work_ready_, result_ready_;
  std::deque<task> tasks_;
  std::map<std::uint64_t, result> done_;
  std::uint64_t generation_ = 0;
  bool stopping_ = false;
  std::vector<std::thread> threads_;
};

}  // namespace detail

// What `flow | parallel_map(f, ...)` yields: f of each datapoint, computed in worker threads.
template <class Source, class F>
class parallel_mapped_view : public ranges::view_base {
 public:
  using input_type = ranges::range_value_t<Source>;
  using value_type = std::remove_cvref_t<std::invoke_result_t<F&, input_type>>;
  using workers_type = detail::map_workers<input_type, value_type, F>;

  class iterator {
   public:
    using value_type = parallel_mapped_view::value_type;
    using difference_type = std::ptrdiff_t;
    using iterator_concept = std::input_iterator_tag;

    iterator() = default;
    explicit iterator(parallel_mapped_view* owner)
        : owner_(owner), position_(ranges::begin(owner->source_)), end_(ranges::end(owner->source_)) {
      owner_->workers().new_pass();
      advance();
    }
    const value_type& operator*() const { return *current_; }
    // The current value, moved out (for a consumer that keeps it: no copy); *it is then empty
    // until the next ++.
    value_type take() { return std::move(*current_); }
    iterator& operator++() {
      advance();
      return *this;
    }
    void operator++(int) { advance(); }
    friend bool operator==(const iterator& it, ranges::default_sentinel_t) { return !it.current_; }

   private:
    void advance() {
      current_.reset();
      auto& workers = owner_->workers();
      for (; in_flight_ < owner_->depth_ && position_ != end_; ++position_, ++in_flight_)
        workers.submit(submitted_++, *position_);
      if (in_flight_ == 0) return;
      --in_flight_;
      current_.emplace(workers.take(owner_->order_ == order::keep ? std::optional(taken_++) : std::nullopt));
    }

    parallel_mapped_view* owner_ = nullptr;
    ranges::iterator_t<Source> position_{};
    ranges::sentinel_t<Source> end_{};
    std::uint64_t submitted_ = 0, taken_ = 0;
    std::size_t in_flight_ = 0;
    std::optional<value_type> current_;
  };

  parallel_mapped_view() = default;
  parallel_mapped_view(Source source, F f, int threads, order o, std::size_t depth)
      : source_(std::move(source)), f_(std::move(f)), threads_(threads), order_(o), depth_(depth) {}
  // A copy is a new view over a copy of the source, with workers of its own.
  parallel_mapped_view(const parallel_mapped_view& other)
      : source_(other.source_), f_(other.f_), threads_(other.threads_), order_(other.order_), depth_(other.depth_) {}
  parallel_mapped_view& operator=(const parallel_mapped_view& other) {
    if (this != &other) *this = parallel_mapped_view(other);
    return *this;
  }
  parallel_mapped_view(parallel_mapped_view&&) noexcept = default;
  parallel_mapped_view& operator=(parallel_mapped_view&&) noexcept = default;

  iterator begin() { return iterator(this); }
  ranges::default_sentinel_t end() const { return {}; }
  Source& base() noexcept { return source_; }
  int threads() const noexcept { return threads_; }
  // Datapoints in the workers at once, from the next one submitted.
  void set_depth(std::size_t depth) noexcept { depth_ = std::max<std::size_t>(depth, 1); }

 private:
  workers_type& workers() {
    if (!workers_) workers_ = std::make_unique<workers_type>(*f_, threads_);
    return *workers_;
  }

  Source source_;
  std::optional<F> f_;  // optional: lambdas are not assignable
  int threads_ = 1;
  order order_ = order::keep;
  std::size_t depth_ = 2;
  std::unique_ptr<workers_type> workers_;  // declared last: joined before the rest goes
};

template <class F>
struct parallel_map {
  F f;
  int threads;
  order keep_or_any;
  std::size_t depth;

  explicit parallel_map(F fn, int thread_count = static_cast<int>(std::thread::hardware_concurrency()),
                        order o = order::keep, std::size_t in_flight = 0)
      : f(std::move(fn)), threads(thread_count), keep_or_any(o), depth(in_flight ? in_flight : 2 * static_cast<std::size_t>(thread_count)) {
    if (thread_count <= 0)
      throw std::invalid_argument("tp::data::parallel_map: the number of threads must be > 0, got " + std::to_string(thread_count));
  }

  template <class Source>
  friend auto operator|(Source&& source, parallel_map m) {
    using S = std::remove_cvref_t<Source>;
    static_assert(ranges::input_range<S>, "tp::data::parallel_map needs a range on its left");
    static_assert(std::is_invocable_v<F&, ranges::range_value_t<S>>,
                  "tp::data::parallel_map: f must be callable with the datapoints of the range on its left");
    return parallel_mapped_view<S, F>(std::forward<Source>(source), std::move(m.f), m.threads, m.keep_or_any, m.depth);
  }
};

}  // namespace tp::data
