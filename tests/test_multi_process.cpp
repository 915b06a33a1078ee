// Multi-process training with Gloo: ranks are real processes (mp_worker) started here with the
// environment a launcher sets, or by tp-run. This file does not include LibTorch: it compares
// the weight files the ranks write.
#include <gtest/gtest.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <map>
#include <random>
#include <set>
#include <sstream>
#include <string>
#include <vector>

#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>
#include <netinet/in.h>
#include <sys/socket.h>

#include <tp/distributed/free_port.hpp>

#include "multi_process/process_helpers.hpp"

namespace fs = std::filesystem;

namespace {

using namespace tp_test;

// `world` ranks with batch 8, each step over `accumulate` micro-batches, against one process with
// a batch world x accumulate times larger.
// With a loss scale, both sides scale dynamically from it; both use the optimizer named; with
// `scripted`, both train a TorchScript MLP that Python writes.
void expect_same_training(int world, int accumulate = 1, std::string loss_scale = "0", std::string optimizer = "sgd", bool scripted = false) {
  TempDir dir("equal" + std::to_string(world) + "_" + std::to_string(accumulate));
  const auto out = (dir.path / "w").string();
  std::vector<std::string> common{"--steps",      "20",       "--batch",     "8",      "--accumulate", std::to_string(accumulate),
                                  "--loss-scale", loss_scale, "--optimizer", optimizer};
  if (scripted) {
    const std::string line = std::string(TP_PYTHON) + " " + tp_test::source_dir() + "/tests/scripted/reference_scripted.py mlp " + dir.path.string();
    ASSERT_EQ(std::system(line.c_str()), 0) << line;
    common.insert(common.end(), {"--scripted", (dir.path / "mlp.pt").string()});
  }
  auto flags = [&](std::vector<std::string> more) {
    more.insert(more.begin(), common.begin(), common.end());
    return more;
  };
  auto ranks = start_ranks(world, flags({"--out", out}), tp::free_local_port());
  auto single = start(worker(flags({"--out", (dir.path / "single").string(), "--single", std::to_string(world)})), {});
  for (auto& r : ranks) r.finish();
  single.finish();
  // Every rank's output on a failure: the first rank to fail is often not rank 0.
  std::string outputs;
  for (int r = 0; r < world; ++r) outputs += "rank " + std::to_string(r) + ":\n" + ranks[static_cast<std::size_t>(r)].output;
  for (const auto& r : ranks) ASSERT_TRUE(r.succeeded()) << outputs;
  ASSERT_TRUE(single.succeeded()) << single.output;
  // Every rank holds the same weights, bit for bit ...
  for (int r = 1; r < world; ++r) EXPECT_EQ(bytes(out + ".0"), bytes(out + "." + std::to_string(r))) << "rank " << r;
  // ... and they are those of one process with world x accumulate x the batch, up to float rounding.
  const auto a = floats(out + ".0"), b = floats(dir.path / "single");
  ASSERT_EQ(a.size(), b.size());
  ASSERT_GT(a.size(), 200u);
  double worst = 0;
  for (std::size_t i = 0; i < a.size(); ++i) worst = std::max(worst, static_cast<double>(std::abs(a[i] - b[i])));
  EXPECT_LT(worst, 2e-5) << "largest difference from the one-process run";
  // One all-reduce per bucket per optimizer step, whatever the micro-batches: none runs for a
  // micro-batch that is not the last of its step.
  for (const auto& r : ranks) {
    const auto at = r.output.find("all-reduces ");
    ASSERT_NE(at, std::string::npos) << r.output;
    long long reduces = 0, early = 0, steps = 0, buckets = 0;
    ASSERT_EQ(std::sscanf(r.output.c_str() + at, "all-reduces %lld (%lld before a last micro-batch) in %lld steps of %lld buckets", &reduces,
                          &early, &steps, &buckets),
              4)
        << r.output;
    EXPECT_EQ(steps, 20);
    EXPECT_GT(buckets, 1);
    EXPECT_EQ(reduces, steps * buckets);
    EXPECT_EQ(early, 0);
  }
}

}  // namespace

TEST(MultiProcessGloo, TwoRanksTrainAsOneProcessWithTwiceTheBatch) { expect_same_training(2); }
TEST(MultiProcessGloo, FourRanksTrainAsOneProcessWithFourTimesTheBatch) { expect_same_training(4); }
TEST(MultiProcessGloo, TwoRanksAccumulatingTwoMicroBatchesTrainAsOneProcessWithFourTimesTheBatch) { expect_same_training(2, 2); }
// Loss scaling from 1024 (a power of two, doubling every 3 updates, never overflowing here)
// changes nothing: the ranks reduce scaled gradients and unscale the sum.
TEST(MultiProcessGloo, TwoRanksAccumulatingWithLossScalingTrainAsOneProcessWithFourTimesTheBatch) { expect_same_training(2, 2, "1024"); }

// tp's optimizers under MultiProcess: their state reaches every rank at start (through their
// save and load), and the ranks train as one process.
TEST(MultiProcessGloo, TwoRanksWithNAdamTrainAsOneProcessWithTwiceTheBatch) { expect_same_training(2, 1, "0", "nadam"); }
TEST(MultiProcessGloo, TwoRanksWithLambTrainAsOneProcessWithTwiceTheBatch) { expect_same_training(2, 1, "0", "lamb"); }
// A TorchScript model from Python: its shared tensors carry the all-reduce hooks like a C++ module's.
TEST(MultiProcessGloo, TwoRanksTrainAScriptedModelAsOneProcessWithTwiceTheBatch) { expect_same_training(2, 1, "0", "sgd", true); }

// From a scale of 2^127 the first gradients overflow. The ranks check the reduced gradients, so
// they skip the same updates and back off the same way: they end with the same weights and scale.
TEST(MultiProcessGloo, RanksSkipTheSameOverflowingUpdatesWithLossScaling) {
  TempDir dir("loss_scale_skip");
  const auto out = (dir.path / "w").string();
  auto ranks = start_ranks(2, {"--steps", "15", "--batch", "8", "--loss-scale", "1.7014118346046923e38", "--out", out}, tp::free_local_port());
  for (auto& r : ranks) r.finish();
  std::vector<std::string> scales;
  for (const auto& r : ranks) {
    ASSERT_TRUE(r.succeeded()) << r.output;
    const auto at = r.output.find("loss scale ");
    ASSERT_NE(at, std::string::npos) << r.output;
    scales.push_back(r.output.substr(at, r.output.find('\n', at) - at));
    long long skipped = 0;
    double scale = 0;
    ASSERT_EQ(std::sscanf(scales.back().c_str(), "loss scale %lf after %lld skipped updates", &scale, &skipped), 2) << scales.back();
    EXPECT_GT(skipped, 0) << r.output;
    EXPECT_LT(skipped, 15) << r.output;
  }
  EXPECT_EQ(scales[0], scales[1]);
  EXPECT_EQ(bytes(out + ".0"), bytes(out + ".1"));
}

TEST(MultiProcessGloo, ReducingAfterBackwardGivesTheSameWeightsAsOverlapping) {
  TempDir dir("overlap");
  const auto port_a = tp::free_local_port();
  auto a = start_ranks(2, {"--steps", "10", "--out", (dir.path / "on").string(), "--overlap", "1"}, port_a);
  for (auto& r : a) r.finish();
  auto b = start_ranks(2, {"--steps", "10", "--out", (dir.path / "off").string(), "--overlap", "0"}, tp::free_local_port());
  for (auto& r : b) r.finish();
  for (auto& r : a) ASSERT_TRUE(r.succeeded()) << r.output;
  for (auto& r : b) ASSERT_TRUE(r.succeeded()) << r.output;
  EXPECT_EQ(bytes(dir.path / "on.0"), bytes(dir.path / "off.0"));
}

// fp16 gradients on the wire (divided by the ranks first, summed in fp16, back to fp32): the same
// weights as fp32 all-reduce within fp16's rounding over 20 steps of SGD (a relative error of
// 2^-11 per gradient element and step), and the ranks agree bit for bit.
TEST(MultiProcessGloo, CompressedAllReduceGivesTheWeightsOfFp32WithinFp16Rounding) {
  TempDir dir("compress");
  auto a = start_ranks(2, {"--steps", "20", "--out", (dir.path / "fp32").string()}, tp::free_local_port());
  for (auto& r : a) r.finish();
  auto b = start_ranks(2, {"--steps", "20", "--out", (dir.path / "fp16").string(), "--compress", "fp16"}, tp::free_local_port());
  for (auto& r : b) r.finish();
  for (auto& r : a) ASSERT_TRUE(r.succeeded()) << r.output;
  for (auto& r : b) ASSERT_TRUE(r.succeeded()) << r.output;
  EXPECT_EQ(bytes(dir.path / "fp16.0"), bytes(dir.path / "fp16.1"));
  const auto x = floats(dir.path / "fp32.0"), y = floats(dir.path / "fp16.0");
  ASSERT_EQ(x.size(), y.size());
  double worst = 0;
  for (std::size_t i = 0; i < x.size(); ++i) worst = std::max(worst, static_cast<double>(std::abs(x[i] - y[i])));
  EXPECT_GT(worst, 0) << "fp16 on the wire changed nothing: was it used?";
  EXPECT_LT(worst, 1e-3) << "largest difference between fp16 and fp32 all-reduce";
  std::cout << "fp16 against fp32 on the wire, 20 steps: largest weight difference " << worst << "\n";
}

TEST(MultiProcessGloo, WhenARankDiesTheOthersFailNamingIt) {
  TempDir dir("die");
  const auto begin = std::chrono::steady_clock::now();
  auto ranks = start_ranks(3, {"--steps", "40", "--out", (dir.path / "w").string(), "--timeout-ms", "4000", "--die-rank", "1", "--die-at", "5"},
                           tp::free_local_port());
  for (auto& r : ranks) r.finish();
  const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - begin).count();
  EXPECT_TRUE(WIFSIGNALED(ranks[1].status) && WTERMSIG(ranks[1].status) == SIGKILL);
  for (int r : {0, 2}) {
    const auto& p = ranks[static_cast<std::size_t>(r)];
    EXPECT_TRUE(WIFEXITED(p.status) && WEXITSTATUS(p.status) != 0) << "rank " << r << " did not fail:\n" << p.output;
    EXPECT_NE(p.output.find("rank 1 did not answer"), std::string::npos) << "rank " << r << ":\n" << p.output;
  }
  EXPECT_LT(seconds, 4 + 4 + 10) << "the others took too long to give up";  // timeout + diagnosis window + start-up
}

TEST(MultiProcessGloo, WhenARankStallsTheOthersFailWithinTheTimeout) {
  TempDir dir("stall");
  const auto begin = std::chrono::steady_clock::now();
  auto ranks = start_ranks(2, {"--steps", "40", "--out", (dir.path / "w").string(), "--timeout-ms", "3000", "--stall-rank", "1", "--stall-at", "5"},
                           tp::free_local_port());
  ranks[0].finish();
  const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - begin).count();
  ::kill(ranks[1].pid, SIGKILL);
  ::kill(ranks[1].pid, SIGCONT);
  ranks[1].finish();
  EXPECT_TRUE(WIFEXITED(ranks[0].status) && WEXITSTATUS(ranks[0].status) != 0) << ranks[0].output;
  EXPECT_NE(ranks[0].output.find("rank 1 did not answer"), std::string::npos) << ranks[0].output;
  EXPECT_LT(seconds, 3 + 3 + 10);
}

// Every rank killed with SIGKILL at random steps (while checkpoints are written in the background,
// or not), then started again, until the run ends: it ends with the bits of a run never killed.
void expect_kills_lose_nothing(const std::string& name, std::vector<std::string> common) {
  TempDir dir(name);
  common.insert(common.end(), {"--steps", "30", "--save-every", "4"});
  const auto flags = resume_flags(dir.path, common);
  ASSERT_NO_FATAL_FAILURE(run_two_ranks(flags("reference", "reference")));

  const auto seed = std::random_device{}();
  std::mt19937 random(seed);
  SCOPED_TRACE("random seed " + std::to_string(seed));
  int kills = 0;
  for (int run = 0;; ++run) {
    ASSERT_LT(run, 20) << "the run never finished";
    auto ranks = start_ranks(2, flags("killed", "killed"), tp::free_local_port());
    const int at = std::uniform_int_distribution<int>(2, 12)(random);
    bool killed = false;
    if (run < 4 && ranks[0].read_until("step " + std::to_string(at) + "\n")) {
      for (auto& r : ranks) ::kill(r.pid, SIGKILL);  // every rank, at once
      killed = true;
    }
    for (auto& r : ranks) r.finish();
    if (killed) {
      ++kills;
      continue;
    }
    for (auto& r : ranks) ASSERT_TRUE(r.succeeded()) << r.output;
    break;
  }
  EXPECT_GE(kills, 1);
  EXPECT_EQ(bytes(dir.path / "killed.0"), bytes(dir.path / "reference.0"));
  EXPECT_EQ(bytes(dir.path / "killed.1"), bytes(dir.path / "reference.1"));
}
TEST(MultiProcessGloo, EveryRankKilledThenResumedEndsWithTheUninterruptedBits) { expect_kills_lose_nothing("resume", {}); }
// Sharded, each rank writes its own part of every checkpoint: a kill may leave a checkpoint
// whose parts are not all there, which resuming passes over. With dropout, each rank seeded
// apart: the step's randomness keyed by (seed, step, micro-batch) needs no rank's generator in
// the checkpoint (only rank 0's is there).
TEST(MultiProcessGloo, EveryShardedRankKilledThenResumedEndsWithTheUninterruptedBits) {
  expect_kills_lose_nothing("resume_sharded", {"--shard", "gradients", "--optimizer", "adam", "--dropout", "0.2", "--keyed", "7"});
}

// Fewer validation examples than ranks: each rank's equal share is empty, which is refused
// before the first step, on every rank, not at the first epoch's end.
TEST(MultiProcessGloo, ValidationWithFewerExamplesThanRanksIsRefusedAtStart) {
  TempDir dir("val_share");
  auto some = start_ranks(2, {"--steps", "5", "--val-examples", "3", "--out", (dir.path / "w").string()}, tp::free_local_port());
  for (auto& r : some) {
    r.finish();
    EXPECT_TRUE(r.succeeded()) << r.output;
  }
  EXPECT_NE(some[0].output.find("epoch 1 val_loss "), std::string::npos) << some[0].output;
  auto none = start_ranks(2, {"--steps", "5", "--val-examples", "1", "--out", (dir.path / "w").string()}, tp::free_local_port());
  for (auto& r : none) {
    r.finish();
    EXPECT_FALSE(r.succeeded()) << r.output;
    EXPECT_NE(r.output.find("the validation dataflow is empty on every one of the 2 processes"), std::string::npos) << r.output;
    EXPECT_EQ(r.output.find("step 1"), std::string::npos) << r.output;
  }
}

// --- resuming on another number of ranks ----------------------------------------------------------

// The example ids that `world` ranks wrote to <out>.ids.<rank>, appended to `ids`.
void read_ids(const std::string& out, int world, std::vector<long long>& ids) {
  for (int r = 0; r < world; ++r) {
    std::ifstream in(out + ".ids." + std::to_string(r));
    ASSERT_TRUE(in) << out << ".ids." << r;
    for (long long id; in >> id;) ids.push_back(id);
  }
}

// `before` ranks train `steps_before` steps of batch 8 and checkpoint; `after` ranks resume from
// there and train to the end of the pass (256 examples) at step `steps_total`. Across the
// interruption, every example is trained on exactly once, and the resumed chief says what
// changed in one line.
// `shard_before` and `shard_after`: the runs' --shard (a sharded run's checkpoint is its ranks'
// parts, which the other layout reads as it needs them).
void expect_resharded(int before, int steps_before, int after, int steps_total, const std::string& says,
                      const std::string& shard_before = "none", const std::string& shard_after = "none") {
  TempDir dir("reshard" + std::to_string(before) + std::to_string(after) + shard_before + shard_after);
  const std::vector<std::string> common{"--batch", "8", "--steps-per-epoch", "1", "--save-every", "1000", "--ids", "1", "--optimizer", "adam",
                                        "--logdir", (dir.path / "log").string()};
  auto with = [&](std::vector<std::string> more) {
    more.insert(more.begin(), common.begin(), common.end());
    return more;
  };
  {
    auto ranks = start_ranks(before, with({"--steps", std::to_string(steps_before), "--shard", shard_before, "--out", (dir.path / "a").string()}),
                             tp::free_local_port());
    for (auto& r : ranks) r.finish();
    for (auto& r : ranks) ASSERT_TRUE(r.succeeded()) << r.output;
  }
  auto ranks = start_ranks(after, with({"--steps", std::to_string(steps_total), "--shard", shard_after, "--out", (dir.path / "b").string()}),
                           tp::free_local_port());
  for (auto& r : ranks) r.finish();
  for (auto& r : ranks) ASSERT_TRUE(r.succeeded()) << r.output;
  EXPECT_NE(ranks[0].output.find("tp::ModelSaver: " + says + "\n"), std::string::npos) << ranks[0].output;
  std::vector<long long> ids;
  ASSERT_NO_FATAL_FAILURE(read_ids((dir.path / "a").string(), before, ids));
  ASSERT_NO_FATAL_FAILURE(read_ids((dir.path / "b").string(), after, ids));
  std::sort(ids.begin(), ids.end());
  std::vector<long long> every(256);
  for (long long i = 0; i < 256; ++i) every[static_cast<std::size_t>(i)] = i;
  EXPECT_EQ(ids, every) << "each of the pass's 256 examples exactly once";
}

TEST(MultiProcessReshard, TwoRanksThenOneSeeEveryExampleOnce) {
  // 2 x 8 x 5 = 80 examples, then 22 steps of 8.
  expect_resharded(2, 5, 1, 27, "resumed on 1 process x 1 batch of 8 per step from a checkpoint of 2 processes x 1 batch of 8 per step: global batch 16 -> 8");
}
TEST(MultiProcessReshard, OneRankThenTwoSeeEveryExampleOnce) {
  // 8 x 6 = 48, then 13 steps of 2 x 8.
  expect_resharded(1, 6, 2, 19, "resumed on 2 processes x 1 batch of 8 per step from a checkpoint of 1 process x 1 batch of 8 per step: global batch 8 -> 16");
}
TEST(MultiProcessReshard, TwoRanksThenFourSeeEveryExampleOnce) {
  // 80, then 176 / 4 = 44 each: five batches of 8 and one of 4.
  expect_resharded(2, 5, 4, 11, "resumed on 4 processes x 1 batch of 8 per step from a checkpoint of 2 processes x 1 batch of 8 per step: global batch 16 -> 32");
}
// The same with sharded runs: 2 sharded ranks, then 1 unsharded; 2 sharded, then 4 sharded
// otherwise; 4 sharded, then 2 sharded.
TEST(MultiProcessReshard, ShardedRanksThenAnotherLayoutSeeEveryExampleOnce) {
  expect_resharded(2, 5, 1, 27, "resumed on 1 process x 1 batch of 8 per step from a checkpoint of 2 processes x 1 batch of 8 per step: global batch 16 -> 8",
                   "gradients", "none");
  expect_resharded(2, 5, 4, 11, "resumed on 4 processes x 1 batch of 8 per step from a checkpoint of 2 processes x 1 batch of 8 per step: global batch 16 -> 32",
                   "optimizer", "gradients");
  // 4 x 8 x 3 = 96, then 160 / 16 = 10 steps of 2 x 8.
  expect_resharded(4, 3, 2, 13, "resumed on 2 processes x 1 batch of 8 per step from a checkpoint of 4 processes x 1 batch of 8 per step: global batch 32 -> 16",
                   "gradients", "gradients");
}

// The newest checkpoint's global step in a folder of model-<step>.ckpt files (-1: none).
// A stop signal at one rank (the other knows nothing of it), or at every rank (as torchrun and
// SLURM send it), stops both after the same step, with the same exit status; the chief has
// saved that step, and the runs resumed from there end with the bits of an uninterrupted run.
TEST(MultiProcessGloo, ASignalAtOneRankOrEveryRankStopsAllAfterTheSameStepAndResumesExactly) {
  TempDir dir("signal");
  const auto flags = resume_flags(dir.path, {"--steps", "30", "--save-every", "4", "--step-ms", "15"});
  ASSERT_NO_FATAL_FAILURE(run_two_ranks(flags("reference", "reference")));

  const auto seed = std::random_device{}();
  std::mt19937 random(seed);
  SCOPED_TRACE("random seed " + std::to_string(seed));
  struct Case {
    const char* what;
    int signal;
    bool every_rank;
    int watched_rank;
  };
  const Case cases[] = {{"SIGTERM at rank 1 only", SIGTERM, false, 1}, {"SIGINT at every rank", SIGINT, true, 0},
                        {"SIGUSR1 at rank 0 only", SIGUSR1, false, 0}};
  long long stopped_at = 0;
  for (const auto& c : cases) {
    SCOPED_TRACE(c.what);
    auto ranks = start_ranks(2, flags("interrupted", "interrupted"), tp::free_local_port());
    const long long at = stopped_at + std::uniform_int_distribution<int>(2, 5)(random);
    ASSERT_TRUE(ranks[c.watched_rank].read_until("step " + std::to_string(at) + "\n")) << ranks[c.watched_rank].output;
    for (int r = 0; r < 2; ++r)
      if (c.every_rank || r == c.watched_rank) ::kill(ranks[r].pid, c.signal);
    for (auto& r : ranks) r.finish();
    for (auto& r : ranks) {
      ASSERT_TRUE(WIFEXITED(r.status)) << r.output;
      EXPECT_EQ(WEXITSTATUS(r.status), 128 + c.signal) << r.output;
    }
    const auto step = interrupted_at(ranks[0].output);
    EXPECT_EQ(interrupted_at(ranks[1].output), step) << "the ranks stopped after different steps";
    EXPECT_GE(step, at);
    EXPECT_LE(step, at + 3) << "it went on for long after the signal";
    EXPECT_EQ(newest_checkpoint(dir.path / "interrupted"), step) << "the chief did not save the step it stopped after";
    stopped_at = step;
  }
  ASSERT_NO_FATAL_FAILURE(run_two_ranks(flags("interrupted", "interrupted")));
  EXPECT_EQ(bytes(dir.path / "interrupted.0"), bytes(dir.path / "reference.0"));
  EXPECT_EQ(bytes(dir.path / "interrupted.1"), bytes(dir.path / "reference.1"));
}

TEST(MultiProcessGloo, ABadEnvironmentIsAClearError) {
  struct Case {
    std::map<std::string, std::string> env;
    std::string message;
  };
  const std::vector<Case> cases{
      {{{"RANK", "0"}, {"WORLD_SIZE", "two"}, {"MASTER_ADDR", "127.0.0.1"}}, "WORLD_SIZE is 'two', but it must be the number of processes"},
      {{{"RANK", "2"}, {"WORLD_SIZE", "2"}, {"MASTER_ADDR", "127.0.0.1"}}, "RANK is '2', but it must be this process's rank, an integer from 0 to 1"},
      {{{"RANK", "0"}, {"MASTER_ADDR", "127.0.0.1"}}, "RANK is set but WORLD_SIZE is not"},
      {{{"RANK", "0"}, {"WORLD_SIZE", "2"}}, "MASTER_ADDR is not set"},
      {{{"RANK", "0"}, {"WORLD_SIZE", "2"}, {"MASTER_ADDR", "127.0.0.1"}, {"MASTER_PORT", "70000"}}, "MASTER_PORT is '70000'"},
      {{{"OMPI_COMM_WORLD_RANK", "1"}, {"OMPI_COMM_WORLD_SIZE", "2"}}, "with mpirun, pass it along: mpirun -x MASTER_ADDR"},
  };
  for (const auto& c : cases) {
    auto p = start(worker({"--steps", "2", "--out", "/dev/null"}), c.env);
    p.finish();
    EXPECT_FALSE(p.succeeded());
    EXPECT_NE(p.output.find(c.message), std::string::npos) << p.output;
  }
}

TEST(MultiProcessGloo, AnUnreachableRankZeroIsNamedAfterTheTimeout) {
  auto p = start(worker({"--steps", "2", "--out", "/dev/null", "--timeout-ms", "1500"}),
                 {{"RANK", "1"}, {"WORLD_SIZE", "2"}, {"MASTER_ADDR", "127.0.0.1"}, {"MASTER_PORT", std::to_string(tp::free_local_port())}});
  p.finish();
  EXPECT_FALSE(p.succeeded());
  EXPECT_NE(p.output.find("cannot reach rank 0's rendezvous store at 127.0.0.1:"), std::string::npos) << p.output;
}

// A rank whose peers never come (one not started, one that quit on a bad flag) says whom it waits
// for, then ends within the timeout naming what to check: it does not wait forever.
TEST(MultiProcessGloo, ARankAloneSaysWhomItWaitsForAndEndsAtTheTimeout) {
  const auto start_time = std::chrono::steady_clock::now();
  auto p = start(worker({"--steps", "2", "--out", "/dev/null", "--timeout-ms", "7000"}),
                 {{"RANK", "0"}, {"WORLD_SIZE", "2"}, {"MASTER_ADDR", "127.0.0.1"}, {"MASTER_PORT", std::to_string(tp::free_local_port())}});
  p.finish();
  EXPECT_FALSE(p.succeeded());
  EXPECT_LT(std::chrono::steady_clock::now() - start_time, std::chrono::seconds(60)) << p.output;
  EXPECT_NE(p.output.find("tp: rank 0 is waiting for the other processes of the run at 127.0.0.1:"), std::string::npos) << p.output;
  EXPECT_NE(p.output.find("only 1 of WORLD_SIZE=2 processes joined the run"), std::string::npos) << p.output;
}

// Ranks started with different WORLD_SIZEs are told so at the rendezvous, each of them, rather
// than failing inside Gloo.
TEST(MultiProcessGloo, RanksWithDifferentWorldSizesAreToldSoAtTheRendezvous) {
  const int port = tp::free_local_port();
  auto env = [&](int rank, int world) {
    return std::map<std::string, std::string>{{"RANK", std::to_string(rank)}, {"WORLD_SIZE", std::to_string(world)},
                                              {"MASTER_ADDR", "127.0.0.1"}, {"MASTER_PORT", std::to_string(port)}};
  };
  auto zero = start(worker({"--steps", "2", "--out", "/dev/null", "--timeout-ms", "60000"}), env(0, 2));
  auto one = start(worker({"--steps", "2", "--out", "/dev/null", "--timeout-ms", "60000"}), env(1, 3));
  one.finish();
  zero.finish();
  EXPECT_FALSE(one.succeeded());
  EXPECT_FALSE(zero.succeeded());
  EXPECT_NE(one.output.find("WORLD_SIZE is 3 here but 2 on rank 0: start every rank of the run with the same WORLD_SIZE"), std::string::npos)
      << one.output;
  EXPECT_NE(zero.output.find("another process of the run stopped before training began (rank 1: WORLD_SIZE is 3 here but 2"),
            std::string::npos)
      << zero.output;
}

// Permanent rendezvous errors end the rank at once (the timeout is two minutes here), name the
// variable and its value, and print a few lines rather than a warning per attempt.
TEST(MultiProcessGloo, AMasterAddrThatDoesNotResolveFailsAtOnceNamingIt) {
  const auto start_time = std::chrono::steady_clock::now();
  auto p = start(worker({"--steps", "2", "--out", "/dev/null", "--timeout-ms", "120000"}),
                 {{"RANK", "1"}, {"WORLD_SIZE", "2"}, {"MASTER_ADDR", "no-such-host.invalid"}, {"MASTER_PORT", "29500"}});
  p.finish();
  EXPECT_FALSE(p.succeeded());
  EXPECT_LT(std::chrono::steady_clock::now() - start_time, std::chrono::seconds(60)) << p.output;
  EXPECT_NE(p.output.find("MASTER_ADDR is 'no-such-host.invalid', which does not resolve to an address"), std::string::npos) << p.output;
  EXPECT_LE(std::count(p.output.begin(), p.output.end(), '\n'), 3) << p.output;
}

TEST(MultiProcessGloo, RankZeroOnAPortInUseFailsAtOnceNamingIt) {
  const int port = tp::free_local_port();
  const int holder = ::socket(AF_INET, SOCK_STREAM, 0);  // another program on MASTER_PORT
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_port = htons(static_cast<std::uint16_t>(port));
  a.sin_addr.s_addr = htonl(INADDR_ANY);
  ASSERT_EQ(::bind(holder, reinterpret_cast<sockaddr*>(&a), sizeof a), 0) << std::strerror(errno);
  ASSERT_EQ(::listen(holder, 4), 0);
  auto p = start(worker({"--steps", "2", "--out", "/dev/null", "--timeout-ms", "120000"}),
                 {{"RANK", "0"}, {"WORLD_SIZE", "2"}, {"MASTER_ADDR", "127.0.0.1"}, {"MASTER_PORT", std::to_string(port)}});
  p.finish();
  ::close(holder);
  EXPECT_FALSE(p.succeeded());
  EXPECT_NE(p.output.find("MASTER_PORT is " + std::to_string(port) + ", but another program on rank 0's machine listens on that port"),
            std::string::npos)
      << p.output;
  EXPECT_LE(std::count(p.output.begin(), p.output.end(), '\n'), 3) << p.output;
}

// Waiting helps where rank 0 is not up yet: a rank started first waits (saying so once) and
// trains once rank 0 comes.
TEST(MultiProcessGloo, ARankStartedBeforeRankZeroWaitsQuietlyForIt) {
  TempDir dir("late_master");
  const int port = tp::free_local_port();
  const std::map<std::string, std::string> env{{"WORLD_SIZE", "2"}, {"MASTER_ADDR", "127.0.0.1"}, {"MASTER_PORT", std::to_string(port)}};
  auto with_rank = [&](int r) {
    auto e = env;
    e["RANK"] = e["LOCAL_RANK"] = std::to_string(r);
    return e;
  };
  const auto out = (dir.path / "w").string();
  auto early = start(worker({"--steps", "3", "--out", out}), with_rank(1));
  ASSERT_TRUE(early.read_until("is waiting for rank 0's rendezvous store at 127.0.0.1:" + std::to_string(port))) << early.output;
  auto late = start(worker({"--steps", "3", "--out", out}), with_rank(0));
  early.finish();
  late.finish();
  ASSERT_TRUE(early.succeeded()) << early.output;
  ASSERT_TRUE(late.succeeded()) << late.output;
  EXPECT_EQ(bytes(out + ".0"), bytes(out + ".1"));
  EXPECT_EQ(early.output.find("[W "), std::string::npos) << "c10d warned while rank 1 waited:\n" << early.output;
}

TEST(TpRun, StartsTheRanksPrefixesTheirLinesAndReportsAFailure) {
  TempDir dir("tprun");
  auto ok = start({TP_RUN, "-n", "2", TP_MP_WORKER, "--steps", "5", "--out", (dir.path / "w").string()}, {});
  ok.finish();
  EXPECT_TRUE(ok.succeeded()) << ok.output;
  EXPECT_NE(ok.output.find("[0] step 5\n"), std::string::npos) << ok.output;
  EXPECT_NE(ok.output.find("[1] step 5\n"), std::string::npos) << ok.output;
  EXPECT_EQ(bytes(dir.path / "w.0"), bytes(dir.path / "w.1"));

  auto failing = start({TP_RUN, "-n", "2", "--grace", "20", TP_MP_WORKER, "--steps", "20", "--out", (dir.path / "f").string(), "--timeout-ms",
                        "3000", "--die-rank", "1", "--die-at", "3"},
                       {});
  failing.finish();
  EXPECT_FALSE(failing.succeeded());
  EXPECT_NE(failing.output.find("tp-run: rank 1 failed (exit status 137)"), std::string::npos) << failing.output;
  EXPECT_NE(failing.output.find("[0] mp_worker: tp::MultiProcess (rank 0 of 2)"), std::string::npos) << failing.output;

  auto usage = start({TP_RUN, TP_MP_WORKER}, {});
  usage.finish();
  EXPECT_NE(usage.output.find("give the number of processes with -n N"), std::string::npos) << usage.output;
}

// The number of times `text` appears in `output`.
std::size_t occurrences(const std::string& output, const std::string& text) {
  std::size_t count = 0;
  for (auto at = output.find(text); at != std::string::npos; at = output.find(text, at + 1)) ++count;
  return count;
}

// --max-restarts: a rank killed mid-epoch brings every rank down, the job starts again from its
// newest checkpoint, and ends with the bits of an uninterrupted run; a job that keeps failing
// stops after K restarts with the failure's status.
TEST(TpRun, AJobWhoseRankDiesStartsAgainFromItsCheckpointAndEndsWithTheUninterruptedBits) {
  TempDir dir("tprun_restarts");
  const auto flags = resume_flags(dir.path, {"--steps", "30", "--save-every", "4", "--timeout-ms", "3000"});
  ASSERT_NO_FATAL_FAILURE(run_two_ranks(flags("reference", "reference")));
  auto with_tp_run = [&](std::vector<std::string> worker_flags, const std::string& restarts) {
    std::vector<std::string> args{TP_RUN, "-n", "2", "--grace", "10", "--max-restarts", restarts, TP_MP_WORKER};
    args.insert(args.end(), worker_flags.begin(), worker_flags.end());
    return args;
  };
  auto killed_flags = flags("restarted", "restarted");
  killed_flags.insert(killed_flags.end(), {"--die-rank", "1", "--die-at", "14", "--die-once", (dir.path / "died").string()});
  auto job = start(with_tp_run(killed_flags, "2"), {});
  job.finish();
  ASSERT_TRUE(job.succeeded()) << job.output;
  EXPECT_EQ(occurrences(job.output, "tp-run: restart "), 1u) << job.output;
  EXPECT_NE(job.output.find("tp-run: restart 1 of 2 (exit status 137): every rank starts again"), std::string::npos) << job.output;
  EXPECT_NE(job.output.find("[0] tp::ModelSaver: resumed from"), std::string::npos) << job.output;
  EXPECT_EQ(bytes(dir.path / "restarted.0"), bytes(dir.path / "reference.0"));
  EXPECT_EQ(bytes(dir.path / "restarted.1"), bytes(dir.path / "reference.1"));

  auto dying_flags = flags("dying", "dying");
  dying_flags.insert(dying_flags.end(), {"--die-rank", "1", "--die-at", "2"});
  auto dying = start(with_tp_run(dying_flags, "1"), {});
  dying.finish();
  EXPECT_FALSE(dying.succeeded());
  EXPECT_EQ(occurrences(dying.output, "tp-run: restart "), 1u) << dying.output;
  EXPECT_EQ(WEXITSTATUS(dying.status), 137) << dying.output;
}

// A Ctrl-C at the terminal goes to the whole foreground process group: tp-run passes it on to
// each rank once (a rank that got it twice would end at once), and every rank stops gracefully
// after the same step.
TEST(TpRun, CtrlCAtTheTerminalStopsEveryRankAfterTheSameStep) {
  TempDir dir("tprun_ctrl_c");
  auto run = start({TP_RUN, "-n", "2", TP_MP_WORKER, "--steps", "400", "--step-ms", "15", "--save-every", "100", "--logdir",
                    (dir.path / "logs").string(), "--out", (dir.path / "w").string()},
                   {}, /*own_group=*/true);
  ASSERT_TRUE(run.read_until("[1] step 3\n")) << run.output;
  ::kill(-run.pid, SIGINT);  // the terminal's foreground group: tp-run and, were they in it, the ranks
  run.finish();
  EXPECT_TRUE(WIFEXITED(run.status) && WEXITSTATUS(run.status) == 130) << run.output;
  const auto step = interrupted_at(run.output);
  EXPECT_GE(step, 3) << run.output;
  EXPECT_NE(run.output.find("[0] interrupted at global step " + std::to_string(step) + "\n"), std::string::npos) << run.output;
  EXPECT_NE(run.output.find("[1] interrupted at global step " + std::to_string(step) + "\n"), std::string::npos) << run.output;
  EXPECT_NE(run.output.find("stopped on the signal passed on (exit status 130)"), std::string::npos) << run.output;
  EXPECT_EQ(newest_checkpoint(dir.path / "logs"), step);
}

// Image sources under tp-run -n 2 (read_pass): in each of two passes, every training image is
// read by exactly one rank; from a folder (shuffle, then shard) all of them, from tar shards
// (whole shard files per rank, equal shares) all of each rank's share.
void expect_each_image_read_once_per_pass(const std::string& kind, std::size_t expected_per_pass) {
  TempDir dir("read_pass_" + kind);
  auto write = start({TP_PYTHON, tp_test::source_dir() + "/scripts/write_image_folder.py", (dir.path / "images").string(), "--limit", "40",
                      "--tar-shards", "4"},
                     {});
  write.finish();
  ASSERT_TRUE(write.succeeded()) << write.output;
  auto run = start({TP_RUN, "-n", "2", TP_READ_PASS, kind, (dir.path / "images").string(), (dir.path / "ids").string()}, {});
  run.finish();
  ASSERT_TRUE(run.succeeded()) << run.output;
  std::map<int, std::map<long, int>> reads;  // pass -> image -> times read
  std::map<int, std::set<long>> by_rank[2];  // rank -> pass -> images
  for (int rank = 0; rank < 2; ++rank) {
    std::ifstream file(dir.path / ("ids." + std::to_string(rank)));
    int pass = 0;
    long image = 0;
    while (file >> pass >> image) ++reads[pass][image], by_rank[rank][pass].insert(image);
  }
  ASSERT_EQ(reads.size(), 2u) << run.output;
  for (const auto& [pass, times] : reads) {
    EXPECT_EQ(times.size(), expected_per_pass) << "pass " << pass;
    for (const auto& [image, n] : times) EXPECT_EQ(n, 1) << "image " << image << " in pass " << pass;
    EXPECT_EQ(by_rank[0][pass].size(), by_rank[1][pass].size()) << "pass " << pass << ": the ranks' shares differ";
  }
}

TEST(ImageSourcesUnderTpRun, EachImageOfAFolderIsReadByOneRankPerPass) { expect_each_image_read_once_per_pass("folder", 40); }
// 4 shards of 10: rank 0 reads shards 0 and 2, rank 1 shards 1 and 3.
TEST(ImageSourcesUnderTpRun, EachImageOfTarShardsIsReadByOneRankPerPass) { expect_each_image_read_once_per_pass("shards", 40); }
