// The input pipeline: dataflow views, saved positions, QueueInput's thread, StagingInput.
// Thread tests use plain ints as datapoints where they can, so that ThreadSanitizer sees every
// synchronisation (LibTorch itself is not instrumented).
#include <gtest/gtest.h>

#include <algorithm>
#include <atomic>
#include <numeric>
#include <set>
#include <stdexcept>
#include <thread>

#include "support.hpp"

namespace {

using ints = std::vector<int>;

auto iota_flow(int n) { return ranges::views::iota(0, n); }
// Collates ints into a vector: batches without tensors.
auto int_batches(std::int64_t n) {
  return tp::data::batch(n, tp::data::remainder::keep, [](const ints& items) { return items; });
}

template <class Range>
ints collect(Range&& range) {
  ints out;
  for (auto&& x : range) out.push_back(x);
  return out;
}

template <class Input>
ints drain_ints(Input& input, int batches) {
  ints out;
  for (int i = 0; i < batches; ++i)
    for (int x : input.next_batch()) out.push_back(x);
  return out;
}

// Real work whose cost grows with x (no sleeping).
int slow_square(int x) {
  volatile std::uint64_t sink = 0;
  for (int i = 0; i < 2000 * (x % 7); ++i) sink = sink + static_cast<std::uint64_t>(i);
  return x * x;
}

ints squares(int n) {
  ints out(n);
  for (int i = 0; i < n; ++i) out[i] = i * i;
  return out;
}

}  // namespace

// --- parallel_map ----------------------------------------------------------------------------------

TEST(ParallelMap, KeepsTheOrderOfTheSource) {
  auto flow = iota_flow(200) | tp::data::parallel_map(slow_square, 3);
  EXPECT_EQ(collect(flow), squares(200));
  EXPECT_EQ(collect(flow), squares(200));  // a second pass
}

TEST(ParallelMap, InAnyOrderGivesEveryResultOnce) {
  auto flow = iota_flow(200) | tp::data::parallel_map(slow_square, 3, tp::data::order::any);
  auto got = collect(flow);
  std::sort(got.begin(), got.end());
  EXPECT_EQ(got, squares(200));
}

TEST(ParallelMap, AWorkersExceptionReachesTheConsumerAtItsDatapoint) {
  auto flow = iota_flow(50) | tp::data::parallel_map([](int x) {
                if (x == 17) throw std::domain_error("datapoint 17 is corrupt");
                return slow_square(x);
              }, 4);
  ints got;
  try {
    for (int x : flow) got.push_back(x);
    FAIL() << "the exception was lost";
  } catch (const std::domain_error& e) {
    EXPECT_STREQ(e.what(), "datapoint 17 is corrupt");
  }
  EXPECT_EQ(got, squares(17));
  EXPECT_EQ(collect(flow | tp::data::take(5)), squares(5));  // the view is still usable
}

TEST(ParallelMap, EachWorkerHasItsOwnCopyOfF) {
  struct Counting {
    int calls = 0;  // not shared: no lock needed
    int operator()(int x) {
      ++calls;
      return x + 1;
    }
  };
  auto flow = iota_flow(500) | tp::data::parallel_map(Counting{}, 4);
  auto got = collect(flow);
  EXPECT_EQ(got.size(), 500u);
  EXPECT_EQ(got.front(), 1);
  EXPECT_EQ(got.back(), 500);
}

TEST(ParallelMap, AnAbandonedPassDoesNotLeakIntoTheNext) {
  auto flow = iota_flow(100) | tp::data::parallel_map(slow_square, 2);
  {
    auto it = flow.begin();
    ++it;
    ++it;  // leave work in flight
  }
  EXPECT_EQ(collect(flow), squares(100));
}

TEST(ParallelMap, StopsItsThreadsWhenDestroyedMidPass) {
  auto flow = iota_flow(100000) | tp::data::parallel_map(slow_square, 2);
  auto it = flow.begin();
  EXPECT_EQ(*it, 0);
  // Destroying `flow` here joins the workers; the test finishing is the assertion.
}

// --- shuffle_buffer, repeat, take, from_dataset -------------------------------------------------------

TEST(ShuffleBuffer, IsASeededLocalPermutation) {
  auto flow = iota_flow(300) | tp::data::shuffle_buffer(16, 7);
  const auto first = collect(flow), second = collect(flow);
  auto sorted = first;
  std::sort(sorted.begin(), sorted.end());
  EXPECT_EQ(sorted, collect(iota_flow(300)));
  EXPECT_NE(first, second);
  EXPECT_NE(first, collect(iota_flow(300)));
  for (int pos = 0; pos < 300; ++pos) EXPECT_GE(pos, first[pos] - 16 + 1) << "datapoint " << first[pos] << " came too early";
  auto again = iota_flow(300) | tp::data::shuffle_buffer(16, 7);
  EXPECT_EQ(collect(again), first);
  EXPECT_THROW(tp::data::shuffle_buffer(0, 1), std::invalid_argument);
}

TEST(Repeat, MakesOnePassOfSeveralPassesOfTheSource) {
  auto flow = tp::data::examples(torch::zeros({5, 1}), torch::arange(5)) | tp::data::shuffle(3) | tp::data::repeat(3);
  std::vector<std::int64_t> got;
  for (auto&& e : flow) got.push_back(e.target.item<std::int64_t>());
  ASSERT_EQ(got.size(), 15u);
  std::vector<std::vector<std::int64_t>> blocks;
  for (int b = 0; b < 3; ++b) {
    std::vector<std::int64_t> block(got.begin() + 5 * b, got.begin() + 5 * b + 5);
    blocks.push_back(block);
    std::sort(block.begin(), block.end());
    EXPECT_EQ(block, (std::vector<std::int64_t>{0, 1, 2, 3, 4}));
  }
  EXPECT_TRUE(blocks[0] != blocks[1] || blocks[1] != blocks[2]);
  EXPECT_EQ(collect(iota_flow(0) | tp::data::repeat(4)), ints{});  // an empty source ends it
}

TEST(Take, StopsAfterNWithoutReadingFurther) {
  int reads = 0;
  auto counted = iota_flow(100) | ranges::views::transform([&](int x) {
                   ++reads;
                   return x;
                 });
  EXPECT_EQ(collect(counted | tp::data::take(4)), (ints{0, 1, 2, 3}));
  EXPECT_EQ(reads, 4);
  EXPECT_EQ(collect(iota_flow(3) | tp::data::take(10)), (ints{0, 1, 2}));
}

namespace {
struct Squares : torch::data::datasets::Dataset<Squares> {
  torch::data::Example<> get(std::size_t i) override {
    return {torch::tensor(float(i)), torch::tensor(std::int64_t(i * i))};
  }
  torch::optional<std::size_t> size() const override { return 6; }
};
}  // namespace

TEST(FromDataset, AdaptsALibTorchDataset) {
  auto flow = tp::data::from_dataset(Squares{}) | tp::data::batch(4);
  std::vector<std::int64_t> sizes;
  std::vector<std::int64_t> targets;
  for (auto&& b : flow) {
    sizes.push_back(b.data.size(0));
    for (std::int64_t i = 0; i < b.target.size(0); ++i) targets.push_back(b.target[i].item<std::int64_t>());
  }
  EXPECT_EQ(sizes, (std::vector<std::int64_t>{4, 2}));
  EXPECT_EQ(targets, (std::vector<std::int64_t>{0, 1, 4, 9, 16, 25}));
}

// --- positions -------------------------------------------------------------------------------------

namespace {
auto seeded_flow() {
  return iota_flow(20) | tp::data::shuffle_buffer(5, 11) | tp::data::parallel_map(slow_square, 2) | int_batches(4);
}
}  // namespace

TEST(Position, SaveStateCollectsThePassCountersOfSeededViews) {
  auto flow = tp::data::examples(torch::zeros({8, 1}), torch::zeros({8})) | tp::data::shuffle(1) |
              ranges::views::transform([](torch::data::Example<> e) { return e; }) | tp::data::shuffle_buffer(3, 2) |
              tp::data::batch(2);
  EXPECT_EQ(tp::data::save_state(flow), (tp::data::dataflow_state{0, 0}));
  for (auto&& b : flow) (void)b;
  for (auto&& b : flow) (void)b;
  EXPECT_EQ(tp::data::save_state(flow), (tp::data::dataflow_state{2, 2}));
  tp::data::load_state(flow, {5, 7});
  EXPECT_EQ(tp::data::save_state(flow), (tp::data::dataflow_state{5, 7}));
  try {
    tp::data::load_state(flow, {1});
    FAIL();
  } catch (const std::invalid_argument& e) {
    EXPECT_NE(std::string(e.what()).find("holds 1 pass counters but this dataflow has 2"), std::string::npos);
  }
}

// Saved after `drained` batches (5 a pass): inside a pass, and at a pass's very end (a
// checkpoint of the step that took its last batch), after which the next pass begins.
template <class Input>
void expect_exact_restore() {
  for (const auto& [drained, consumed] : {std::pair{7, 2}, std::pair{10, 5}}) {
    SCOPED_TRACE("after " + std::to_string(drained) + " batches");
    Input first(seeded_flow());
    drain_ints(first, drained);
    const auto where = first.position();
    EXPECT_EQ(where.consumed, consumed);
    const auto expected = drain_ints(first, 9);

    Input resumed(seeded_flow());  // a new process builds the same dataflow
    resumed.restore(where);
    EXPECT_EQ(resumed.position(), where);
    EXPECT_EQ(drain_ints(resumed, 9), expected);
  }
}

TEST(Position, FeedInputRestoresExactly) { expect_exact_restore<tp::FeedInput<decltype(seeded_flow())>>(); }
TEST(Position, QueueInputRestoresExactly) { expect_exact_restore<tp::QueueInput<decltype(seeded_flow())>>(); }

TEST(Position, FeedAndQueueAgreeOnWhereTheyAre) {
  tp::FeedInput feed(seeded_flow());
  tp::QueueInput queue(seeded_flow(), 3);
  for (int i = 0; i < 12; ++i) {
    EXPECT_EQ(feed.next_batch(), queue.next_batch());
    EXPECT_EQ(feed.position(), queue.position()) << "after batch " << i;
  }
}

// --- QueueInput -------------------------------------------------------------------------------------

TEST(QueueInput, GivesTheSameBatchesAsFeedInput) {
  tp::FeedInput feed(seeded_flow());
  tp::QueueInput queue(seeded_flow(), 2);
  EXPECT_EQ(drain_ints(queue, 23), drain_ints(feed, 23));
}

TEST(QueueInput, StoppingLosesNoBatch) {
  tp::FeedInput feed(seeded_flow());
  tp::QueueInput queue(seeded_flow(), 4);
  auto got = drain_ints(queue, 3);
  queue.stop();
  EXPECT_FALSE(queue.running());
  auto rest = drain_ints(queue, 9);  // restarts by itself
  got.insert(got.end(), rest.begin(), rest.end());
  EXPECT_EQ(got, drain_ints(feed, 12));
}

TEST(QueueInput, ADataflowErrorReachesTheStepWithItsMessageAndNothingHangs) {
  auto flow = iota_flow(40) | tp::data::parallel_map([](int x) {
                if (x == 25) throw std::out_of_range("image 25 is truncated");
                return x;
              }, 2) | int_batches(5);
  tp::QueueInput queue(std::move(flow), 2);
  EXPECT_EQ(drain_ints(queue, 5), collect(iota_flow(25)));
  for (int attempt = 0; attempt < 2; ++attempt) {
    try {
      queue.next_batch();
      FAIL() << "the error was lost";
    } catch (const std::out_of_range& e) {
      EXPECT_STREQ(e.what(), "image 25 is truncated");
    }
  }
}

TEST(QueueInput, AnEmptyDataflowIsAClearError) {
  tp::QueueInput queue(iota_flow(3) | tp::data::batch(4, tp::data::remainder::drop, [](const ints& v) { return v; }));
  try {
    queue.next_batch();
    FAIL();
  } catch (const std::runtime_error& e) {
    EXPECT_NE(std::string(e.what()).find("tp::QueueInput: the dataflow gave no datapoint in pass 1; check that the dataset is not empty"), std::string::npos) << e.what();
  }
}

TEST(QueueInput, ServesSeveralConsumerThreadsEachItsOwnBatch) {
  tp::QueueInput queue(iota_flow(1000) | int_batches(10), 8);
  std::vector<ints> got(4);
  std::vector<std::thread> towers;
  for (int t = 0; t < 4; ++t)
    towers.emplace_back([&, t] { got[t] = drain_ints(queue, 25); });
  for (auto& t : towers) t.join();
  ints all;
  for (auto& g : got) all.insert(all.end(), g.begin(), g.end());
  std::sort(all.begin(), all.end());
  EXPECT_EQ(all, collect(iota_flow(1000)));
}

TEST(QueueInput, IsDestroyedCleanlyWithAFullQueue) {
  auto queue = std::make_unique<tp::QueueInput<decltype(iota_flow(1) | int_batches(1))>>(iota_flow(100000) | int_batches(1), 2);
  queue->start();
  while (queue->queued() < 2) std::this_thread::yield();
  EXPECT_TRUE(queue->running());
  queue.reset();  // the producer is blocked on the full queue: it must wake up and be joined
}

TEST(QueueInput, TheTrainerStopsItsThreadOnEveryExit) {
  auto batch = tp_test::regression_batch(32);
  auto make = [&] {
    return tp::Trainer(tp::QueueInput(tp::data::examples(batch.data, batch.target) | tp::data::batch(8)), tp_test::linear_desc(),
                       tp::SingleDevice(), tp::TrainOptions().steps_per_epoch(5).max_epoch(2));
  };
  auto normal = make();
  normal.train();
  EXPECT_FALSE(normal.input().running());
  EXPECT_EQ(normal.global_step(), 10);

  auto failing = make();
  EXPECT_THROW(failing.train([](auto& t) {
    t.input().next_batch();
    if (t.global_step() == 3) throw std::runtime_error("step failed");
  }),
               std::runtime_error);
  EXPECT_FALSE(failing.input().running());

  auto stopped = make();
  stopped.train([](auto& t) {
    t.input().next_batch();
    if (t.global_step() == 2) t.request_stop();
  });
  EXPECT_FALSE(stopped.input().running());
}

// --- StagingInput -----------------------------------------------------------------------------------

TEST(StagingInput, OnTheCpuHandsOverTheInnerBatches) {
  tp::StagingInput staged{tp::FeedInput(seeded_flow())};
  tp::FeedInput plain(seeded_flow());
  EXPECT_EQ(drain_ints(staged, 8), drain_ints(plain, 8));
}

TEST(StagingInput, ForwardsStartAndStopToItsInput) {
  tp::StagingInput staged{tp::QueueInput(seeded_flow())};
  staged.start();
  EXPECT_TRUE(staged.inner().running());
  staged.stop();
  EXPECT_FALSE(staged.inner().running());
}

TEST(StagingInput, OnAGpuNeedsCuda) {
  if (torch::cuda::is_available()) GTEST_SKIP() << "this LibTorch has CUDA";
  EXPECT_THROW(tp::StagingInput(tp::DummyInput(torch::zeros({1})), torch::Device(torch::kCUDA, 0)), std::invalid_argument);
}
