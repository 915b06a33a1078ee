#pragma once
// Graceful stop signals: while a trainer trains, SIGINT, SIGTERM and SIGUSR1 (by default) only
// record that a stop was asked for; the loop reads the record at its step boundaries and ends
// there, with an on-stop checkpoint (see tp::Trainer).
//
// - The handler does one thing that is async-signal-safe: it stores the signal's number in a
//   lock-free atomic (the first one wins). Handlers are installed with SA_RESTART, so a read or a
//   wait that the signal lands in goes on rather than failing with EINTR.
// - SIGINT is installed with SA_RESETHAND: the first Ctrl-C stops gracefully, the second finds
//   the default action back in place and ends the process at once, as it would without tp.
// - A signal that was ignored when training started (a background job's SIGINT) stays ignored.
// - Scopes nest and may overlap across threads (several trainers in one process): the first one
//   installs the handlers and clears the record, the last one to end puts the previous handlers
//   back as they were.
#include <atomic>
#include <csignal>
#include <mutex>
#include <stdexcept>
#include <string>
#include <vector>

#include <tp/compiled_part.hpp>

namespace tp::detail {

static_assert(std::atomic<int>::is_always_lock_free, "tp's signal handler needs a lock-free atomic int");

// The first stop signal received while a signal_scope is alive (0: none).
inline std::atomic<int> received_stop_signal{0};

inline void record_stop_signal(int signal) noexcept {
  int none = 0;
  received_stop_signal.compare_exchange_strong(none, signal);
}

class signal_scope {
 public:
  explicit signal_scope(const std::vector<int>& signals);
  ~signal_scope();
  signal_scope(const signal_scope&) = delete;
  signal_scope& operator=(const signal_scope&) = delete;

  // The stop signal received since the first live scope began (0: none).
  static int received() noexcept { return received_stop_signal.load(std::memory_order_relaxed); }

 private:
  struct installed_handler {
    int signal;
    struct sigaction previous;
  };
  struct state {
    std::mutex mutex;
    int scopes = 0;
    std::vector<installed_handler> installed;
  };
  static state& registry() {
    static state s;
    return s;
  }
};

}  // namespace tp::detail

#if TP_DEFINE_COMPILED_PART
namespace tp::detail {

TP_DECL signal_scope::signal_scope(const std::vector<int>& signals) {
  std::lock_guard lock(registry().mutex);
  if (registry().scopes++ > 0) return;
  received_stop_signal.store(0);
  for (const int signal : signals) {
    struct sigaction previous {};
    if (::sigaction(signal, nullptr, &previous) != 0 || previous.sa_handler == SIG_IGN) continue;
    struct sigaction action {};
    action.sa_handler = record_stop_signal;
    sigemptyset(&action.sa_mask);
    action.sa_flags = SA_RESTART | (signal == SIGINT ? SA_RESETHAND : 0);
    if (::sigaction(signal, &action, nullptr) == 0) registry().installed.push_back({signal, previous});
  }
}

TP_DECL signal_scope::~signal_scope() {
  std::lock_guard lock(registry().mutex);
  if (--registry().scopes > 0) return;
  for (const auto& [signal, previous] : registry().installed) ::sigaction(signal, &previous, nullptr);
  registry().installed.clear();
}

}  // namespace tp::detail
#endif
