// Stopping without losing work: stop signals and the time budget end training after the
// current step with an on-stop checkpoint, the previous signal handlers come back, SLURM jobs
// are requeued; and a training process killed with SIGKILL, or sent SIGINT and SIGTERM, at
// random moments resumes to the bits of a run that was never interrupted.
#include <gtest/gtest.h>

#include <chrono>
#include <csignal>
#include <cstdlib>
#include <random>
#include <thread>
#include <utility>

#include <fcntl.h>
#include <poll.h>
#include <sys/inotify.h>
#include <sys/wait.h>
#include <unistd.h>

#include <tp/policies/distribution/detail/stop_vote.hpp>

#include "support.hpp"

namespace fs = std::filesystem;
using namespace tp_test;

namespace {

// Sends itself `signal` at the start of the step that makes global_step `step` (so inside that
// step, as a signal from outside could land), or, with at_epoch_end, in that step's after_epoch.
struct RaiseAt {
  std::int64_t step;
  int signal;
  bool at_epoch_end = false;
  void before_step(auto& t) {
    if (!at_epoch_end && t.global_step() + 1 == step) std::raise(signal);
  }
  void after_epoch(auto& t) {
    if (at_epoch_end && t.global_step() == step) std::raise(signal);
  }
};

std::vector<std::int64_t> checkpoint_steps(const fs::path& folder) {
  std::vector<std::int64_t> steps;
  for (const auto& [step, path] : tp::list_checkpoints(folder)) steps.push_back(step);
  return steps;
}

// The weights of the MLP trained for 3 epochs of 7 steps without interruption.
std::vector<torch::Tensor> uninterrupted_weights() {
  auto trainer = mlp_trainer(3);
  trainer.train();
  return weights_of(trainer);
}

// Resumes from the checkpoints in `folder` and trains to the end of epoch 3.
std::vector<torch::Tensor> resumed_weights(const fs::path& folder) {
  std::ostringstream log;
  auto trainer = mlp_trainer(3, tp::ModelSaver(folder).log_to(log));
  const auto outcome = trainer.train();
  EXPECT_EQ(outcome.cause, tp::end_cause::completed);
  EXPECT_EQ(outcome.global_step, 21);
  return weights_of(trainer);
}

sighandler_t current_handler(int signal) {
  struct sigaction now {};
  ::sigaction(signal, nullptr, &now);
  return now.sa_handler;
}

}  // namespace

// --- in one process ----------------------------------------------------------------------------

TEST(Interrupt, ASignalInAStepEndsAfterThatStepWithAnOnStopCheckpointAndResumesExactly) {
  TempDir dir("interrupt_step");
  Spy spy;
  std::ostringstream log;
  auto trainer = mlp_trainer(3, spy, RaiseAt{10, SIGTERM}, tp::ModelSaver(dir.path).log_to(log));
  const auto outcome = trainer.train();
  EXPECT_EQ(outcome.cause, tp::end_cause::signal);
  EXPECT_EQ(outcome.signal, SIGTERM);
  EXPECT_EQ(outcome.global_step, 10);
  EXPECT_TRUE(outcome.interrupted());
  EXPECT_EQ(outcome.exit_status(), 128 + SIGTERM);
  // Step 10 (the third of epoch 2) finishes; the epoch is not closed; on_interrupt, then after_train.
  const std::vector<std::string> tail(spy.log->end() - 4, spy.log->end());
  EXPECT_EQ(tail, (std::vector<std::string>{"before_step 2/2/9", "after_step 2/2/10", "on_interrupt 2/2/10", "after_train 2/2/10"}));
  EXPECT_EQ(only(*spy.log, "after_epoch"), (std::vector<std::string>{"after_epoch 1/6/7"}));
  EXPECT_EQ(checkpoint_steps(dir.path), (std::vector<std::int64_t>{7, 10}));
  expect_bitwise_equal(resumed_weights(dir.path), uninterrupted_weights());
}

TEST(Interrupt, ASignalDuringTheEpochsEndLetsTheEpochCloseAndSavesItOnce) {
  // As an interactive shell leaves it: a job a script starts in the background begins with
  // SIGINT ignored (POSIX), and tp rightly keeps an ignored signal ignored.
  ::signal(SIGINT, SIG_DFL);
  TempDir dir("interrupt_epoch");
  Spy spy;
  std::ostringstream log;
  auto trainer = mlp_trainer(3, RaiseAt{14, SIGINT, /*at_epoch_end=*/true}, spy, tp::ModelSaver(dir.path).log_to(log));
  const auto outcome = trainer.train();
  EXPECT_EQ(outcome.cause, tp::end_cause::signal);
  EXPECT_EQ(outcome.signal, SIGINT);
  EXPECT_EQ(outcome.global_step, 14);
  const std::vector<std::string> tail(spy.log->end() - 3, spy.log->end());
  EXPECT_EQ(tail, (std::vector<std::string>{"after_epoch 2/6/14", "on_interrupt 2/6/14", "after_train 2/6/14"}));
  EXPECT_EQ(checkpoint_steps(dir.path), (std::vector<std::int64_t>{7, 14}));
  expect_bitwise_equal(resumed_weights(dir.path), uninterrupted_weights());
}

namespace {
struct StopAtThree {
  void after_step(auto& t) {
    if (t.global_step() == 3) t.request_stop();
  }
};
}  // namespace

TEST(Interrupt, AStopRequestStillClosesTheEpochAndIsNoInterruption) {
  Spy spy;
  auto trainer = mlp_trainer(3, StopAtThree{}, spy);
  const auto outcome = trainer.train();
  EXPECT_EQ(outcome.cause, tp::end_cause::stop_requested);
  EXPECT_FALSE(outcome.interrupted());
  EXPECT_EQ(outcome.exit_status(), 0);
  EXPECT_EQ(only(*spy.log, "after_epoch"), (std::vector<std::string>{"after_epoch 1/2/3"}));
  EXPECT_TRUE(only(*spy.log, "on_interrupt").empty());
  const auto completed = mlp_trainer(1).train();
  EXPECT_EQ(completed.cause, tp::end_cause::completed);
  EXPECT_EQ(completed.global_step, 7);
}

namespace {
void custom_handler(int) {}
struct Check {
  void before_step(auto&) {
    EXPECT_NE(current_handler(SIGTERM), custom_handler);  // tp's, during training
    EXPECT_NE(current_handler(SIGINT), SIG_DFL);
    EXPECT_EQ(current_handler(SIGUSR1), SIG_IGN);  // ignored before: stays ignored
  }
};
struct Throw {
  void after_step(auto&) { throw std::runtime_error("boom"); }
};
struct Untouched {
  void before_step(auto&) { EXPECT_EQ(current_handler(SIGTERM), custom_handler); }
};
}  // namespace

TEST(Interrupt, ThePreviousHandlersAreBackWhenTrainReturnsOrThrows) {
  ::signal(SIGTERM, custom_handler);
  ::signal(SIGUSR1, SIG_IGN);
  ::signal(SIGINT, SIG_DFL);
  mlp_trainer(1, Check{}).train();
  EXPECT_EQ(current_handler(SIGTERM), custom_handler);
  EXPECT_EQ(current_handler(SIGINT), SIG_DFL);
  EXPECT_EQ(current_handler(SIGUSR1), SIG_IGN);

  EXPECT_THROW(mlp_trainer(1, Throw{}).train(), std::runtime_error);
  EXPECT_EQ(current_handler(SIGTERM), custom_handler);
  EXPECT_EQ(current_handler(SIGINT), SIG_DFL);

  // An empty list leaves every handler as it is, during training too.
  mlp_trainer(tp::TrainOptions().steps_per_epoch(2).stop_signals({}), Untouched{}).train();
  ::signal(SIGTERM, SIG_DFL);
  ::signal(SIGUSR1, SIG_DFL);
}

TEST(Interrupt, BadOptionsAreClearErrors) {
  auto message = [](tp::TrainOptions options) {
    try {
      options.validate();
    } catch (const std::invalid_argument& e) {
      return std::string(e.what());
    }
    return std::string("no error");
  };
  EXPECT_NE(message(tp::TrainOptions().steps_per_epoch(1).max_time(std::chrono::milliseconds(-5))).find("max_time must be >= 0"), std::string::npos);
  EXPECT_NE(message(tp::TrainOptions().steps_per_epoch(1).stop_signals({SIGTERM, SIGKILL})).find("stop_signals holds 9, which is not a signal a process can catch"),
            std::string::npos);
  EXPECT_NE(message(tp::TrainOptions().steps_per_epoch(1).stop_signals({0})).find("stop_signals holds 0"), std::string::npos);
  EXPECT_EQ(message(tp::TrainOptions().steps_per_epoch(1).max_time(std::chrono::minutes(50))), "no error");
}

// --- the time budget ---------------------------------------------------------------------------

TEST(TimeBudget, LeavesRoomForTheNextStepTheEpochsEndAndACheckpoint) {
  using namespace std::chrono_literals;
  const auto start = tp::detail::time_budget::clock::now();
  tp::detail::time_budget budget(std::chrono::milliseconds(1000), start);
  EXPECT_TRUE(budget.allows_next_step(true, start + 999ms));  // nothing seen: nothing to reserve
  budget.saw_step(100ms);
  budget.saw_step(60ms);  // the longest counts
  // Step (100) + a checkpoint, as long as a step until one has been seen (100).
  EXPECT_TRUE(budget.allows_next_step(false, start + 800ms));
  EXPECT_FALSE(budget.allows_next_step(false, start + 801ms));
  budget.saw_checkpoint(30ms);
  budget.saw_epoch_end(200ms);
  EXPECT_TRUE(budget.allows_next_step(false, start + 870ms));
  EXPECT_FALSE(budget.allows_next_step(false, start + 871ms));
  EXPECT_TRUE(budget.allows_next_step(true, start + 670ms));  // the epoch's end too
  EXPECT_FALSE(budget.allows_next_step(true, start + 671ms));
  tp::detail::time_budget none(std::chrono::milliseconds(0), start);
  EXPECT_TRUE(none.allows_next_step(true, start + 1000h));
}

namespace {
// Each step works 30 ms more.
struct SlowStep {
  void before_step(auto&) { std::this_thread::sleep_for(std::chrono::milliseconds(30)); }
};
}  // namespace

TEST(Interrupt, MaxTimeEndsWithACheckpointThatResumesExactly) {
  TempDir dir("max_time");
  // 21 slow steps need 630 ms, more than the budget.
  std::ostringstream log;
  auto trainer = mlp_trainer(tp::TrainOptions().steps_per_epoch(7).max_epoch(3).max_time(std::chrono::milliseconds(300)), SlowStep{},
                             tp::ModelSaver(dir.path).log_to(log));
  const auto began = std::chrono::steady_clock::now();
  const auto outcome = trainer.train();
  const auto took = std::chrono::steady_clock::now() - began;
  EXPECT_EQ(outcome.cause, tp::end_cause::time_limit);
  EXPECT_TRUE(outcome.interrupted());
  EXPECT_EQ(outcome.exit_status(), 0);
  EXPECT_GE(outcome.global_step, 1);
  EXPECT_LT(outcome.global_step, 21);
  EXPECT_GE(took, std::chrono::milliseconds(30) * outcome.global_step);
  EXPECT_EQ(checkpoint_steps(dir.path).back(), outcome.global_step);  // the on-stop save
  expect_bitwise_equal(resumed_weights(dir.path), uninterrupted_weights());
}

// --- SLURM -------------------------------------------------------------------------------------

namespace {
// A stand-in for SLURM's scontrol on PATH: records its arguments, exits with `status`.
struct FakeScontrol {
  TempDir dir{"scontrol"};
  std::string old_path = std::getenv("PATH") ? std::getenv("PATH") : "";
  explicit FakeScontrol(int status = 0) {
    const auto script = dir.path / "scontrol";
    std::ofstream(script) << "#!/bin/sh\necho \"$@\" >> '" << (dir.path / "calls").string() << "'\nexit " << status << "\n";
    fs::permissions(script, fs::perms::owner_all);
    ::setenv("PATH", (dir.path.string() + ":" + old_path).c_str(), 1);
  }
  ~FakeScontrol() {
    ::setenv("PATH", old_path.c_str(), 1);
    for (const char* v : {"SLURM_JOB_ID", "SLURM_ARRAY_JOB_ID", "SLURM_ARRAY_TASK_ID"}) ::unsetenv(v);
  }
  std::string calls() const { return read_all(dir.path / "calls"); }
};

struct CheckpointFirst {
  fs::path folder;
  void after_train(auto&) { EXPECT_EQ(checkpoint_steps(folder).back(), 3); }
};

template <class... Extra>
tp::train_outcome interrupted_run(const fs::path& folder, int signal, std::ostream& log, Extra... extra) {
  auto trainer = mlp_trainer(3, RaiseAt{3, signal}, tp::ModelSaver(folder).log_to(log), tp::SlurmRequeue().log_to(log), extra...);
  return trainer.train();
}
}  // namespace

TEST(SlurmRequeue, OnSigusr1TheJobIsRequeuedAfterTheCheckpoint) {
  FakeScontrol scontrol;
  TempDir dir("slurm");
  ::setenv("SLURM_JOB_ID", "4242", 1);
  std::ostringstream log;
  const auto outcome = interrupted_run(dir.path, SIGUSR1, log, CheckpointFirst{dir.path});
  EXPECT_EQ(outcome.signal, SIGUSR1);
  EXPECT_EQ(outcome.global_step, 3);
  EXPECT_EQ(scontrol.calls(), "requeue 4242\n");
  EXPECT_NE(log.str().find("tp::SlurmRequeue: requeued job 4242 at global step 3"), std::string::npos) << log.str();

  ::setenv("SLURM_ARRAY_JOB_ID", "77", 1);  // a job array: the task is requeued
  ::setenv("SLURM_ARRAY_TASK_ID", "5", 1);
  TempDir array_dir("slurm_array");
  interrupted_run(array_dir.path, SIGUSR1, log);
  EXPECT_EQ(scontrol.calls(), "requeue 4242\nrequeue 77_5\n");
}

TEST(SlurmRequeue, OtherSignalsAndRunsOutsideSlurmAreNotRequeued) {
  FakeScontrol scontrol;
  TempDir dir("slurm_other");
  std::ostringstream log;
  ::setenv("SLURM_JOB_ID", "4242", 1);
  EXPECT_EQ(interrupted_run(dir.path / "a", SIGTERM, log).signal, SIGTERM);
  ::unsetenv("SLURM_JOB_ID");
  EXPECT_EQ(interrupted_run(dir.path / "b", SIGUSR1, log).signal, SIGUSR1);
  EXPECT_EQ(scontrol.calls(), "");
  EXPECT_NE(log.str().find("outside SLURM (SLURM_JOB_ID is not set): nothing to requeue"), std::string::npos) << log.str();
}

TEST(SlurmRequeue, AFailedRequeueOrABadJobIdIsAClearErrorAndTheCheckpointIsKept) {
  FakeScontrol failing(3);
  TempDir dir("slurm_fail");
  std::ostringstream log;
  ::setenv("SLURM_JOB_ID", "4242", 1);
  try {
    interrupted_run(dir.path / "a", SIGUSR1, log);
    ADD_FAILURE() << "no error";
  } catch (const std::runtime_error& e) {
    EXPECT_STREQ(e.what(), "tp::SlurmRequeue: `scontrol requeue 4242` failed with exit status 3 (global step 3 is saved: resubmit the job to resume)");
  }
  EXPECT_EQ(checkpoint_steps(dir.path / "a"), (std::vector<std::int64_t>{3}));
  ::setenv("SLURM_JOB_ID", "12ab", 1);
  try {
    interrupted_run(dir.path / "b", SIGUSR1, log);
    ADD_FAILURE() << "no error";
  } catch (const std::invalid_argument& e) {
    EXPECT_NE(std::string(e.what()).find("SLURM_JOB_ID=\"12ab\" is not a job id"), std::string::npos) << e.what();
  }
  ::setenv("SLURM_JOB_ID", "4242", 1);
  ::setenv("PATH", "/nonexistent", 1);
  try {
    interrupted_run(dir.path / "c", SIGUSR1, log);
    ADD_FAILURE() << "no error";
  } catch (const std::runtime_error& e) {
    EXPECT_NE(std::string(e.what()).find("could not requeue job 4242: cannot run scontrol: No such file or directory (it is not on PATH)"),
              std::string::npos)
        << e.what();
  }
}

// --- kill and resume ------------------------------------------------------------------------

namespace {

struct Child {
  pid_t pid = -1;
  int out = -1;   // its stdout
  int go_on = -1;  // in lockstep, its stdin: a byte lets it go on after the step it printed
};

Child spawn_worker(const fs::path& logdir, const fs::path& weights, bool lockstep = false) {
  int out[2], in[2];
  if (::pipe(out) != 0 || ::pipe(in) != 0) throw std::runtime_error("pipe failed");
  const char* const worker = TP_RESUME_WORKER;  // found before fork: the child only execs
  const pid_t pid = ::fork();
  if (pid == 0) {
    ::dup2(out[1], STDOUT_FILENO);
    ::dup2(in[0], STDIN_FILENO);
    for (int s : {SIGINT, SIGTERM, SIGUSR1}) ::signal(s, SIG_DFL);  // as a user's shell would leave them
    for (int fd : {out[0], out[1], in[0], in[1]}) ::close(fd);
    const int null = ::open((logdir.parent_path() / "worker.err").c_str(), O_WRONLY | O_CREAT | O_APPEND, 0644);
    ::dup2(null, STDERR_FILENO);  // the resume messages and any error, for the failure message
    ::execl(worker, worker, logdir.c_str(), weights.c_str(), lockstep ? "--lockstep" : static_cast<char*>(nullptr),
            static_cast<char*>(nullptr));
    ::_exit(127);
  }
  ::close(out[1]);
  ::close(in[0]);
  return {pid, out[0], in[1]};
}

int wait_for(pid_t pid) {
  int status = 0;
  ::waitpid(pid, &status, 0);
  return status;
}

// Runs resume_worker to its end without interruption; returns its weights.
std::string reference_run(const fs::path& dir) {
  const auto child = spawn_worker(dir / "reference", dir / "reference.bin");
  char buffer[4096];
  while (::read(child.out, buffer, sizeof buffer) > 0) {
  }
  ::close(child.out);
  ::close(child.go_on);
  const int status = wait_for(child.pid);
  EXPECT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0) << "the reference run failed";
  return read_all(dir / "reference.bin");
}

// Whether the inotify watch saw a checkpoint's temporary file created since the last call.
bool saw_checkpoint_write(int watch) {
  alignas(inotify_event) char events[4096];
  const auto n = ::read(watch, events, sizeof events);
  bool seen = false;
  for (char* p = events; p < events + n; p += sizeof(inotify_event) + reinterpret_cast<const inotify_event*>(p)->len) {
    const auto* e = reinterpret_cast<const inotify_event*>(p);
    seen = seen || (e->len && std::string(e->name).find(".ckpt.tmp.") != std::string::npos);
  }
  return seen;
}

// Reads what the worker printed and calls on_line with each whole line; false at its end.
template <class OnLine>
bool read_lines(int fd, std::string& pending, OnLine on_line) {
  char buffer[256];
  const auto n = ::read(fd, buffer, sizeof buffer);
  for (ssize_t i = 0; i < n; ++i) {
    if (buffer[i] != '\n') {
      pending += buffer[i];
      continue;
    }
    on_line(std::exchange(pending, std::string()));
  }
  return n > 0;
}

// The seed of a test that draws its moments at random: TP_TEST_SEED, to replay a failure, or a
// new one (the failure message gives it).
unsigned test_seed() {
  const char* given = std::getenv("TP_TEST_SEED");
  return given ? static_cast<unsigned>(std::stoul(given)) : std::random_device{}();
}

bool has_partial_write(const fs::path& dir) {
  for (const auto& e : fs::directory_iterator(dir))
    if (e.path().filename().string().find(".ckpt.tmp.") != std::string::npos) return true;
  return false;
}

}  // namespace

// A training process killed with SIGKILL at random moments (after a random
// number of steps, or while it writes its n-th checkpoint) and started again until it finishes
// ends with the very bits of a run that was never interrupted.
TEST(KillAndResume, SigkillAtRandomMomentsThenResumeGivesTheUninterruptedBits) {
  TempDir dir("kill");
  const auto killed_dir = dir.path / "killed";
  fs::create_directories(killed_dir);
  const auto reference = reference_run(dir.path);

  // The killed runs go in lockstep: after printing a step, a run waits to be told to go on, so
  // that it is killed exactly at the step drawn (with a free-running child, the steps it makes
  // while the kill is on its way made the count of kills depend on the machine's speed).
  constexpr int total_steps = 54;  // resume_worker: 6 epochs of 9 steps
  ::signal(SIGPIPE, SIG_IGN);      // a "go on" to a run that has just ended is an error, not a signal
  const auto seed = test_seed();
  std::mt19937 random(seed);
  SCOPED_TRACE("random seed " + std::to_string(seed));
  int kills = 0, kills_in_write = 0, runs = 0;
  for (bool finished = false; !finished; ++runs) {
    ASSERT_LT(runs, 40) << "the run never finished";
    // Every run is killed until there have been 8 kills (odd runs while they write their n-th
    // checkpoint, or at their last step if fewer writes are left); the runs after that finish.
    const bool killing = kills < 8;
    const bool during_write = killing && runs % 2 == 1;
    int after_steps = std::uniform_int_distribution<int>(1, 20)(random);
    const int at_write = std::uniform_int_distribution<int>(1, 3)(random);
    const int watch = ::inotify_init1(IN_CLOEXEC);
    ::inotify_add_watch(watch, killed_dir.c_str(), IN_CREATE);
    const auto child = spawn_worker(killed_dir, dir.path / "killed.bin", /*lockstep=*/true);
    int steps = 0, steps_left = total_steps, writes = 0;
    bool killed = false, open = true;
    std::string pending;
    while (open && !killed) {
      pollfd fds[2] = {{child.out, POLLIN, 0}, {watch, POLLIN, 0}};
      ::poll(fds, 2, -1);
      if ((fds[1].revents & POLLIN) && saw_checkpoint_write(watch) && ++writes == at_write && during_write) {
        ::kill(child.pid, SIGKILL);
        killed = true;
      }
      if (killed || !(fds[0].revents & (POLLIN | POLLHUP))) continue;
      open = read_lines(child.out, pending, [&](const std::string& line) {
        if (killed) return;
        if (line.starts_with("step ") && ++steps == 1)  // where the run resumed: how many steps it has left
          steps_left = total_steps - std::stoi(line.substr(5)) + 1;
        if (line.starts_with("step ") && killing && steps == (during_write ? steps_left : std::min(after_steps, steps_left))) {
          ::kill(child.pid, SIGKILL);
          killed = true;
        } else if (::write(child.go_on, "g", 1) != 1) {
          open = false;  // it has gone: its output ends too
        }
      }) && open;
    }
    ::close(child.go_on);
    ::close(child.out);
    ::close(watch);
    const int status = wait_for(child.pid);
    if (killed && WIFSIGNALED(status)) {
      ++kills;
      kills_in_write += has_partial_write(killed_dir);
    } else {
      ASSERT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0) << "run " << runs << " failed";
      finished = true;
    }
  }
  std::cout << "[          ] " << kills << " kills, " << kills_in_write << " during a checkpoint write, " << runs << " runs\n";
  EXPECT_EQ(kills, 8);
  EXPECT_GE(kills_in_write, 1);
  const auto resumed = read_all(dir.path / "killed.bin");
  ASSERT_GT(reference.size(), 1000000u);
  EXPECT_TRUE(reference == resumed) << "the resumed run's weights differ from the uninterrupted run's";
}


namespace {

// Whether `signal` is among the signals a process catches (/proc/<pid>/status, SigCgt).
bool catches(pid_t pid, int signal) {
  std::ifstream status("/proc/" + std::to_string(pid) + "/status");
  for (std::string line; std::getline(status, line);)
    if (line.starts_with("SigCgt:")) return (std::stoull(line.substr(7), nullptr, 16) >> (signal - 1)) & 1;
  return false;
}

}  // namespace

// The test: SIGINT or SIGTERM sent to a training process at random moments (inside a
// step's forward pass, between steps, inside a validation batch, while a checkpoint is being
// written) ends it after the step in progress, with exit status 128 + the signal, having saved
// that step; running it again until it finishes gives the bits of a run never interrupted.
TEST(SignalAndResume, SigintAndSigtermAtRandomMomentsStopAfterTheCurrentStepAndResumeToTheUninterruptedBits) {
  TempDir dir("signal");
  const auto reference = reference_run(dir.path);
  const auto logdir = dir.path / "interrupted";
  fs::create_directories(logdir);
  ::signal(SIGPIPE, SIG_IGN);
  const auto seed = test_seed();
  std::mt19937 random(seed);
  SCOPED_TRACE("random seed " + std::to_string(seed));
  enum moment { in_step, between_steps, in_validation, in_checkpoint_write };
  const char* moment_names[] = {"in a step", "between steps", "in a validation", "in a checkpoint write"};
  int interrupted[4] = {};
  int interruptions = 0;
  for (int runs = 0;; ++runs) {
    ASSERT_LT(runs, 30) << "the run never finished";
    // Each moment twice, in turn; then a run that finishes.
    const bool interrupting = interruptions < 8;
    const auto when = static_cast<moment>(interruptions % 4);
    const int signal = std::uniform_int_distribution<int>(0, 1)(random) ? SIGINT : SIGTERM;
    int skip = when == in_step || when == between_steps ? std::uniform_int_distribution<int>(0, 3)(random) : 0;
    const int watch = ::inotify_init1(IN_CLOEXEC);
    ::inotify_add_watch(watch, logdir.c_str(), IN_CREATE);
    const auto child = spawn_worker(logdir, dir.path / "interrupted.bin", /*lockstep=*/true);
    bool sent = false, open = true, late = false;
    std::int64_t last_step = -1, expected_last = -1, reported = -1;
    std::int64_t computing = -1;  // the step in progress ("compute N" read, "step N" not yet), or -1
    std::chrono::steady_clock::time_point sent_at;
    std::string pending;
    auto send = [&](std::int64_t stops_after) {
      ::kill(child.pid, signal);
      sent = true;
      sent_at = std::chrono::steady_clock::now();
      expected_last = stops_after;
    };
    while (open) {
      pollfd fds[2] = {{child.out, POLLIN, 0}, {watch, POLLIN, 0}};
      if (::poll(fds, 2, 60'000) == 0) {
        ::kill(child.pid, SIGKILL);
        FAIL() << "the worker said nothing for 60 s" << (sent ? " after the signal" : "");
      }
      // Checkpoints are written in the background: the next step may already be in progress
      // while the write goes on, and the run then stops after that step (and no later one).
      if ((fds[1].revents & POLLIN) && saw_checkpoint_write(watch) && interrupting && !sent && when == in_checkpoint_write && skip-- == 0) {
        late = computing >= 0;
        send(computing >= 0 ? computing : last_step);
      }
      if (!(fds[0].revents & (POLLIN | POLLHUP))) continue;
      open = read_lines(child.out, pending, [&](const std::string& line) {
        // (A stream, not line.find(' '): g++ 12 warns, wrongly, about the memchr that find inlines.)
        std::istringstream words(line);
        std::string kind;
        words >> kind;
        const auto step = std::stoll(line.substr(line.rfind(' ') + 1));
        if (kind == "interrupted") {
          reported = step;
          return;
        }
        // A write seen by inotify may be over before the signal lands, and the run may then
        // begin the next step (and stop after it); any other step begun after it is a failure.
        if (sent && kind == "compute" && when == in_checkpoint_write && !late && step == expected_last + 1) {
          late = true;
          expected_last = step;
        }
        EXPECT_FALSE(sent && kind == "compute" && step > expected_last) << "step " << step << " began after the signal";
        // "compute N": step N is in progress; "step N" and "validate N": N steps are done (a run
        // resumed at an epoch's end validates before any step).
        if (kind != "compute") last_step = step;
        computing = kind == "compute" ? step : kind == "step" ? -1 : computing;
        if (interrupting && !sent && ((when == in_step && kind == "compute") || (when == between_steps && kind == "step") ||
                                      (when == in_validation && kind == "validate"))) {
          if (skip-- == 0) send(step);
        }
        if (::write(child.go_on, "g", 1) != 1) open = false;
      }) && open;
    }
    ::close(child.go_on);
    ::close(child.out);
    ::close(watch);
    const int status = wait_for(child.pid);
    if (!sent) {
      ASSERT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0) << "run " << runs << " failed (status " << status << "): "
                                                                  << read_all(dir.path / "worker.err");
      break;
    }
    SCOPED_TRACE(std::string("signal ") + (signal == SIGINT ? "SIGINT " : "SIGTERM ") + moment_names[when] + ", run " + std::to_string(runs));
    const auto took = std::chrono::steady_clock::now() - sent_at;
    EXPECT_LT(took, std::chrono::seconds(30)) << "it took that long to stop";
    ASSERT_TRUE(WIFEXITED(status)) << "it died of signal " << WTERMSIG(status);
    EXPECT_EQ(WEXITSTATUS(status), 128 + signal);
    EXPECT_EQ(reported, expected_last) << "it stopped after another step than the one in progress";
    EXPECT_EQ(last_step, expected_last);
    EXPECT_EQ(checkpoint_steps(logdir).back(), expected_last) << "the step it stopped after is not saved";
    ++interrupted[when];
    ++interruptions;
  }
  std::cout << "[          ] interrupted " << interrupted[0] << "x in a step, " << interrupted[1] << "x between steps, "
            << interrupted[2] << "x in a validation, " << interrupted[3] << "x in a checkpoint write\n";
  for (int m = 0; m < 4; ++m) EXPECT_GE(interrupted[m], 1) << "never interrupted " << moment_names[m];
  EXPECT_TRUE(read_all(dir.path / "interrupted.bin") == reference) << "the resumed run's weights differ from the uninterrupted run's";
}

// The first SIGINT asks for a graceful stop; a second one, while the step is still running,
// ends the process at once, as SIGINT does without tp.
TEST(SignalAndResume, ASecondSigintEndsTheProcessAtOnce) {
  TempDir dir("second_sigint");
  const auto child = spawn_worker(dir.path, dir.path / "w.bin", /*lockstep=*/true);
  std::string seen;
  char c;
  while (seen.find("compute 2\n") == std::string::npos && ::read(child.out, &c, 1) == 1) {
    seen += c;
    if (c == '\n' && seen.find("compute 2\n") == std::string::npos) {
      ASSERT_EQ(::write(child.go_on, "g", 1), 1);
    }
  }
  ASSERT_TRUE(catches(child.pid, SIGINT));
  ::kill(child.pid, SIGINT);  // the worker waits inside step 2: the stop is only recorded
  // The first one has been handled once SIGINT is no longer caught (its handler is reset).
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(30);
  while (catches(child.pid, SIGINT) && std::chrono::steady_clock::now() < deadline) std::this_thread::yield();
  EXPECT_FALSE(catches(child.pid, SIGINT));
  ::kill(child.pid, SIGINT);
  const int status = wait_for(child.pid);
  ::close(child.go_on);
  ::close(child.out);
  EXPECT_TRUE(WIFSIGNALED(status) && WTERMSIG(status) == SIGINT) << "status " << status;
}

// The stop vote's reader (policies/distribution/detail/stop_vote.hpp): read at once from host memory, or one
// boundary later (what a GPU's votes get: their copy to the host is not waited for), and
// whatever is still unread at an epoch's end.
TEST(StopVoteReader, ReadsAtOnceOrOneBoundaryLaterAndDrainsAtTheEpochsEnd) {
  namespace sv = tp::detail::stop_vote;
  auto slots = [](std::initializer_list<int> codes) {
    auto v = torch::zeros({2, sv::slots});  // two ranks' slots, as gathered
    int rank = 0;
    for (int code : codes) {
      if (code != 0) v[rank][sv::slot_of(code)] = 1;
      ++rank;
    }
    return v;
  };
  sv::reader now(false), later(true);
  for (auto* r : {&now, &later}) r->post(slots({0, 0}));
  EXPECT_EQ(now.at_boundary(), 0);
  EXPECT_EQ(later.at_boundary(), 0) << "nothing read yet";
  for (auto* r : {&now, &later}) r->post(slots({1, 1000 + 15}));
  EXPECT_EQ(now.at_boundary(), 1000 + 15) << "the largest code, at once";
  EXPECT_EQ(later.at_boundary(), 0) << "the step before's votes";
  for (auto* r : {&now, &later}) r->post(slots({2, 0}));
  EXPECT_EQ(now.at_boundary(), 2);
  EXPECT_EQ(later.at_boundary(), 1000 + 15) << "one boundary later";
  EXPECT_EQ(now.drain(), 0);
  EXPECT_EQ(later.drain(), 2) << "the epoch's end reads what is left";
  EXPECT_EQ(later.drain(), 0);
  later.post(slots({0, 1}));
  EXPECT_EQ(later.at_boundary(), 0);
}
