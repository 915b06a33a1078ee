#pragma once
// One piece of work at a time on a thread of its own, for what may take long and needs nothing
// of the caller's once started (writing a checkpoint's bytes to disk while training goes on).
// start() first waits for the previous work to end; the error a work threw is rethrown, with its
// message, by the next start() or wait(), so that it reaches the training loop. The destructor
// waits for the work in flight (a write cannot be abandoned half-way) and drops its error.
//
// Copying gives an idle writer: the work in flight stays with the original.
#include <exception>
#include <functional>
#include <thread>
#include <utility>

namespace tp::detail {

class background_writer {
 public:
  background_writer() = default;
  background_writer(const background_writer&) noexcept {}
  background_writer& operator=(const background_writer& other) noexcept {
    if (this != &other) wait_quietly();
    return *this;
  }
  ~background_writer() { wait_quietly(); }

  void start(std::function<void()> work) {
    wait();
    worker_ = std::thread([this, work = std::move(work)] {
      try {
        work();
      } catch (...) {
        error_ = std::current_exception();  // read only after join()
      }
    });
  }
  // Waits for the work in flight, and rethrows what it threw.
  void wait() {
    if (worker_.joinable()) worker_.join();
    if (error_) std::rethrow_exception(std::exchange(error_, nullptr));
  }
  // Waits, and returns the work's error instead of throwing it (while another is in flight).
  std::exception_ptr wait_quietly() noexcept {
    if (worker_.joinable()) worker_.join();
    return std::exchange(error_, nullptr);
  }

 private:
  std::thread worker_;
  std::exception_ptr error_;
};

}  // namespace tp::detail
