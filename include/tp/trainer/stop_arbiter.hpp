#pragma once
// Whether training ends at a boundary (after a step's hooks, or an epoch's end), and why: a
// request (request_stop, EarlyStopping), a stop signal, or the time budget
// (TrainOptions::max_time), which it keeps by timing each boundary's work. With many processes
// every process must end after the same step for the same reason: they agree on the largest
// stop code (a signal outranks the time budget, which outranks a request; of two signals the
// higher number wins). Lightning splits the same between its signal connector and its loop.
#include <cstdint>

#include <tp/trainer/detail/signals.hpp>
#include <tp/trainer/detail/time_budget.hpp>
#include <tp/train_options.hpp>
#include <tp/train_outcome.hpp>

namespace tp::detail {

class stop_arbiter {
 public:
  using clock = time_budget::clock;
  enum class boundary { step, epoch_end };

  // At the start of train(): no request yet, the budget counts from now.
  void start(const TrainOptions& options) {
    requested_ = false;
    watch_signals_ = !options.stop_signals().empty();
    budget_ = time_budget(options.max_time(), clock::now());
  }

  void request() noexcept { requested_ = true; }
  bool requested() const noexcept { return requested_; }

  // The budget's timing of a boundary's work: began() before it, work_done() after all but the
  // checkpoint writers' hooks, writers_done() after theirs. The clock is read only with a budget.
  void began() {
    if (budget_.limited()) began_ = clock::now();
  }
  void work_done() {
    if (budget_.limited()) worked_ = clock::now();
  }
  void writers_done(boundary where) {
    if (!budget_.limited()) return;
    if (where == boundary::step) budget_.saw_step(worked_ - began_);
    else budget_.saw_epoch_end(worked_ - began_);
    budget_.saw_checkpoint(clock::now() - worked_);
  }

  // Whether training ends here; `epoch_end_ahead` says whether the next step closes an epoch
  // (the budget must fit its end too). `agree(code)` returns the code all processes agree on.
  // On a stop, `outcome` says why.
  template <class Agree>
  bool should_stop(bool epoch_end_ahead, Agree&& agree, train_outcome& outcome, std::int64_t global_step) {
    int code = requested_ ? code_request : 0;
    if (budget_.limited() && !budget_.allows_next_step(epoch_end_ahead, clock::now())) code = code_time;
    if (watch_signals_)
      if (const int signal = signal_scope::received()) code = code_signal + signal;
    code = agree(code);
    if (code == 0) return false;
    requested_ = true;
    outcome.global_step = global_step;
    if (code >= code_signal) {
      outcome.cause = end_cause::signal;
      outcome.signal = code - code_signal;
    } else {
      outcome.cause = code == code_time ? end_cause::time_limit : end_cause::stop_requested;
    }
    return true;
  }

 private:
  static constexpr int code_request = 1, code_time = 2, code_signal = 1000;

  bool requested_ = false;
  bool watch_signals_ = false;
  time_budget budget_{{}, {}};
  clock::time_point began_{}, worked_{};
};

}  // namespace tp::detail
