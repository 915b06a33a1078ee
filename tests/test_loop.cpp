// The loop's contracts: hook order, epoch and step counters, stop requests, exceptions, errors.
#include <gtest/gtest.h>

#include <stdexcept>

#include "support.hpp"

using tp_test::only;
using tp_test::Spy;

TEST(Loop, HooksRunInTensorpackOrderWithCounters) {
  Spy spy;
  auto trainer = tp_test::make_trainer(tp::TrainOptions().steps_per_epoch(2).max_epoch(2), spy);
  trainer.train();
  const std::vector<std::string> expected = {
      "before_train 0/0/0",                                                  //
      "before_epoch 1/0/0",                                                  //
      "before_step 1/0/0", "after_step 1/0/1", "before_step 1/1/1", "after_step 1/1/2",
      "after_epoch 1/1/2",                                                   //
      "before_epoch 2/0/2",                                                  //
      "before_step 2/0/2", "after_step 2/0/3", "before_step 2/1/3", "after_step 2/1/4",
      "after_epoch 2/1/4",                                                   //
      "after_train 2/1/4"};
  EXPECT_EQ(*spy.log, expected);
  EXPECT_EQ(trainer.global_step(), 4);
}

TEST(Loop, EpochsRunFromStartingEpochToMaxEpochInclusive) {
  Spy spy;
  auto trainer = tp_test::make_trainer(tp::TrainOptions().steps_per_epoch(3).starting_epoch(3).max_epoch(5), spy);
  trainer.train();
  EXPECT_EQ(only(*spy.log, "before_epoch"),
            (std::vector<std::string>{"before_epoch 3/0/0", "before_epoch 4/0/3", "before_epoch 5/0/6"}));
  EXPECT_EQ(trainer.global_step(), 9);
}

namespace {
struct LoggingMonitor {
  std::shared_ptr<std::vector<std::string>> log;
  void on_scalar(auto&, std::string_view name, double value) { log->push_back("scalar " + std::string(name) + "=" + std::to_string(int(value))); }
  void after_epoch(auto&) { log->push_back("monitor after_epoch"); }
};
}  // namespace

namespace {
struct Producer {
  std::shared_ptr<std::vector<std::string>> log;
  void after_epoch(auto& t) {
    log->push_back("producer after_epoch");
    t.put_scalar("accuracy", 7.0);
  }
};
}  // namespace

TEST(Loop, CallbacksRunInTheOrderGivenAndMonitorsCloseTheEpoch) {
  auto log = std::make_shared<std::vector<std::string>>();
  // The monitor comes first in the pack but must see the scalar put after it in the epoch.
  auto trainer = tp_test::make_trainer(tp::TrainOptions().steps_per_epoch(1), LoggingMonitor{log}, Spy{log, "a."},
                                       Producer{log}, Spy{log, "b."});
  trainer.train();
  // Plain callbacks in the order given; at the epoch's end the monitor runs last, after the
  // scalar put by a callback that comes later in the pack has reached it.
  EXPECT_EQ(*log, (std::vector<std::string>{
                      "a.before_train 0/0/0", "b.before_train 0/0/0",            //
                      "a.before_epoch 1/0/0", "b.before_epoch 1/0/0",            //
                      "a.before_step 1/0/0", "b.before_step 1/0/0",              //
                      "a.after_step 1/0/1", "b.after_step 1/0/1",                //
                      "a.after_epoch 1/0/1", "producer after_epoch", "scalar accuracy=7",
                      "b.after_epoch 1/0/1", "monitor after_epoch",              //
                      "a.after_train 1/0/1", "b.after_train 1/0/1"}));
}

namespace {
struct StopAtStep {
  std::int64_t step;
  void after_step(auto& t) {
    if (t.global_step() == step) t.request_stop();
  }
};
}  // namespace

TEST(Loop, RequestStopFinishesTheStepAndClosesTheEpoch) {
  Spy spy;
  auto trainer = tp_test::make_trainer(tp::TrainOptions().steps_per_epoch(4).max_epoch(3), StopAtStep{6}, spy);
  trainer.train();
  EXPECT_EQ(trainer.global_step(), 6);
  EXPECT_EQ(spy.log->back(), "after_train 2/1/6");
  EXPECT_EQ(spy.log->at(spy.log->size() - 2), "after_epoch 2/1/6");
  EXPECT_EQ(spy.log->at(spy.log->size() - 3), "after_step 2/1/6");
  EXPECT_EQ(only(*spy.log, "before_epoch").size(), 2u);
}

TEST(Loop, StopTrainingFromTheStepEndsAtOnceAndReturnsNormally) {
  Spy spy;
  auto trainer = tp_test::make_trainer(tp::TrainOptions().steps_per_epoch(10).max_epoch(2), spy);
  trainer.train([](auto& t) {
    if (t.global_step() == 4) throw tp::stop_training("enough");
  });
  EXPECT_EQ(trainer.global_step(), 4);
  EXPECT_EQ(spy.log->back(), "after_train 1/4/4");
  EXPECT_EQ(spy.log->at(spy.log->size() - 2), "before_step 1/4/4");  // no after_step, no after_epoch
}

namespace {
struct Thrower {
  void before_epoch(auto& t) {
    if (t.epoch_num() == 2) throw tp::stop_training();
  }
};
}  // namespace

TEST(Loop, StopTrainingFromAHookEndsAtOnce) {
  Spy spy;
  auto trainer = tp_test::make_trainer(tp::TrainOptions().steps_per_epoch(2).max_epoch(5), Thrower{}, spy);
  EXPECT_NO_THROW(trainer.train());
  EXPECT_EQ(trainer.global_step(), 2);
  EXPECT_EQ(spy.log->back(), "after_train 2/0/2");
}

TEST(Loop, AnExceptionRunsEndHooksThenPropagatesWithItsMessage) {
  Spy spy;
  auto trainer = tp_test::make_trainer(tp::TrainOptions().steps_per_epoch(3).max_epoch(2), spy);
  try {
    trainer.train([](auto& t) {
      if (t.global_step() == 4) throw std::runtime_error("disk full");
    });
    FAIL() << "the exception was swallowed";
  } catch (const std::runtime_error& e) {
    EXPECT_STREQ(e.what(), "disk full");
  }
  EXPECT_EQ(spy.log->back(), "after_train 2/1/4");
}

namespace {
struct FailsToStart {
  void before_train(auto&) { throw std::runtime_error("no GPU"); }
  void after_train(auto&) { ADD_FAILURE() << "after_train without a completed before_train"; }
};
}  // namespace

TEST(Loop, EndHooksPairWithCompletedBeforeTrainOnly) {
  auto log = std::make_shared<std::vector<std::string>>();
  auto trainer = tp_test::make_trainer(tp::TrainOptions().steps_per_epoch(1), Spy{log, "a."}, FailsToStart{},
                                       Spy{log, "c."});
  EXPECT_THROW(trainer.train(), std::runtime_error);
  EXPECT_EQ(*log, (std::vector<std::string>{"a.before_train 0/0/0", "a.after_train 0/0/0"}));
}

namespace {
struct FailsToEnd {
  std::string what;
  void after_train(auto&) { throw std::runtime_error(what); }
};
}  // namespace

TEST(Loop, EveryEndHookRunsEvenIfOneThrowsAndTheFirstFailureWins) {
  auto log = std::make_shared<std::vector<std::string>>();
  auto trainer = tp_test::make_trainer(tp::TrainOptions().steps_per_epoch(1), FailsToEnd{"first"},
                                       FailsToEnd{"second"}, Spy{log});
  try {
    trainer.train();
    FAIL() << "after_train's exception was swallowed";
  } catch (const std::runtime_error& e) {
    EXPECT_STREQ(e.what(), "first");
  }
  EXPECT_EQ(log->back(), "after_train 1/0/1");
}

TEST(Loop, TrainingAgainContinuesTheGlobalStep) {
  auto trainer = tp_test::make_trainer(tp::TrainOptions().steps_per_epoch(3));
  trainer.train();
  trainer.train();
  EXPECT_EQ(trainer.global_step(), 6);
}

TEST(Loop, BadOptionsAreRejectedWithTheFix) {
  auto message = [](tp::TrainOptions o) {
    try {
      tp_test::make_trainer(o);
    } catch (const std::invalid_argument& e) {
      return std::string(e.what());
    }
    return std::string("no error");
  };
  // Unset, steps_per_epoch is one pass of the input: a DummyInput has no passes.
  EXPECT_NE(message(tp::TrainOptions()).find("steps_per_epoch is not set, and the input cannot tell how many batches a pass"),
            std::string::npos);
  EXPECT_NE(message(tp::TrainOptions().steps_per_epoch(-5)).find("got -5"), std::string::npos);
  EXPECT_NE(message(tp::TrainOptions().steps_per_epoch(1).starting_epoch(4).max_epoch(3))
                .find("max_epoch (3) is smaller than starting_epoch (4)"),
            std::string::npos);
  EXPECT_NE(message(tp::TrainOptions().steps_per_epoch(1).starting_epoch(0)).find("starting_epoch must be >= 1"),
            std::string::npos);
}

// Unset, steps_per_epoch is one pass of the input (tensorpack's default: the input's size), in
// steps of the default step's batches.
TEST(Loop, StepsPerEpochDefaultsToOnePassOfTheInput) {
  const auto batch = tp_test::regression_batch(24);
  auto steps_of = [&](auto flow, auto distribution) {
    auto trainer = tp::Trainer(tp::FeedInput(std::move(flow)), tp_test::linear_desc(), std::move(distribution), tp::TrainOptions());
    const auto steps = trainer.steps_per_epoch();
    trainer.train();
    EXPECT_EQ(trainer.global_step(), steps);
    return steps;
  };
  auto rows = [&] { return tp::data::examples(batch.data, batch.target); };
  EXPECT_EQ(steps_of(rows() | tp::data::batch(5), tp::SingleDevice()), 5);                                        // 4 batches of 5, one of 4
  EXPECT_EQ(steps_of(rows() | tp::data::batch(5, tp::data::remainder::drop), tp::SingleDevice()), 4);             // the 4 rows left dropped
  EXPECT_EQ(steps_of(rows() | tp::data::shuffle(1) | tp::data::shard(1, 2) | tp::data::batch(5), tp::SingleDevice()), 3);  // 12 rows
  EXPECT_EQ(steps_of(rows() | tp::data::batch(3), tp::SingleDevice().accumulate(2)), 4);                          // 8 batches, 2 a step
  EXPECT_EQ(steps_of(rows() | tp::data::batch(3), tp::Replicated<>::cpu(2)), 4);  // 2 towers
  // QueueInput knows it too; a flow shorter than one step is an error that says so.
  auto queued = tp::Trainer(tp::QueueInput(rows() | tp::data::batch(4)), tp_test::linear_desc(), tp::SingleDevice(), tp::TrainOptions());
  EXPECT_EQ(queued.steps_per_epoch(), 6);
  try {
    tp::Trainer(tp::FeedInput(rows() | tp::data::batch(24)), tp_test::linear_desc(), tp::SingleDevice().accumulate(2), tp::TrainOptions());
    ADD_FAILURE() << "a pass shorter than a step was accepted";
  } catch (const std::invalid_argument& e) {
    EXPECT_NE(std::string(e.what()).find("one pass of the input (1 batches) is less than one step of 2 batches"), std::string::npos) << e.what();
  }
}

// --- the default step ----------------------------------------------------------------------------

TEST(DefaultStep, GivesTheSameWeightsAsAHandWrittenLoop) {
  auto trainer = tp_test::make_trainer(tp::TrainOptions().steps_per_epoch(5).max_epoch(2));
  trainer.train();

  auto batch = tp_test::regression_batch();
  torch::manual_seed(7);
  torch::nn::Linear model(4, 1);
  torch::optim::SGD sgd(model->parameters(), 0.05);
  for (int i = 0; i < 10; ++i) {
    auto loss = torch::mse_loss(model->forward(batch.data), batch.target);
    sgd.zero_grad();
    loss.backward();
    sgd.step();
  }
  EXPECT_TRUE(torch::equal(trainer.model()->weight, model->weight));
  EXPECT_TRUE(torch::equal(trainer.model()->bias, model->bias));
}

TEST(DefaultStep, LowersTheCostAndReportsIt) {
  auto trainer = tp_test::make_trainer(tp::TrainOptions().steps_per_epoch(600));
  trainer.train();
  EXPECT_TRUE(trainer.last_cost().defined());
  EXPECT_FALSE(trainer.last_cost().requires_grad());
  EXPECT_LT(trainer.last_cost().item<double>(), 1e-3);
}

std::string train_error(auto desc, tp_test::Batch batch) {
  tp::Trainer trainer(tp::DummyInput(std::move(batch)), std::move(desc), tp::SingleDevice(),
                      tp::TrainOptions().steps_per_epoch(1));
  try {
    trainer.train();
  } catch (const std::runtime_error& e) {
    return e.what();
  }
  return "no error";
}

TEST(DefaultStep, ACostThatIsNotAScalarNamesTheTowerAndTheShape) {
  auto per_sample = tp::model_desc([] { return torch::nn::Linear(4, 1); })
                        .tower_function([](const tp::TowerContext&, torch::nn::Linear& m, const tp_test::Batch& b) {
                          return (m->forward(b.data) - b.target).pow(2);
                        })
                        .optimizer([](torch::nn::Linear& m) { return torch::optim::SGD(m->parameters(), 0.1); });
  const auto what = train_error(std::move(per_sample), tp_test::regression_batch());
  EXPECT_NE(what.find("tower 0 (cpu)"), std::string::npos) << what;
  EXPECT_NE(what.find("must be a scalar"), std::string::npos) << what;
  EXPECT_NE(what.find("[8, 1]"), std::string::npos) << what;
}

TEST(DefaultStep, ABatchThatDoesNotFitTheModelSaysTheShapes) {
  const auto what = train_error(tp_test::linear_desc(), tp_test::regression_batch(8, 5));
  EXPECT_NE(what.find("tower 0 (cpu)"), std::string::npos) << what;
  EXPECT_NE(what.find("(data [8, 5], target [8, 1])"), std::string::npos) << what;
  EXPECT_NE(what.find("8x5 and 4x1"), std::string::npos) << what;  // LibTorch's own words
}

TEST(DefaultStep, ADetachedCostIsReported) {
  auto detached = tp::model_desc([] { return torch::nn::Linear(4, 1); })
                      .tower_function([](const tp::TowerContext&, torch::nn::Linear& m, const tp_test::Batch& b) {
                        return torch::mse_loss(m->forward(b.data), b.target).detach();
                      })
                      .optimizer([](torch::nn::Linear& m) { return torch::optim::SGD(m->parameters(), 0.1); });
  const auto what = train_error(std::move(detached), tp_test::regression_batch());
  EXPECT_NE(what.find("does not require grad"), std::string::npos) << what;
}

// --- user steps ----------------------------------------------------------------------------------

TEST(UserStep, KeepsEveryCallbackAndItsCostIsShown) {
  Spy spy;
  auto trainer = tp_test::make_trainer(tp::TrainOptions().steps_per_epoch(3), spy);
  trainer.train([](auto& t) { return torch::tensor(double(t.global_step())); });
  EXPECT_EQ(only(*spy.log, "after_step").size(), 3u);
  EXPECT_EQ(trainer.last_cost().item<double>(), 2.0);
}

namespace {
struct CentroidImpl : torch::nn::Module {
  torch::Tensor c = register_buffer("c", torch::zeros({1}));
};
TORCH_MODULE(Centroid);
}  // namespace

TEST(UserStep, MayUseNoGradientsNorOptimizer) {
  // k-means-like update of a buffer: the tower policy has only a model.
  auto desc = tp::model_desc([] { return Centroid(); });
  static_assert(!tp::trainable_tower<decltype(desc), torch::Tensor>);
  tp::Trainer trainer(tp::DummyInput(torch::tensor({4.0f})), std::move(desc), tp::SingleDevice(),
                      tp::TrainOptions().steps_per_epoch(20));
  trainer.train([](auto& t) {
    auto& c = t.model()->c;
    c += 0.5 * (t.input().next_batch() - c);
  });
  EXPECT_NEAR(trainer.model()->c.template item<float>(), 4.0f, 1e-4);
  EXPECT_FALSE(trainer.last_cost().defined());
}

// --- scalars and access ----------------------------------------------------------------------------

namespace {
struct StepScalarRecorder {
  std::vector<std::pair<std::string, double>> seen;
  std::vector<std::int64_t> steps;
  void on_scalar(auto& t, std::string_view name, double value) {
    seen.emplace_back(name, value);
    steps.push_back(t.global_step());
  }
};
}  // namespace

namespace {
struct Putter {
  void after_step(auto& t) { t.put_scalar("cost", t.last_cost()); }
};
}  // namespace

TEST(Scalars, ReachEveryMonitorWithTheTrainer) {
  auto trainer = tp_test::make_trainer(tp::TrainOptions().steps_per_epoch(2), Putter{}, StepScalarRecorder{}, StepScalarRecorder{});
  trainer.train();
  auto& first = trainer.callback<1>();
  ASSERT_EQ(first.seen.size(), 2u);
  EXPECT_EQ(first.seen[0].first, "cost");
  EXPECT_GT(first.seen[0].second, first.seen[1].second);  // it learns
  EXPECT_EQ(first.steps, (std::vector<std::int64_t>{1, 2}));
  EXPECT_EQ(trainer.callback<2>().seen, first.seen);
}

TEST(Scalars, WithoutMonitorsPuttingIsFree) {
  using T = decltype(tp_test::make_trainer(tp::TrainOptions().steps_per_epoch(1), Spy{}));
  static_assert(!T::has_monitors());
  auto trainer = tp_test::make_trainer(tp::TrainOptions().steps_per_epoch(1), Spy{});
  // An undefined tensor would throw if it were read.
  EXPECT_NO_THROW(trainer.put_scalar("nothing", torch::Tensor()));
}

namespace {
struct StepCounter {
  int steps = 0;
  void after_step(auto&) { ++steps; }
};
}  // namespace

TEST(Access, CallbacksByTypeAndByIndex) {
  auto trainer = tp_test::make_trainer(tp::TrainOptions().steps_per_epoch(3), Spy{}, StepCounter{});
  trainer.train();
  EXPECT_EQ(trainer.callback<StepCounter>().steps, 3);
  EXPECT_EQ(&trainer.callback<1>(), &trainer.callback<StepCounter>());
}
