// The concepts, positive and negative. These are compile-time tests: this file does not build
// if one of them breaks. The compile-fail tests (compile_fail/) check the error messages.
#include <gtest/gtest.h>

#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "support.hpp"

namespace {

// Stands in for a trainer: hooks are checked against the type they are called with.
struct FakeTrainer {
  std::int64_t global_step() const { return 0; }
};

struct AfterStepOnly {
  void after_step(auto&) {}
};
struct TakesConcreteTrainer {
  void before_epoch(FakeTrainer&) {}
};
struct NoHooks {
  int steps = 0;
  void step() {}
};
struct WrongSignature {
  void after_step() {}  // forgot the trainer
};
struct WrongScalarSignature {
  void on_scalar(auto&, double) {}  // forgot the name
};
struct ScalarMonitor {
  void on_scalar(auto&, std::string_view, double) {}
};
struct DataMemberNamedLikeAHook {
  int after_step = 0;
};
struct FinalWithHook final {
  void after_epoch(auto&) {}
};

static_assert(tp::callback<AfterStepOnly>);
static_assert(tp::callback_for<AfterStepOnly, FakeTrainer>);
static_assert(tp::callback_for<TakesConcreteTrainer, FakeTrainer>);
static_assert(!tp::callback<NoHooks>);
static_assert(!tp::callback<int>);
static_assert(!tp::callback<std::pair<int, int>>);
static_assert(tp::callback<WrongSignature> && !tp::callback_for<WrongSignature, FakeTrainer>);
static_assert(tp::callback<WrongScalarSignature> && !tp::callback_for<WrongScalarSignature, FakeTrainer>);
static_assert(tp::monitor_for<ScalarMonitor, FakeTrainer> && !tp::monitor_for<AfterStepOnly, FakeTrainer>);
static_assert(tp::callback<DataMemberNamedLikeAHook> && !tp::callback_for<DataMemberNamedLikeAHook, FakeTrainer>);
static_assert(!tp::callback<FinalWithHook>);  // names cannot be probed in a final class

// Library callbacks are callbacks.
static_assert(tp::callback<tp::ProgressBar> && tp::callback<tp::ScalarPrinter>);
static_assert(tp::callback<decltype(tp::every_n_steps(1, AfterStepOnly{}))>);

// Triggers (the broken cases are compile-fail tests: their rules fail a static_assert).
struct BeforeEpochOnly {
  void before_epoch(auto&) {}
};
static_assert(tp::detail::check_trigger<AfterStepOnly, tp::schedule::every_n_steps>());
static_assert(tp::detail::check_trigger<BeforeEpochOnly, tp::schedule::every_n_epochs>());
static_assert(std::is_same_v<decltype(tp::every_n_epochs(2, BeforeEpochOnly{})),
                             tp::Trigger<BeforeEpochOnly, tp::schedule::every_n_epochs>>);

// Scalars.
static_assert(tp::scalar_value<double> && tp::scalar_value<int> && tp::scalar_value<float> && tp::scalar_value<bool>);
static_assert(tp::scalar_value<torch::Tensor>);
static_assert(!tp::scalar_value<std::string> && !tp::scalar_value<const char*> && !tp::scalar_value<std::vector<double>>);

// Inputs.
struct NoNextBatch {
  torch::Tensor batch;
};
struct VoidNextBatch {
  void next_batch() {}
};
struct NotMovable {
  NotMovable(NotMovable&&) = delete;
  torch::Tensor next_batch() { return {}; }
};
static_assert(tp::input_policy<tp::DummyInput<torch::Tensor>>);
static_assert(std::is_same_v<tp::batch_t<tp::DummyInput<tp_test::Batch>>, tp_test::Batch>);
using NumberedFlow = decltype(tp::data::examples(torch::zeros({2}), torch::zeros({2})) | tp::data::batch(1));
static_assert(tp::input_policy<tp::FeedInput<NumberedFlow>>);
static_assert(std::is_same_v<tp::batch_t<tp::FeedInput<NumberedFlow>>, torch::data::Example<>>);
static_assert(!tp::input_policy<NoNextBatch>);
static_assert(!tp::input_policy<VoidNextBatch>);
static_assert(!tp::input_policy<NotMovable>);
static_assert(!tp::input_policy<int>);

// Towers.
static_assert(tp::module_handle<torch::nn::Linear>);
static_assert(tp::module_handle<std::shared_ptr<torch::nn::Module>>);
static_assert(!tp::module_handle<torch::nn::LinearImpl>);
static_assert(!tp::module_handle<int>);

using LinearDesc = decltype(tp_test::linear_desc());
static_assert(tp::tower_policy<LinearDesc>);
static_assert(std::is_same_v<tp::model_t<LinearDesc>, torch::nn::Linear>);
static_assert(tp::trainable_tower<LinearDesc, tp_test::Batch>);
static_assert(!tp::trainable_tower<LinearDesc, torch::Tensor>);  // the tower function takes an Example

// A type, not a variable: only unevaluated operands use it (clang warns of an unneeded variable).
using MakeLinear = decltype([] { return torch::nn::Linear(4, 1); });
using ReturnsFloat = decltype(tp::model_desc(MakeLinear{})
                                  .tower_function([](const tp::TowerContext&, torch::nn::Linear&, const torch::Tensor&) { return 1.0f; })
                                  .optimizer([](torch::nn::Linear& m) { return torch::optim::SGD(m->parameters(), 0.1); }));
static_assert(tp::tower_policy<ReturnsFloat> && !tp::trainable_tower<ReturnsFloat, torch::Tensor>);
using ReturnsPair = decltype(tp::model_desc(MakeLinear{})
                                 .tower_function([](const tp::TowerContext&, torch::nn::Linear&, const torch::Tensor& t) { return std::pair{t, t}; })
                                 .optimizer([](torch::nn::Linear& m) { return torch::optim::SGD(m->parameters(), 0.1); }));
static_assert(!tp::trainable_tower<ReturnsPair, torch::Tensor>);
using NoOptimizer = decltype(tp::model_desc(MakeLinear{}).tower_function(
    [](const tp::TowerContext&, torch::nn::Linear& m, const torch::Tensor& t) { return m->forward(t).sum(); }));
static_assert(tp::tower_policy<NoOptimizer> && !tp::trainable_tower<NoOptimizer, torch::Tensor>);
struct ReturnsNoModule {
  int make_model() { return 0; }
};
static_assert(!tp::tower_policy<ReturnsNoModule> && !tp::tower_policy<int>);
struct NoMakeModel {
  torch::nn::Linear build() { return torch::nn::Linear(4, 1); }
};
static_assert(!tp::tower_policy<NoMakeModel>);
using ReturnsModuleByValue = decltype(tp::model_desc([] { return torch::nn::LinearImpl(4, 1); }));
static_assert(!tp::tower_policy<ReturnsModuleByValue>);
using OptimizerPointer = decltype(tp::model_desc(MakeLinear{})
                                      .tower_function([](const tp::TowerContext&, torch::nn::Linear& m, const torch::Tensor& t) {
                                        return m->forward(t).sum();
                                      })
                                      .optimizer([](torch::nn::Linear& m) {
                                        return std::make_unique<torch::optim::SGD>(m->parameters(), 0.1);
                                      }));
static_assert(tp::tower_policy<OptimizerPointer> && !tp::trainable_tower<OptimizerPointer, torch::Tensor>);

// Optimizers.
static_assert(tp::optimizer<torch::optim::SGD> && tp::optimizer<torch::optim::Adam>);
static_assert(!tp::optimizer<int>);
static_assert(!tp::optimizer<std::unique_ptr<torch::optim::SGD>>);  // a pointer to one is not one

// Distribution policies.
static_assert(tp::distribution_policy<tp::SingleDevice, LinearDesc>);
static_assert(tp::stepping_distribution<tp::SingleDevice, LinearDesc, tp::DummyInput<tp_test::Batch>>);
static_assert(!tp::stepping_distribution<tp::SingleDevice, LinearDesc, tp::DummyInput<torch::Tensor>>);
static_assert(tp::distribution_policy<tp::SingleDevice, NoOptimizer>);
static_assert(!tp::stepping_distribution<tp::SingleDevice, NoOptimizer, tp::DummyInput<torch::Tensor>>);
static_assert(!tp::distribution_policy<int, LinearDesc>);
static_assert(!tp::distribution_policy<torch::Device, LinearDesc>);
// The concept's minimum (a main model and its optimizers, here none: a user step owns them),
// which has no default step, and replicas without a main model.
struct ModelOnly {
  template <class Tower>
  struct Replicas {
    tp::model_t<Tower> model;
    tp::model_t<Tower>& main_model() { return model; }
    void for_each_optimizer(auto&&) {}
  };
  template <class Tower>
  Replicas<Tower> build(Tower& tower) {
    return {tower.make_model()};
  }
};
struct NoMainModel {
  template <class Tower>
  struct Replicas {
    tp::model_t<Tower> model;
  };
  template <class Tower>
  Replicas<Tower> build(Tower& tower) {
    return {tower.make_model()};
  }
};
static_assert(tp::distribution_policy<ModelOnly, LinearDesc>);
static_assert(!tp::stepping_distribution<ModelOnly, LinearDesc, tp::DummyInput<tp_test::Batch>>);
static_assert(tp::detail::builds_replicas<NoMainModel, LinearDesc> && !tp::distribution_policy<NoMainModel, LinearDesc>);

// Optional capabilities, each whole (the compile-fail cases check that half of one is refused).
using SingleReplicas = tp::replicas_t<tp::SingleDevice, LinearDesc>;
using ProcessReplicas = tp::replicas_t<tp::MultiProcess<tp::backend::Gloo>, LinearDesc>;
static_assert(!tp::multi_process_replicas<SingleReplicas> && tp::multi_process_replicas<ProcessReplicas>);
static_assert(!tp::shards_state<SingleReplicas, LinearDesc> && tp::shards_state<ProcessReplicas, LinearDesc>);
static_assert(tp::synced_at_start<tp::replicas_t<tp::Replicated<tp::InProcess>, LinearDesc>> && !tp::synced_at_start<SingleReplicas>);
static_assert(tp::epoch_end_work<tp::replicas_t<tp::Replicated<tp::InProcess>, LinearDesc>> && !tp::epoch_end_work<SingleReplicas>);
using Flow = decltype(tp::data::examples(torch::zeros({4, 4}), torch::zeros({4, 1})) | tp::data::batch(2));
static_assert(tp::background_input<tp::QueueInput<Flow>> && tp::resumable_input<tp::QueueInput<Flow>>);
static_assert(!tp::background_input<tp::FeedInput<Flow>> && tp::resumable_input<tp::FeedInput<Flow>>);
static_assert(!tp::background_input<tp::DummyInput<tp_test::Batch>> && !tp::resumable_input<tp::DummyInput<tp_test::Batch>>);

// The checks say whether the rules hold, for the code they guard.
static_assert(tp::detail::check_input<tp::DummyInput<tp_test::Batch>>());
static_assert(tp::detail::check_tower_policy<LinearDesc>() && tp::detail::check_trainable_tower<LinearDesc, tp_test::Batch>());
static_assert(tp::detail::check_distribution<tp::SingleDevice, LinearDesc>());
static_assert(tp::detail::check_default_step<tp::SingleDevice, LinearDesc, tp::DummyInput<tp_test::Batch>>());
static_assert(tp::detail::check_scalar<float>());

}  // namespace

// The loop itself does nothing for a callback without a hook at a given event: with only
// no-op callbacks the trainer is the same type and size as with a handful of them.
namespace {
struct Empty {
  void after_step(auto&) {}
};
}  // namespace

TEST(Concepts, EmptyCallbacksTakeNoSpaceInTheTrainer) {
  using Plain = decltype(tp_test::make_trainer(tp::TrainOptions().steps_per_epoch(1)));
  using With = decltype(tp_test::make_trainer(tp::TrainOptions().steps_per_epoch(1), Empty{}));
  EXPECT_EQ(sizeof(Plain), sizeof(With));
}

TEST(Concepts, TheCheckedTrainerAcceptsWhatTheConceptsAccept) {
  auto trainer = tp_test::make_trainer(tp::TrainOptions().steps_per_epoch(1), AfterStepOnly{}, ScalarMonitor{},
                                       tp::every_n_epochs(2, tp_test::Spy{}));
  using T = std::remove_reference_t<decltype(trainer)>;
  static_assert(tp::callback_for<AfterStepOnly, T> && tp::monitor_for<ScalarMonitor, T>);
  static_assert(tp::callback_for<tp_test::Spy, T>);
  EXPECT_NO_THROW(trainer.train());
}

// What the concepts accept, the trainer can train: a model held by a std::shared_ptr, and a
// distribution policy with nothing but the concept's minimum (with a user step).
TEST(Concepts, TrainsAModelHeldByASharedPtr) {
  auto desc = tp::model_desc([] { return std::make_shared<torch::nn::LinearImpl>(4, 1); })
                  .tower_function([](const tp::TowerContext&, std::shared_ptr<torch::nn::LinearImpl>& m, const tp_test::Batch& b) {
                    return torch::mse_loss(m->forward(b.data), b.target);
                  })
                  .optimizer([](std::shared_ptr<torch::nn::LinearImpl>& m) { return torch::optim::SGD(m->parameters(), 0.1); });
  static_assert(tp::module_handle<std::shared_ptr<torch::nn::LinearImpl>>);
  tp::Trainer trainer(tp::DummyInput(tp_test::regression_batch()), desc, tp::SingleDevice(),
                      tp::TrainOptions().steps_per_epoch(20).model_summary(true));
  const auto before = trainer.model()->weight.clone();
  trainer.train();
  EXPECT_EQ(trainer.global_step(), 20);
  EXPECT_FALSE(torch::equal(before, trainer.model()->weight));
  // A checkpoint goes through the same handle.
  const auto saved = trainer.state_dict();
  auto again = tp::Trainer(tp::DummyInput(tp_test::regression_batch()), desc, tp::SingleDevice(), tp::TrainOptions().steps_per_epoch(20));
  again.load_state_dict(saved);
  EXPECT_TRUE(torch::equal(again.model()->weight, trainer.model()->weight));
  EXPECT_EQ(again.global_step(), 20);
}

TEST(Concepts, TrainsWithAPolicyOfTheConceptsMinimum) {
  tp::Trainer trainer(tp::DummyInput(tp_test::regression_batch()), tp_test::linear_desc(), ModelOnly{},
                      tp::TrainOptions().steps_per_epoch(5).max_epoch(2));
  torch::optim::SGD sgd(trainer.model()->parameters(), 0.1);
  const auto before = trainer.model()->weight.clone();
  trainer.train([&](auto& t) {
    const auto batch = t.input().next_batch();
    sgd.zero_grad();
    auto cost = torch::mse_loss(t.model()->forward(batch.data), batch.target);
    cost.backward();
    sgd.step();
    return cost;
  });
  EXPECT_EQ(trainer.global_step(), 10);
  EXPECT_FALSE(torch::equal(before, trainer.model()->weight));
  EXPECT_NO_THROW(trainer.state_dict());  // no optimizers to save: the policy holds none
}
