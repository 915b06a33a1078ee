#pragma once
// Where the loop is: the counters callbacks read (epoch_num, local_step, global_step), and what
// a checkpoint needs to resume at the exact step (steps done in the epoch, whether its end has
// begun). Lightning keeps these as its loops' progress; here they are one value with its own
// part of a checkpoint (loop).
#include <cstdint>
#include <optional>
#include <stdexcept>
#include <string>

#include <tp/checkpoint/checkpoint_error.hpp>
#include <tp/concepts/distribution.hpp>
#include <tp/concepts/input.hpp>
#include <tp/checkpoint/state_tree.hpp>

namespace tp::detail {

struct loop_position {
  int epoch_num = 0;             // the current epoch; starting_epoch - 1 before the first, the
                                 // last run after the loop (tensorpack's count)
  std::int64_t local_step = 0;   // the current step's index in its epoch
  std::int64_t global_step = 0;  // steps ever finished (after_step counts the current one)
  std::int64_t steps_done = 0;   // steps finished in the current epoch
  bool epoch_closed = true;      // whether the current epoch's after_epoch has begun

  // Where a loaded position resumes: an epoch, and the step to start it at.
  struct resume_point {
    int epoch = 1;
    std::int64_t step = 0;
  };

  // A train() starts: no epoch yet (epochs finished, as tensorpack counts them), the first one
  // at first_step (a loaded state's resume point).
  void begin_run(int starting_epoch, std::int64_t first_step) noexcept {
    epoch_num = starting_epoch - 1;
    local_step = first_step;
    steps_done = 0;
    epoch_closed = true;
  }
  void begin_epoch(int epoch, std::int64_t first_step) noexcept {
    epoch_num = epoch;
    local_step = first_step;
    steps_done = first_step;
    epoch_closed = false;
  }
  void finish_step() noexcept {
    ++global_step;
    ++steps_done;
  }

  // A checkpoint written at an epoch's end resumes at the next epoch; one written after step k
  // of an epoch starts that epoch again at step k (its before_epoch hooks run).
  resume_point resumes_at() const noexcept {
    return epoch_closed ? resume_point{epoch_num + 1, 0} : resume_point{epoch_num, steps_done};
  }

  // In a checkpoint's root: epoch and global_step (Lightning's names), and
  // loop: {steps_done, epoch_closed}.
  void save(state_tree& root) const {
    root.put("epoch", std::int64_t{epoch_num});
    root.put("global_step", global_step);
    auto loop = root.child("loop");
    loop.put("steps_done", steps_done);
    loop.put("epoch_closed", epoch_closed);
  }
  static loop_position read(const state_tree& root) {
    loop_position saved;
    saved.epoch_num = static_cast<int>(root.integer("epoch"));
    saved.global_step = root.integer("global_step");
    const auto loop = root.at("loop");
    saved.steps_done = loop.integer("steps_done");
    saved.epoch_closed = loop.boolean("epoch_closed");
    if (saved.global_step < 0 || saved.steps_done < 0 || saved.steps_done > saved.global_step)
      throw checkpoint_error("the checkpoint's loop position (global_step " + std::to_string(saved.global_step) + ", steps_done " +
                             std::to_string(saved.steps_done) + ") is not one a run can reach");
    return saved;
  }
};

// TrainOptions' default steps_per_epoch (0): one pass of the input, in steps of the default
// step. An input that cannot tell its length, or replicas that cannot say how many batches a
// step takes, make it an error that names the option.
template <class Input, class Replicas>
std::int64_t steps_in_one_pass(Input& input, const Replicas& replicas) {
  std::optional<std::int64_t> batches;
  if constexpr (sized_input<Input>) batches = input.batches_per_pass();
  if (!batches)
    throw std::invalid_argument("tp::TrainOptions: steps_per_epoch is not set, and the input cannot tell how many batches a pass of its "
                                "data has (a DummyInput, a stream, a dataflow of unknown length); set it with "
                                "TrainOptions().steps_per_epoch(n)");
  int per_step = 1;
  if constexpr (counts_batches<Replicas>) per_step = replicas.batches_per_step();
  else
    throw std::invalid_argument("tp::TrainOptions: steps_per_epoch is not set, and the distribution policy cannot say how many batches "
                                "a step takes (its replicas have no batches_per_step()); set it with TrainOptions().steps_per_epoch(n)");
  const std::int64_t steps = *batches / per_step;
  if (steps < 1)
    throw std::invalid_argument("tp::TrainOptions: steps_per_epoch is not set, and one pass of the input (" + std::to_string(*batches) +
                                " batches) is less than one step of " + std::to_string(per_step) +
                                " batches; set it with TrainOptions().steps_per_epoch(n), or use a larger dataset or smaller batches");
  return steps;
}

}  // namespace tp::detail
