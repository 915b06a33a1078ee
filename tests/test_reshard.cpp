// Positions in a pass's global order (data/pass_position.hpp): an input restored on another
// number of ranks, towers or batch size goes on at exactly the next unseen example of the pass,
// so that across the interruption every example is seen once per pass. Ranks are simulated here
// by inputs over shard(rank, world) in one process; tests/test_multi_process.cpp does it with
// real ranks.
#include <gtest/gtest.h>

#include <algorithm>
#include <mutex>
#include <numeric>
#include <string>
#include <vector>

#include <tp/tp.hpp>
#include <tp/data.hpp>

#include "support.hpp"

namespace {

constexpr std::int64_t pass_size = 96;

// Examples whose data and target are their id, shuffled, this rank's share, in batches.
auto id_flow(int rank, int world, std::int64_t batch) {
  const auto ids = torch::arange(pass_size, torch::kLong).unsqueeze(1);
  return tp::data::examples(ids.to(torch::kFloat), ids) | tp::data::shuffle(3) | tp::data::shard(rank, world) | tp::data::batch(batch);
}
using id_flow_type = decltype(id_flow(0, 1, 1));

void append_ids(std::vector<std::int64_t>& seen, const torch::Tensor& target) {
  const auto ids = target.flatten().contiguous();
  seen.insert(seen.end(), ids.data_ptr<std::int64_t>(), ids.data_ptr<std::int64_t>() + ids.numel());
}

std::vector<std::int64_t> every_id() {
  std::vector<std::int64_t> ids(pass_size);
  std::iota(ids.begin(), ids.end(), 0);
  return ids;
}

// `world_before` ranks take `steps` batches of `batch_before` each; the chief's position is
// saved, and `world_after` ranks with batches of `batch_after` restore it and take the rest of
// the pass. Every id must be seen exactly once.
template <class Input>
void expect_every_example_once(int world_before, std::int64_t batch_before, int steps, int world_after, std::int64_t batch_after) {
  SCOPED_TRACE(std::to_string(world_before) + " ranks of batch " + std::to_string(batch_before) + " -> " + std::to_string(world_after) +
               " of batch " + std::to_string(batch_after));
  std::vector<std::int64_t> seen;
  tp::data::position saved;
  {
    std::vector<Input> ranks;
    for (int r = 0; r < world_before; ++r) ranks.emplace_back(id_flow(r, world_before, batch_before));
    for (int s = 0; s < steps; ++s)
      for (auto& rank : ranks) append_ids(seen, rank.next_batch().target);
    saved = ranks[0].position();
    for (auto& rank : ranks) EXPECT_EQ(rank.position(), saved) << "every rank is at the same place in the global order";
    EXPECT_EQ(saved.datapoints, world_before * batch_before * steps);
  }
  std::vector<Input> ranks;
  for (int r = 0; r < world_after; ++r) ranks.emplace_back(id_flow(r, world_after, batch_after));
  for (auto& rank : ranks) {
    rank.restore(saved);
    for (;;) {
      const auto batch = rank.next_batch();
      if (rank.position().flow != saved.flow) break;  // the next pass began: this pass is done
      append_ids(seen, batch.target);
    }
  }
  std::sort(seen.begin(), seen.end());
  EXPECT_EQ(seen, every_id());
}

TEST(Reshard, FeedInputGoesOnAtTheNextUnseenExampleOnAnyNumberOfRanks) {
  expect_every_example_once<tp::FeedInput<id_flow_type>>(2, 8, 2, 1, 8);  // 2 -> 1
  expect_every_example_once<tp::FeedInput<id_flow_type>>(1, 8, 3, 2, 8);  // 1 -> 2 (each new rank ends on half a batch)
  expect_every_example_once<tp::FeedInput<id_flow_type>>(2, 8, 2, 4, 4);  // 2 -> 4, with another batch size
  expect_every_example_once<tp::FeedInput<id_flow_type>>(4, 4, 3, 2, 6);
}

TEST(Reshard, QueueInputGoesOnAtTheNextUnseenExampleOnAnyNumberOfRanks) {
  expect_every_example_once<tp::QueueInput<id_flow_type>>(2, 8, 2, 1, 8);
  expect_every_example_once<tp::QueueInput<id_flow_type>>(1, 8, 3, 2, 8);
  expect_every_example_once<tp::QueueInput<id_flow_type>>(2, 8, 2, 4, 4);
}

TEST(Reshard, APositionAtThePassEndGoesOnWithTheNextPass) {
  tp::FeedInput ranks0(id_flow(0, 2, 8)), ranks1(id_flow(1, 2, 8));
  for (int s = 0; s < 6; ++s) ranks0.next_batch(), ranks1.next_batch();  // 2 x 6 x 8 = the whole pass
  const auto saved = ranks0.position();
  tp::FeedInput one(id_flow(0, 1, 8));
  one.restore(saved);
  std::vector<std::int64_t> seen;
  for (int s = 0; s < 12; ++s) append_ids(seen, one.next_batch().target);
  EXPECT_EQ(one.passes(), 2) << "the restored pass had nothing left; the next pass gave these";
  std::sort(seen.begin(), seen.end());
  EXPECT_EQ(seen, every_id());
}

TEST(Reshard, AShuffleAfterTheShardIsRefusedOnAnotherNumberOfRanksSayingWhy) {
  const auto ids = torch::arange(pass_size, torch::kLong).unsqueeze(1);
  auto per_rank = [&](int rank, int world) {
    return tp::FeedInput(tp::data::examples(ids.to(torch::kFloat), ids) | tp::data::shard(rank, world) | tp::data::shuffle_buffer(16, 3) | tp::data::batch(8));
  };
  auto two = per_rank(0, 2);
  two.next_batch();
  const auto saved = two.position();
  auto one = per_rank(0, 1);
  const auto before = one.position();
  EXPECT_NE(tp_test::error_message_of<std::invalid_argument>([&] { one.restore(saved); })
                .find("shuffles after shard(rank, world_size), so each rank's order depends on the number of ranks; shuffle before shard"),
            std::string::npos);
  EXPECT_EQ(one.position(), before) << "a refused restore changes nothing";
  // On its own number of ranks it resumes exactly, as before.
  auto again = per_rank(0, 2);
  again.restore(saved);
  tp::FeedInput reference = per_rank(0, 2);
  reference.next_batch();
  EXPECT_TRUE(torch::equal(again.next_batch().target, reference.next_batch().target));
}

// --- through the trainer: towers 2 -> 1 -> 2 -----------------------------------------------------

std::mutex seen_mutex;
std::vector<std::int64_t> seen_by_towers;

auto id_desc() {
  return tp::model_desc([] { return torch::nn::Linear(1, 1); })
      .tower_function([](const tp::TowerContext&, torch::nn::Linear& m, const tp_test::Batch& b) {
        {
          std::lock_guard lock(seen_mutex);
          append_ids(seen_by_towers, b.target);
        }
        return m->forward(b.data / pass_size).pow(2).mean();
      })
      .optimizer([](torch::nn::Linear& m) { return torch::optim::SGD(m->parameters(), torch::optim::SGDOptions(0.01)); });
}

template <class Distribution>
auto id_trainer(Distribution distribution, int max_epoch, std::int64_t batch = 8) {
  return tp::Trainer(tp::FeedInput(id_flow(0, 1, batch)), id_desc(), std::move(distribution),
                     tp::TrainOptions().steps_per_epoch(2).max_epoch(max_epoch).model_summary(false));
}

TEST(Reshard, TwoTowersThenOneThenTwoSeeEveryExampleOncePerPassAndSaySo) {
  tp_test::TempDir dir("reshard_towers");
  seen_by_towers.clear();
  auto two = id_trainer(tp::Replicated<>::cpu(2), 1);  // 2 steps of 2 x 8
  two.train();
  tp::save_checkpoint(two, dir.path / "two.ckpt");
  const auto saved = tp::detail::read_torch_save(dir.path / "two.ckpt");
  const auto& layout = *saved.find("tp")->find("layout");
  EXPECT_EQ(layout.find("processes")->as_int(), 1);
  EXPECT_EQ(layout.find("towers")->as_int(), 2);
  EXPECT_EQ(layout.find("micro_batches")->as_int(), 1);
  EXPECT_EQ(layout.find("batches_per_step")->as_int(), 2);
  EXPECT_EQ(layout.find("batch")->as_int(), 8);
  EXPECT_EQ(layout.find("precision")->as_string(), "fp32");

  auto one = id_trainer(tp::SingleDevice(), 3);  // 4 steps of 8
  tp::load_checkpoint(one, dir.path / "two.ckpt");
  EXPECT_EQ(one.layout_change(), "resumed on 1 process x 1 batch of 8 per step from a checkpoint of 1 process x 2 batches of 8 per step: global batch 16 -> 8");
  one.train();
  tp::save_checkpoint(one, dir.path / "one.ckpt");

  auto again = id_trainer(tp::Replicated<>::cpu(2), 4);  // 2 steps of 2 x 8: the pass ends
  tp::load_checkpoint(again, dir.path / "one.ckpt");
  EXPECT_EQ(again.layout_change(), "resumed on 1 process x 2 batches of 8 per step from a checkpoint of 1 process x 1 batch of 8 per step: global batch 8 -> 16");
  again.train();
  EXPECT_EQ(again.global_step(), 8);
  std::sort(seen_by_towers.begin(), seen_by_towers.end());
  EXPECT_EQ(seen_by_towers, every_id());

  // The same layout says nothing.
  auto same = id_trainer(tp::Replicated<>::cpu(2), 5);
  tp::load_checkpoint(same, dir.path / "two.ckpt");
  EXPECT_EQ(same.layout_change(), "");
}

TEST(Reshard, APositionThatDoesNotFitTheNewBatchIsRefusedNamingBothLayoutsAndNothingLoads) {
  tp_test::TempDir dir("reshard_refused");
  auto unsharded = [](std::int64_t batch, int max_epoch) {
    const auto ids = torch::arange(pass_size, torch::kLong).unsqueeze(1);
    return tp::Trainer(tp::FeedInput(tp::data::examples(ids.to(torch::kFloat), ids) | tp::data::shuffle(3) | tp::data::batch(batch)), id_desc(),
                       tp::SingleDevice(), tp::TrainOptions().steps_per_epoch(3).max_epoch(max_epoch).model_summary(false));
  };
  auto eights = unsharded(8, 1);  // 24 examples in
  eights.train();
  tp::save_checkpoint(eights, dir.path / "eights.ckpt");
  auto sixteens = unsharded(16, 2);
  const auto before = tp_test::weights_of(sixteens);
  const auto message = tp_test::error_message_of<tp::checkpoint_error>([&] { tp::load_checkpoint(sixteens, dir.path / "eights.ckpt"); });
  EXPECT_NE(message.find("the input cannot go on where the checkpoint's run stopped (resumed on 1 process x 1 batch of 16 per step from a "
                         "checkpoint of 1 process x 1 batch of 8 per step: global batch 8 -> 16): the pass is 24 datapoints in, not a whole number "
                         "of batches of 16, and its dataflow has no shard view"),
            std::string::npos)
      << message;
  tp_test::expect_bitwise_equal(tp_test::weights_of(sixteens), before);
  EXPECT_EQ(sixteens.global_step(), 0);
}

TEST(Reshard, ARunWithItsOwnStepIsRefusedOnAnotherLayoutAndTrainsOnItsOwn) {
  tp_test::TempDir dir("reshard_user_step");
  const auto log = dir.path / "log";
  auto with_saver = [&](auto distribution) {
    return tp::Trainer(tp::FeedInput(id_flow(0, 1, 8)), id_desc(), std::move(distribution),
                       tp::TrainOptions().steps_per_epoch(2).max_epoch(2).model_summary(false), tp::ModelSaver(log));
  };
  auto two = with_saver(tp::Replicated<>::cpu(2));
  two.train();
  auto one = with_saver(tp::SingleDevice());
  const auto before = tp_test::weights_of(one);
  auto own_step = [](auto& trainer) { return trainer.replicas().run_step(trainer.tower(), trainer.input()); };
  const auto message = tp_test::error_message_of<tp::checkpoint_error>([&] { one.train(own_step); });
  EXPECT_NE(message.find("cannot go on here (resumed on 1 process x 1 batch of 8 per step from a checkpoint of 1 process x 2 batches of 8 "
                         "per step: global batch 16 -> 8): this run trains with its own step"),
            std::string::npos)
      << message;
  tp_test::expect_bitwise_equal(tp_test::weights_of(one), before);
  EXPECT_EQ(one.global_step(), 0);
}

}  // namespace
