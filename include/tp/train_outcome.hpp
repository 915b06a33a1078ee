#pragma once
// How train() ended. A program tells an interrupted run (to be resumed by running it again)
// from a finished one by what train() returns:
//
//   const auto outcome = trainer.train();
//   if (outcome.interrupted()) {
//     std::cerr << "interrupted at global step " << outcome.global_step << "; run the same command to resume\n";
//     return outcome.exit_status();  // 128 + the signal, as a shell reports a process it killed
//   }
//
// An interrupted run has finished its current step, its checkpoint writers have saved it (an
// on-stop save), and after_train has run.
#include <cstdint>

namespace tp {

// Why train() ended: train_outcome::cause.
enum class end_cause {
  completed,       // every epoch ran
  stop_requested,  // request_stop() or tp::stop_training (EarlyStopping, a hook's own decision)
  signal,          // a stop signal (SIGINT, SIGTERM, SIGUSR1), at this process or another rank
  time_limit,      // TrainOptions::max_time would have run out during the next step
};

struct train_outcome {
  end_cause cause = end_cause::completed;
  int signal = 0;  // the signal, when cause is end_cause::signal
  std::int64_t global_step = 0;

  // Ended before its planned end by something outside the training: running it again resumes.
  bool interrupted() const noexcept { return cause == end_cause::signal || cause == end_cause::time_limit; }
  // The status a program exits with: 128 + the signal after a signal (what the signal's default
  // action would have reported), else 0.
  int exit_status() const noexcept { return cause == end_cause::signal ? 128 + signal : 0; }
};

}  // namespace tp
