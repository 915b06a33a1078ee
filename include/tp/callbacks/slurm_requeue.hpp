#pragma once
// SlurmRequeue: when SLURM warns a job before its time limit or a preemption, puts the job back
// in the queue once the on-stop checkpoint is written, so that it goes on from there when it
// runs again (Lightning's SLURM auto-requeue). Launch the ranks with srun, so that each gets the
// warning signal:
//
//   #SBATCH --signal=USR1@90     SIGUSR1 to every task 90 s before the end
//   #SBATCH --requeue            a requeued job may run again
//   #SBATCH --open-mode=append   its output goes on in the same files
//   srun ./train --logdir $SCRATCH/run
//
// - At after_train, on the chief only, when training ended on `signal` (SIGUSR1 by default; it
//   must be one of TrainOptions::stop_signals, which it is by default): it runs
//   `scontrol requeue <job>`, <job> being $SLURM_JOB_ID, or $SLURM_ARRAY_JOB_ID_$SLURM_ARRAY_TASK_ID
//   in a job array. By then ModelSaver has saved the step the run stopped after.
// - Outside SLURM (no SLURM_JOB_ID) it says so and requeues nothing.
// - A job id that is not a number, or an scontrol that is missing or fails, throws from train()
//   saying so: the checkpoint is written all the same, and resubmitting the job resumes it.
#include <sys/wait.h>

#include <spawn.h>

#include <cerrno>
#include <csignal>
#include <cstdlib>
#include <cstring>
#include <iostream>
#include <stdexcept>
#include <string>
#include <vector>

#include <tp/train_outcome.hpp>

extern char** environ;

namespace tp {

namespace detail {
// The job to requeue from SLURM's variables (empty outside SLURM); throws if they are malformed.
inline std::string slurm_job_to_requeue() {
  auto get = [](const char* name) -> std::string {
    const char* v = std::getenv(name);
    return v ? v : "";
  };
  auto check = [](const char* name, const std::string& value) {
    if (value.empty() || value.find_first_not_of("0123456789") != std::string::npos)
      throw std::invalid_argument(std::string("tp::SlurmRequeue: ") + name + "=\"" + value +
                                  "\" is not a job id (digits); unset it outside SLURM, or fix what sets it");
    return value;
  };
  const auto job = get("SLURM_JOB_ID");
  if (job.empty()) return "";
  const auto array_job = get("SLURM_ARRAY_JOB_ID");
  if (array_job.empty()) return check("SLURM_JOB_ID", job);
  return check("SLURM_ARRAY_JOB_ID", array_job) + "_" + check("SLURM_ARRAY_TASK_ID", get("SLURM_ARRAY_TASK_ID"));
}

// Runs a program found on PATH with arguments and waits for it; returns its exit status, or
// throws if it cannot be started or is killed.
inline int run_program(const std::vector<std::string>& command) {
  std::vector<char*> argv;
  for (const auto& a : command) argv.push_back(const_cast<char*>(a.c_str()));
  argv.push_back(nullptr);
  pid_t pid = 0;
  if (const int error = ::posix_spawnp(&pid, argv[0], nullptr, nullptr, argv.data(), environ); error != 0)
    throw std::runtime_error("cannot run " + command[0] + ": " + std::strerror(error) +
                             (error == ENOENT ? " (it is not on PATH)" : ""));
  int status = 0;
  while (::waitpid(pid, &status, 0) < 0) {
    if (errno != EINTR) throw std::runtime_error("cannot wait for " + command[0] + ": " + std::strerror(errno));
  }
  if (WIFSIGNALED(status)) throw std::runtime_error(command[0] + " was killed by signal " + std::to_string(WTERMSIG(status)));
  return WEXITSTATUS(status);
}
}  // namespace detail

class SlurmRequeue {
 public:
  static constexpr bool chief_only = true;

  explicit SlurmRequeue(int signal = SIGUSR1) : signal_(signal) {
    if (signal <= 0 || signal >= NSIG)
      throw std::invalid_argument("tp::SlurmRequeue: " + std::to_string(signal) + " is not a signal; give the one of sbatch's --signal (SIGUSR1 by default)");
  }
  // Where messages go (std::cerr by default).
  SlurmRequeue& log_to(std::ostream& out) {
    log_ = &out;
    return *this;
  }

  template <class Trainer>
  void after_train(Trainer& trainer) {
    requeued_ = false;
    const auto& outcome = trainer.outcome();
    if (outcome.cause != end_cause::signal || outcome.signal != signal_) return;
    const auto job = detail::slurm_job_to_requeue();
    if (job.empty()) {
      *log_ << "tp::SlurmRequeue: stopped on signal " << signal_ << " outside SLURM (SLURM_JOB_ID is not set): nothing to requeue\n";
      return;
    }
    const auto saved = " (global step " + std::to_string(outcome.global_step) + " is saved: resubmit the job to resume)";
    int status = 0;
    try {
      status = detail::run_program({"scontrol", "requeue", job});
    } catch (const std::exception& e) {
      throw std::runtime_error("tp::SlurmRequeue: could not requeue job " + job + ": " + e.what() + saved);
    }
    if (status != 0)
      throw std::runtime_error("tp::SlurmRequeue: `scontrol requeue " + job + "` failed with exit status " + std::to_string(status) + saved);
    requeued_ = true;
    *log_ << "tp::SlurmRequeue: requeued job " << job << " at global step " << outcome.global_step << "\n";
  }

  // Whether the last train() requeued the job.
  bool requeued() const noexcept { return requeued_; }

 private:
  int signal_;
  std::ostream* log_ = &std::cerr;
  bool requeued_ = false;
};

}  // namespace tp
