#pragma once
// ProgressBar: steps done / steps in the epoch, steps per second, time left in the epoch and the
// epoch's running mean cost. On a terminal it redraws one line in place (at most every
// refresh_seconds); otherwise (a log file, CI) it prints one line per epoch. An epoch resumed
// part-way counts its rate and its mean cost over the steps this run took, and says how many.
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <iomanip>
#include <iostream>
#include <optional>
#include <ostream>
#include <sstream>
#include <string>

#include <unistd.h>

#include <torch/types.h>

namespace tp {

class ProgressBar {
 public:
  static constexpr bool chief_only = true;  // one bar, not one per process
  using clock = std::chrono::steady_clock;

  // Draws on std::cout, redrawing in place only when standard output is a terminal.
  ProgressBar() : ProgressBar(std::cout, ::isatty(STDOUT_FILENO) == 1) {}
  ProgressBar(std::ostream& out, bool interactive, double refresh_seconds = 0.1)
      : out_(&out), interactive_(interactive), refresh_(refresh_seconds) {}

  template <class Trainer>
  void before_epoch(Trainer& trainer) {
    first_step_ = trainer.local_step();  // > 0: an epoch resumed part-way
    epoch_start_ = last_draw_ = clock::now();
    cost_sum_ = torch::Tensor();
    costs_ = 0;
    drawn_ = false;
  }

  template <class Trainer>
  void after_step(Trainer& trainer) {
    // Summed on the cost's device: no device sync until the line is drawn.
    if (const auto& cost = trainer.last_cost(); cost.defined()) {
      if (cost_sum_.defined()) cost_sum_.add_(cost);
      else cost_sum_ = cost.to(torch::kDouble, /*non_blocking=*/false, /*copy=*/true);
      ++costs_;
    }
    if (!interactive_) return;
    const auto now = clock::now();
    if (std::chrono::duration<double>(now - last_draw_).count() < refresh_) return;
    last_draw_ = now;
    *out_ << '\r' << line(trainer, trainer.local_step() + 1, now) << "\x1b[K" << std::flush;
    drawn_ = true;
  }

  template <class Trainer>
  void after_epoch(Trainer& trainer) {
    const auto steps = trainer.local_step() + 1;  // the epoch may have been cut short by a stop request
    if (interactive_) *out_ << '\r' << line(trainer, steps, clock::now()) << "\x1b[K\n" << std::flush;
    else *out_ << line(trainer, steps, clock::now()) << '\n' << std::flush;
    drawn_ = false;
  }

  // Ends a line left open by an exception in the middle of an epoch.
  template <class Trainer>
  void after_train(Trainer&) {
    if (drawn_) *out_ << '\n' << std::flush;
    drawn_ = false;
  }

  // The epoch's mean cost so far, if the step returns one.
  std::optional<double> mean_cost() const {
    if (costs_ == 0) return std::nullopt;
    return cost_sum_.item<double>() / static_cast<double>(costs_);
  }

 private:
  template <class Trainer>
  std::string line(const Trainer& trainer, std::int64_t done, clock::time_point now) const {
    const std::int64_t total = trainer.steps_per_epoch();
    const double seconds = std::chrono::duration<double>(now - epoch_start_).count();
    const double rate = seconds > 0 ? static_cast<double>(done - first_step_) / seconds : 0.0;
    std::ostringstream s;
    s << "epoch " << trainer.epoch_num() << '/' << trainer.max_epoch() << ' ';
    if (interactive_) {
      constexpr int width = 24;
      const int filled = static_cast<int>(width * done / total);
      s << std::setw(3) << 100 * done / total << "% [" << std::string(filled, '#')
        << std::string(width - filled, '.') << "] ";
    }
    s << done << '/' << total << std::fixed << std::setprecision(1) << ' ' << rate << " it/s ";
    if (done < total) s << "ETA " << format_duration(rate > 0 ? (total - done) / rate : 0.0);
    else s << "in " << format_duration(seconds);
    if (auto cost = mean_cost()) s << std::setprecision(4) << " loss " << *cost;
    if (first_step_ > 0) s << " (resumed at step " << first_step_ << ": " << done - first_step_ << " steps)";
    return s.str();
  }

  static std::string format_duration(double seconds) {
    const auto total = static_cast<std::int64_t>(seconds + 0.5);
    char text[32];
    if (total >= 3600)
      std::snprintf(text, sizeof text, "%lld:%02lld:%02lld", static_cast<long long>(total / 3600),
                    static_cast<long long>(total / 60 % 60), static_cast<long long>(total % 60));
    else
      std::snprintf(text, sizeof text, "%lld:%02lld", static_cast<long long>(total / 60),
                    static_cast<long long>(total % 60));
    return text;
  }

  std::ostream* out_;
  bool interactive_;
  double refresh_;
  clock::time_point epoch_start_{}, last_draw_{};
  torch::Tensor cost_sum_;
  std::int64_t costs_ = 0;
  std::int64_t first_step_ = 0;
  bool drawn_ = false;
};

}  // namespace tp
