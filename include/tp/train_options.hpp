#pragma once
// Loop options, in LibTorch's fluent style: TrainOptions().steps_per_epoch(100).max_epoch(5).
#include <chrono>
#include <csignal>
#include <cstdint>
#include <stdexcept>
#include <string>
#include <vector>

#include <torch/arg.h>

#include <tp/compiled_part.hpp>

namespace tp {

struct TrainOptions {
  // Steps in one epoch. An epoch is only the period at which epoch callbacks fire; it need not
  // be a pass over the data. 0, the default: one pass of the input, for an input whose data
  // knows its length (FeedInput or QueueInput over a sized dataflow), counted in the default
  // step's batches (towers x micro-batches); the trainer says when it cannot tell.
  TORCH_ARG(std::int64_t, steps_per_epoch) = 0;
  // Epochs run are starting_epoch .. max_epoch, both included (tensorpack's convention).
  TORCH_ARG(int, starting_epoch) = 1;
  TORCH_ARG(int, max_epoch) = 1;
  // A time budget for this train() call (0, the default: none), for a job with a wall-clock
  // limit. Before each step the loop checks that the step, the epoch's end if the step closes
  // an epoch, and a checkpoint still fit in what is left, judging by the longest of each seen so
  // far; when they do not, it stops there as on a stop signal (an on-stop checkpoint, then
  // after_train) and train() returns end_cause::time_limit. The budget starts afresh in each
  // process: a resumed run has its own.
  TORCH_ARG(std::chrono::milliseconds, max_time) = std::chrono::milliseconds::zero();
  // Signals that stop training gracefully: the current step finishes, checkpoint writers save
  // it, after_train runs, and train() returns end_cause::signal. A second SIGINT ends the
  // process at once. The previous handlers are back when train() returns. Empty: tp leaves
  // every signal's handling as it is.
  TORCH_ARG(std::vector<int>, stop_signals) = {SIGINT, SIGTERM, SIGUSR1};
  // LibTorch's intra-op threads for this process, set when train() starts. 0, the default: the
  // physical cores this process may run on, shared among the run's processes on this machine,
  // unless OMP_NUM_THREADS says otherwise (process/intra_op_threads.hpp); -1: leave LibTorch's
  // setting as the program left it.
  TORCH_ARG(int, intra_op_threads) = 0;
  // Freed memory kept for the next step, set when train() starts: glibc's malloc serves blocks
  // under 32 MiB from its heap and keeps up to 256 MiB freed instead of mapping and zeroing each
  // step's memory anew (process/freed_memory.hpp: twice as fast a CPU step, measured). The
  // environment's MALLOC_* settings win; false leaves malloc as the program left it.
  TORCH_ARG(bool, keep_freed_memory) = true;
  // The model summary (tp/model_summary.hpp) when training starts, and the optimizers' state
  // size after the first step, printed by the chief (Lightning's enable_model_summary).
  TORCH_ARG(bool, model_summary) = true;

 public:
  // Throws std::invalid_argument saying what is wrong and how to set it right.
  void validate() const;
};

}  // namespace tp

#if TP_DEFINE_COMPILED_PART
namespace tp {

TP_DECL void TrainOptions::validate() const {
  if (steps_per_epoch_ < 0)
    throw std::invalid_argument(
        "tp::TrainOptions: steps_per_epoch must be > 0 (or 0: one pass of the input), got " + std::to_string(steps_per_epoch_) +
        "; set it with TrainOptions().steps_per_epoch(n) (an epoch is the period at which "
        "epoch callbacks fire, it need not be a pass over the data)");
  if (starting_epoch_ < 1)
    throw std::invalid_argument("tp::TrainOptions: starting_epoch must be >= 1, got " +
                                std::to_string(starting_epoch_) + " (epochs are numbered from 1)");
  if (max_epoch_ < starting_epoch_)
    throw std::invalid_argument(
        "tp::TrainOptions: max_epoch (" + std::to_string(max_epoch_) +
        ") is smaller than starting_epoch (" + std::to_string(starting_epoch_) +
        "); epochs run from starting_epoch to max_epoch inclusive, so max_epoch must be >= "
        "starting_epoch");
  if (max_time_ < std::chrono::milliseconds::zero())
    throw std::invalid_argument("tp::TrainOptions: max_time must be >= 0 (0: no time budget), got " +
                                std::to_string(max_time_.count()) + " ms");
  for (const int signal : stop_signals_)
    if (signal <= 0 || signal >= NSIG || signal == SIGKILL || signal == SIGSTOP)
      throw std::invalid_argument("tp::TrainOptions: stop_signals holds " + std::to_string(signal) +
                                  ", which is not a signal a process can catch; give signals such as SIGINT, SIGTERM "
                                  "and SIGUSR1, or an empty list to leave every signal's handling as it is");
  if (intra_op_threads_ < -1)
    throw std::invalid_argument("tp::TrainOptions: intra_op_threads must be >= -1 (0: tp's default, the physical cores; "
                                "-1: leave LibTorch's setting), got " + std::to_string(intra_op_threads_));
}

}  // namespace tp
#endif
