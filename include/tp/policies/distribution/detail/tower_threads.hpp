#pragma once
// Runs a job on every tower at once: tower 0 in the calling thread, the others in threads that
// live as long as the replicas. The call returns when every tower is done; if towers threw, the
// first (by tower index) is rethrown in the caller, so a failure in a tower surfaces in the
// training loop with its message. The threads are joined on destruction. A profiler running in
// the caller records the towers' work too.
#include <condition_variable>
#include <cstdint>
#include <exception>
#include <functional>
#include <mutex>
#include <thread>
#include <vector>

#include <tp/trainer/detail/phase_marker.hpp>

namespace tp::detail {

class tower_threads {
 public:
  explicit tower_threads(int towers) : errors_(static_cast<std::size_t>(towers)) {
    for (int i = 1; i < towers; ++i) threads_.emplace_back([this, i] { serve(i); });
  }
  ~tower_threads() {
    {
      std::lock_guard lock(mutex_);
      stopping_ = true;
    }
    work_ready_.notify_all();
    for (auto& t : threads_) t.join();
  }
  tower_threads(const tower_threads&) = delete;
  tower_threads& operator=(const tower_threads&) = delete;

  int towers() const noexcept { return static_cast<int>(errors_.size()); }

  void run(const std::function<void(int)>& job) {
    const profiler_context context;
    {
      std::lock_guard lock(mutex_);
      job_ = &job;
      context_ = &context;
      pending_ = static_cast<int>(threads_.size());
      ++generation_;
      for (auto& e : errors_) e = nullptr;
    }
    work_ready_.notify_all();
    try {
      job(0);
    } catch (...) {
      errors_[0] = std::current_exception();
    }
    std::unique_lock lock(mutex_);
    all_done_.wait(lock, [&] { return pending_ == 0; });
    job_ = nullptr;
    for (auto& e : errors_)
      if (e) std::rethrow_exception(e);
  }

 private:
  void serve(int tower) {
    std::uint64_t seen = 0;
    for (;;) {
      std::unique_lock lock(mutex_);
      work_ready_.wait(lock, [&] { return stopping_ || generation_ != seen; });
      if (stopping_) return;
      seen = generation_;
      const auto* job = job_;
      const auto* context = context_;
      lock.unlock();
      std::exception_ptr error;
      try {
        std::optional<at::ThreadLocalStateGuard> profiling;
        context->enter(profiling);
        (*job)(tower);
      } catch (...) {
        error = std::current_exception();
      }
      lock.lock();
      errors_[static_cast<std::size_t>(tower)] = error;
      if (--pending_ == 0) all_done_.notify_one();
    }
  }

  std::mutex mutex_;
  std::condition_variable work_ready_, all_done_;
  const std::function<void(int)>* job_ = nullptr;
  const profiler_context* context_ = nullptr;
  std::uint64_t generation_ = 0;
  int pending_ = 0;
  bool stopping_ = false;
  std::vector<std::exception_ptr> errors_;
  std::vector<std::thread> threads_;
};

}  // namespace tp::detail
