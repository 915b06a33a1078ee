// Triggers, the progress bar and the console monitor: what each one shows or gates.
#include <gtest/gtest.h>

#include <sstream>

#include "support.hpp"

using tp_test::only;
using tp_test::Spy;

TEST(Trigger, EveryNStepsGatesStepHooksByGlobalStep) {
  Spy spy;
  auto trainer = tp_test::make_trainer(tp::TrainOptions().steps_per_epoch(4).max_epoch(3),
                                       tp::every_n_steps(5, spy));
  trainer.train();
  EXPECT_EQ(only(*spy.log, "after_step"), (std::vector<std::string>{"after_step 2/0/5", "after_step 3/1/10"}));
  EXPECT_EQ(only(*spy.log, "before_step"), (std::vector<std::string>{"before_step 2/0/4", "before_step 3/1/9"}));
  // Lifecycle and epoch hooks pass through.
  EXPECT_EQ(only(*spy.log, "before_train").size(), 1u);
  EXPECT_EQ(only(*spy.log, "after_epoch").size(), 3u);
  EXPECT_EQ(only(*spy.log, "after_train").size(), 1u);
}

TEST(Trigger, EveryNEpochsGatesEpochHooks) {
  Spy spy;
  auto trainer = tp_test::make_trainer(tp::TrainOptions().steps_per_epoch(2).max_epoch(5),
                                       tp::every_n_epochs(2, spy));
  trainer.train();
  EXPECT_EQ(only(*spy.log, "after_epoch"), (std::vector<std::string>{"after_epoch 2/1/4", "after_epoch 4/1/8"}));
  EXPECT_EQ(only(*spy.log, "before_epoch"), (std::vector<std::string>{"before_epoch 2/0/2", "before_epoch 4/0/6"}));
  EXPECT_EQ(only(*spy.log, "after_step").size(), 10u);
}

TEST(Trigger, OnceAtStepFiresOnce) {
  Spy spy;
  auto trainer = tp_test::make_trainer(tp::TrainOptions().steps_per_epoch(3).max_epoch(3), tp::once_at_step(7, spy));
  trainer.train();
  EXPECT_EQ(only(*spy.log, "after_step"), (std::vector<std::string>{"after_step 3/0/7"}));
  EXPECT_EQ(only(*spy.log, "before_step"), (std::vector<std::string>{"before_step 3/0/6"}));
}

namespace {
struct OnlyAfterStep {
  void after_step(auto&) {}
};
}  // namespace

namespace {
struct Monitor {
  std::vector<double> values;
  void on_scalar(auto&, std::string_view, double v) { values.push_back(v); }
  void after_epoch(auto&) {}
};
}  // namespace

TEST(Trigger, ExposesOnlyTheHooksOfWhatItWraps) {
  using T = decltype(tp::every_n_steps(2, OnlyAfterStep{}));
  static_assert(tp::detail::names_after_step<T>);
  static_assert(!tp::detail::names_before_step<T> && !tp::detail::names_before_train<T> &&
                !tp::detail::names_on_scalar<T>);
  auto trainer = tp_test::make_trainer(tp::TrainOptions().steps_per_epoch(1), tp::every_n_epochs(3, Monitor{}));
  trainer.put_scalar("x", 1.5);
  EXPECT_EQ(trainer.callback<0>().inner().values, std::vector<double>{1.5});
}

TEST(Trigger, RejectsAPeriodBelowOne) {
  EXPECT_THROW(tp::every_n_steps(0, Spy{}), std::invalid_argument);
  EXPECT_THROW(tp::every_n_epochs(-1, Spy{}), std::invalid_argument);
  EXPECT_THROW(tp::once_at_step(0, Spy{}), std::invalid_argument);
}

// --- progress bar ------------------------------------------------------------------------------------

TEST(ProgressBar, PrintsOneLinePerEpochWhenNotATerminal) {
  std::ostringstream out;
  auto trainer = tp_test::make_trainer(tp::TrainOptions().steps_per_epoch(3).max_epoch(2), tp::ProgressBar(out, false));
  // Costs 1, 2, 3 then 4, 5, 6: the epoch means are 2 and 5.
  trainer.train([](auto& t) { return torch::tensor(double(t.global_step() + 1)); });
  const auto text = out.str();
  EXPECT_EQ(text.find('\r'), std::string::npos);
  std::istringstream lines(text);
  std::string first, second, none;
  std::getline(lines, first);
  std::getline(lines, second);
  EXPECT_FALSE(std::getline(lines, none));
  EXPECT_TRUE(first.starts_with("epoch 1/2 3/3 ")) << first;
  EXPECT_NE(first.find("it/s in 0:00 loss 2.0000"), std::string::npos) << first;
  EXPECT_TRUE(second.starts_with("epoch 2/2 3/3 ")) << second;
  EXPECT_NE(second.find("loss 5.0000"), std::string::npos) << second;
}

TEST(ProgressBar, RedrawsInPlaceOnATerminal) {
  std::ostringstream out;
  auto trainer = tp_test::make_trainer(tp::TrainOptions().steps_per_epoch(4), tp::ProgressBar(out, true, 0.0));
  trainer.train();
  const auto text = out.str();
  for (const char* part : {"\repoch 1/1  25% [######..................] 1/4 ", "\repoch 1/1  50%", "ETA ",
                           "\repoch 1/1 100% [########################] 4/4 "})
    EXPECT_NE(text.find(part), std::string::npos) << part << " not in " << text;
  EXPECT_EQ(text.back(), '\n');
  EXPECT_EQ(std::count(text.begin(), text.end(), '\n'), 1);
}

TEST(ProgressBar, EndsAnOpenLineWhenTrainingFails) {
  std::ostringstream out;
  auto trainer = tp_test::make_trainer(tp::TrainOptions().steps_per_epoch(4), tp::ProgressBar(out, true, 0.0));
  EXPECT_THROW(trainer.train([](auto& t) {
    if (t.global_step() == 2) throw std::runtime_error("x");
  }),
               std::runtime_error);
  EXPECT_EQ(out.str().back(), '\n');
  EXPECT_NE(out.str().find("2/4"), std::string::npos);
}

TEST(ProgressBar, ShowsNoLossForStepsWithoutCost) {
  std::ostringstream out;
  auto trainer = tp_test::make_trainer(tp::TrainOptions().steps_per_epoch(2), tp::ProgressBar(out, false));
  trainer.train([](auto&) {});
  EXPECT_EQ(out.str().find("loss"), std::string::npos) << out.str();
}

// --- console monitor ------------------------------------------------------------------------------

struct PutsScalars {
  void after_epoch(auto& t) {
    t.put_scalar("val/accuracy", 0.5 + t.epoch_num());
    t.put_scalar("train/loss", 0.25);
    t.put_scalar("lr", 0.125);
  }
};

TEST(ScalarPrinter, PrintsTheEpochsScalarsSortedByName) {
  std::ostringstream out;
  auto trainer = tp_test::make_trainer(tp::TrainOptions().steps_per_epoch(1).max_epoch(2), tp::ScalarPrinter(out),
                                       PutsScalars{});
  trainer.train();
  EXPECT_EQ(out.str(),
            "[epoch 1] lr: 0.125\n[epoch 1] train/loss: 0.25\n[epoch 1] val/accuracy: 1.5\n"
            "[epoch 2] lr: 0.125\n[epoch 2] train/loss: 0.25\n[epoch 2] val/accuracy: 2.5\n");
}

TEST(ScalarPrinter, FiltersNamesAndCanPrintEachPut) {
  std::ostringstream out;
  auto printer = tp::ScalarPrinter(out);
  printer.include("val/.*").include("train/.*").exclude(".*loss").print_each_put(true);
  auto trainer = tp_test::make_trainer(tp::TrainOptions().steps_per_epoch(1), printer, PutsScalars{});
  trainer.train();
  EXPECT_EQ(out.str(), "[step 1] val/accuracy: 1.5\n[epoch 1] val/accuracy: 1.5\n");
}

TEST(ScalarPrinter, RejectsABadPattern) {
  tp::ScalarPrinter printer;
  try {
    printer.include("(unclosed");
    FAIL();
  } catch (const std::invalid_argument& e) {
    EXPECT_NE(std::string(e.what()).find("'(unclosed' is not a valid regular expression"), std::string::npos);
  }
}
