#pragma once
// Profiler: records windows of steps with LibTorch's autograd profiler and writes each as a
// Chrome trace, `<folder>/trace-steps-A-B.json` (tensorpack's GraphProfiler). The file opens in
// Perfetto (ui.perfetto.dev) or chrome://tracing. Besides LibTorch's operators, the trace shows
// tp's phases (tp/trainer/detail/phase_marker.hpp): tp::input_wait, tp::tower_forward,
// tp::tower_backward, tp::reduce, tp::optimizer_step, and tp::callback/NAME.HOOK for each
// callback's hook, so that it shows where a step's time goes. Work in the towers' threads is
// recorded too.
//
//   tp::Profiler(logdir, {{11, 15}})                 steps 11 to 15
//   tp::Profiler(logdir, {{11, 15}, {1001, 1005}})   a trace per window
//   tp::Profiler(logdir, {})                         none (a flag left unset): it does nothing
//
// Steps are counted as global_step counts them: step s is the one after which global_step is s,
// both ends included, so a schedule survives a resume. A window starts at the Profiler's
// before_step of its first step and ends at its after_step of its last: give it first among the
// callbacks, and the trace holds all their hooks in those steps but the last after_step ones. A run that ends inside a window (a stop, an exception)
// writes what was recorded. Only the chief profiles. Profiling slows the steps it records:
// leave the first steps (warm-up) out of a window.
#include <cstdint>
#include <filesystem>
#include <fstream>
#include <memory>
#include <stdexcept>
#include <string>
#include <utility>
#include <vector>

#include <torch/csrc/autograd/profiler_legacy.h>

#include <tp/io/writable_folder.hpp>

namespace tp {

class Profiler {
 public:
  static constexpr bool chief_only = true;
  struct window {
    std::int64_t first, last;
  };

  Profiler(std::filesystem::path folder, std::vector<window> windows) : folder_(std::move(folder)), windows_(std::move(windows)) {
    for (std::size_t i = 0; i < windows_.size(); ++i) {
      const auto [first, last] = windows_[i];
      const auto which = "tp::Profiler: window " + std::to_string(first) + ":" + std::to_string(last) + " ";
      if (first < 1) throw std::invalid_argument(which + "starts before step 1 (steps count from 1, as global_step does)");
      if (last < first) throw std::invalid_argument(which + "ends before it starts");
      if (i > 0 && first <= windows_[i - 1].last)
        throw std::invalid_argument(which + "overlaps or comes before the window before it; give the windows in order");
    }
  }
  Profiler(Profiler&&) = default;
  ~Profiler() {
    try {
      finish();
    } catch (...) {  // after_train has reported it, or no training ran
    }
  }

  template <class Trainer>
  void before_train(Trainer&) {
    if (!windows_.empty()) detail::make_writable_folder(folder_, "tp::Profiler: the trace folder");
  }
  template <class Trainer>
  void before_step(Trainer& trainer) {
    const auto step = trainer.global_step() + 1;
    if (recording_ || next_ >= windows_.size()) return;
    while (next_ < windows_.size() && windows_[next_].last < step) ++next_;  // passed before a resume
    if (next_ < windows_.size() && windows_[next_].first <= step) start(windows_[next_]);
  }
  template <class Trainer>
  void after_step(Trainer& trainer) {
    if (recording_ && trainer.global_step() >= windows_[next_].last) {
      finish();
      ++next_;
    }
  }
  template <class Trainer>
  void after_train(Trainer&) {
    finish();
  }

  // The traces written so far.
  const std::vector<std::filesystem::path>& traces() const noexcept { return traces_; }

 private:
  void start(const window& w) {
    path_ = folder_ / ("trace-steps-" + std::to_string(w.first) + "-" + std::to_string(w.last) + ".json");
    partial_ = path_;
    partial_ += ".partial";
    file_ = std::make_unique<std::ofstream>(partial_, std::ios::trunc);
    if (!*file_) throw std::runtime_error("tp::Profiler: cannot open " + partial_.string() + " for writing");
    try {
      recording_ = std::make_unique<torch::autograd::profiler::RecordProfile>(*file_);
    } catch (const c10::Error& e) {
      throw std::runtime_error(std::string("tp::Profiler: cannot start LibTorch's profiler (is another one running?): ") +
                               e.what_without_backtrace());
    }
  }
  // The profiler writes the trace when it stops; the file takes its name once complete.
  void finish() {
    if (!recording_) return;
    recording_.reset();
    file_->close();
    const bool written = static_cast<bool>(*file_);
    file_.reset();
    if (!written) throw std::runtime_error("tp::Profiler: writing " + partial_.string() + " failed (disk full?)");
    std::filesystem::rename(partial_, path_);
    traces_.push_back(path_);
  }

  std::filesystem::path folder_, path_, partial_;
  std::vector<window> windows_;
  std::size_t next_ = 0;
  std::unique_ptr<std::ofstream> file_;
  std::unique_ptr<torch::autograd::profiler::RecordProfile> recording_;  // writes the trace when destroyed
  std::vector<std::filesystem::path> traces_;
};

}  // namespace tp
