// Many towers in one process, on CPU threads: Replicated<InProcess>, ParameterServer<CPU>,
// Async; gradient processing after the reduction; predictors.
#include <gtest/gtest.h>

#include <atomic>
#include <cmath>
#include <limits>

#include "support.hpp"

namespace {

using Batch = torch::data::Example<>;

// 256 rows of a non-linear regression problem.
const Batch& dataset() {
  static const Batch d = [] {
    torch::manual_seed(3);
    auto x = torch::randn({256, 4});
    return Batch{x, torch::sin(x.matmul(torch::tensor({{1.0f}, {-2.0f}, {0.5f}, {3.0f}})))};
  }();
  return d;
}

// Without shuffling, N towers pulling batches of b see the rows that one tower pulling batches
// of N x b sees.
auto feed(std::int64_t batch) { return tp::FeedInput(tp::data::examples(dataset().data, dataset().target) | tp::data::batch(batch)); }

std::atomic<bool> poison{false};  // makes every cost NaN while set

auto tower_mlp_desc(double regularisation = 0.0) {
  return tp::model_desc([] {
           torch::manual_seed(5);
           return torch::nn::Sequential(torch::nn::Linear(4, 16), torch::nn::Tanh(), torch::nn::Linear(16, 1));
         })
      .tower_function([regularisation](const tp::TowerContext&, torch::nn::Sequential& m, const Batch& b) {
        auto cost = torch::mse_loss(m->forward(b.data), b.target);
        if (regularisation > 0)  // added in every tower: the average counts it once
          for (const auto& p : m->parameters()) cost = cost + regularisation * p.pow(2).sum();
        if (poison) cost = cost * std::numeric_limits<float>::quiet_NaN();
        return cost;
      })
      .optimizer([](torch::nn::Sequential& m) { return torch::optim::SGD(m->parameters(), torch::optim::SGDOptions(0.1).momentum(0.9)); });
}

template <class Distribution>
torch::nn::Sequential train(Distribution distribution, std::int64_t batch, int steps, double regularisation = 0.0) {
  tp::Trainer trainer(feed(batch), tower_mlp_desc(regularisation), std::move(distribution), tp::TrainOptions().steps_per_epoch(steps));
  trainer.train();
  return trainer.model();
}

void expect_same_weights(torch::nn::Sequential a, torch::nn::Sequential b) {
  auto pa = a->parameters(), pb = b->parameters();
  ASSERT_EQ(pa.size(), pb.size());
  for (std::size_t i = 0; i < pa.size(); ++i)
    EXPECT_TRUE(torch::allclose(pa[i], pb[i], 1e-4, 1e-6)) << "parameter " << i << " differs by "
                                                           << (pa[i] - pb[i]).abs().max().item<double>();
}

}  // namespace

// --- equivalence: N towers x batch b == 1 tower x batch N b ----------------------------------------

TEST(Replicated, NTowersGiveTheWeightsOfOneTowerWithNTimesTheBatch) {
  for (int towers : {2, 3}) {
    SCOPED_TRACE(towers);
    expect_same_weights(train(tp::Replicated<>::cpu(towers), 8, 8), train(tp::SingleDevice(), 8 * towers, 8));
  }
}

TEST(Replicated, EquivalenceHoldsWithClippingAndRegularisation) {
  const auto clip = tp::GradientProcessing().clip_global_norm(0.05);  // small enough to act every step
  expect_same_weights(train(tp::Replicated<>::cpu(2).gradients(clip), 8, 8, 1e-3),
                      train(tp::SingleDevice().gradients(clip), 16, 8, 1e-3));
  // and clipping did act: without it the weights differ
  auto unclipped = train(tp::SingleDevice(), 16, 8, 1e-3), clipped = train(tp::SingleDevice().gradients(clip), 16, 8, 1e-3);
  EXPECT_FALSE(torch::allclose(unclipped->parameters()[0], clipped->parameters()[0]));
}

TEST(ParameterServer, NTowersGiveTheWeightsOfOneTowerWithNTimesTheBatch) {
  for (int towers : {2, 3}) {
    SCOPED_TRACE(towers);
    expect_same_weights(train(tp::ParameterServer<tp::CPU>::cpu(towers), 8, 8), train(tp::SingleDevice(), 8 * towers, 8));
  }
  const auto clip = tp::GradientProcessing().clip_global_norm(0.05);
  expect_same_weights(train(tp::ParameterServer<>::cpu(2).gradients(clip), 8, 8, 1e-3),
                      train(tp::SingleDevice().gradients(clip), 16, 8, 1e-3));
}

// --- replicas --------------------------------------------------------------------------------------

TEST(Replicated, ReplicasStayIdenticalAndStartFromTheMainModel) {
  tp::Trainer trainer(feed(8), tower_mlp_desc(), tp::Replicated<>::cpu(3), tp::TrainOptions().steps_per_epoch(5));
  {
    torch::NoGradGuard no_grad;
    for (auto& p : trainer.model()->parameters()) p.fill_(0.01);  // e.g. weights loaded from a checkpoint
  }
  EXPECT_FALSE(trainer.replicas().identical());
  trainer.train();
  EXPECT_TRUE(trainer.replicas().identical());
  tp::Trainer fresh(feed(8), tower_mlp_desc(), tp::Replicated<>::cpu(3), tp::TrainOptions().steps_per_epoch(1));
  EXPECT_TRUE(fresh.replicas().identical());  // built identical
}

namespace {
struct PerturbTowerOne {
  bool identical_at_epoch_end = false;
  void after_step(auto& t) {
    if (t.local_step() + 1 == t.steps_per_epoch()) {
      torch::NoGradGuard no_grad;
      t.replicas().model(1)->parameters()[0].add_(1.0);
    }
  }
  void after_epoch(auto& t) { identical_at_epoch_end = t.replicas().identical(); }
};
}  // namespace

TEST(Replicated, ResyncsFromTowerZeroEveryNEpochs) {
  tp::Trainer synced(feed(8), tower_mlp_desc(), tp::Replicated<>::cpu(2).resync_every_epochs(1), tp::TrainOptions().steps_per_epoch(2),
                     PerturbTowerOne{});
  synced.train();
  EXPECT_TRUE(synced.callback<PerturbTowerOne>().identical_at_epoch_end);
  tp::Trainer drifting(feed(8), tower_mlp_desc(), tp::Replicated<>::cpu(2), tp::TrainOptions().steps_per_epoch(2), PerturbTowerOne{});
  drifting.train();
  EXPECT_FALSE(drifting.callback<PerturbTowerOne>().identical_at_epoch_end);
}

TEST(Replicated, BucketingMakesReduceCallsIndependentOfTheNumberOfTensors) {
  auto many = tp::model_desc([] {
                torch::manual_seed(9);
                torch::nn::Sequential s;
                s->push_back(torch::nn::Linear(4, 8));
                for (int i = 0; i < 39; ++i) s->push_back(torch::nn::Linear(8, 8));
                return s;
              })
                  .tower_function([](const tp::TowerContext&, torch::nn::Sequential& m, const Batch& b) {
                    return m->forward(b.data).pow(2).mean();
                  })
                  .optimizer([](torch::nn::Sequential& m) { return torch::optim::SGD(m->parameters(), 0.01); });
  tp::Trainer fused(feed(8), many, tp::Replicated<>::cpu(2), tp::TrainOptions().steps_per_epoch(3));
  fused.train();
  EXPECT_EQ(fused.replicas().buckets(), 1u);  // 80 tensors, 11 KB: one bucket
  EXPECT_EQ(fused.replicas().reduce_calls(), 3);
  tp::Trainer split(feed(8), many, tp::Replicated<>::cpu(2).bucket_bytes(1), tp::TrainOptions().steps_per_epoch(3));
  split.train();
  EXPECT_EQ(split.replicas().buckets(), 80u);
  EXPECT_EQ(split.replicas().reduce_calls(), 240);
  expect_same_weights(fused.model(), split.model());
}

// --- gradient processing after the reduction ---------------------------------------------------------

namespace {
struct PoisonAt {
  std::int64_t step;
  void before_step(auto& t) { poison = t.global_step() + 1 == step; }
  void after_train(auto&) { poison = false; }
};
std::vector<torch::Tensor> snapshot(torch::nn::Sequential m) {
  std::vector<torch::Tensor> out;
  for (auto& p : m->parameters()) out.push_back(p.detach().clone());
  return out;
}
struct Snapshots {
  std::vector<torch::Tensor> before, after;
  void before_step(auto& t) {
    if (t.global_step() + 1 == 3) before = snapshot(t.model());
  }
  void after_step(auto& t) {
    if (t.global_step() == 3) after = snapshot(t.model());
  }
};
}  // namespace

TEST(GradientProcessing, SkipLeavesTheWeightsAsTheyWere) {
  tp::Trainer trainer(feed(8), tower_mlp_desc(), tp::Replicated<>::cpu(2).gradients(tp::GradientProcessing().on_non_finite(tp::non_finite::skip)),
                      tp::TrainOptions().steps_per_epoch(5), PoisonAt{3}, Snapshots{});
  trainer.train();
  const auto& s = trainer.callback<Snapshots>();
  for (std::size_t i = 0; i < s.before.size(); ++i) EXPECT_TRUE(torch::equal(s.before[i], s.after[i]));
  for (auto& p : trainer.model()->parameters()) EXPECT_TRUE(torch::isfinite(p).all().item<bool>());
  EXPECT_TRUE(trainer.replicas().identical());
}

TEST(GradientProcessing, ZeroAppliesAnUpdateWithoutTheBadEntries) {
  tp::Trainer trainer(feed(8), tower_mlp_desc(), tp::Replicated<>::cpu(2).gradients(tp::GradientProcessing().on_non_finite(tp::non_finite::zero)),
                      tp::TrainOptions().steps_per_epoch(5), PoisonAt{3}, Snapshots{});
  trainer.train();
  const auto& s = trainer.callback<Snapshots>();
  // The gradient was zeroed, but momentum still moved the weights: the update was applied.
  EXPECT_FALSE(torch::equal(s.before[0], s.after[0]));
  for (auto& p : trainer.model()->parameters()) EXPECT_TRUE(torch::isfinite(p).all().item<bool>());
}

TEST(GradientProcessing, StopNamesTheParameter) {
  tp::Trainer trainer(feed(8), tower_mlp_desc(), tp::SingleDevice().gradients(tp::GradientProcessing().on_non_finite(tp::non_finite::stop)),
                      tp::TrainOptions().steps_per_epoch(5), PoisonAt{2});
  try {
    trainer.train();
    FAIL() << "a NaN gradient went through";
  } catch (const tp::non_finite_gradient& e) {
    EXPECT_NE(std::string(e.what()).find("the gradient of 0.weight holds NaN or Inf"), std::string::npos) << e.what();
  }
  EXPECT_EQ(trainer.global_step(), 1);
  EXPECT_THROW(tp::GradientProcessing().clip_global_norm(0), std::invalid_argument);
}

// --- async --------------------------------------------------------------------------------------------

TEST(Async, ConvergesOnAConvexProblemAndLosesNoUpdate) {
  auto linear = tp::model_desc([] { return torch::nn::Linear(4, 1); })
                    .tower_function([](const tp::TowerContext&, torch::nn::Linear& m, const Batch& b) {
                      return torch::mse_loss(m->forward(b.data), b.target);
                    })
                    .optimizer([](torch::nn::Linear& m) { return torch::optim::SGD(m->parameters(), 0.1); });
  auto data = tp_test::regression_batch(64);
  tp::Trainer trainer(tp::FeedInput(tp::data::examples(data.data, data.target) | tp::data::shuffle(1) | tp::data::batch(8)), linear,
                      tp::Async::cpu(3), tp::TrainOptions().steps_per_epoch(100).max_epoch(2));
  trainer.train();
  EXPECT_EQ(trainer.replicas().updates(), 3 * 200);
  const auto loss = torch::mse_loss(trainer.model()->forward(data.data), data.target).item<double>();
  EXPECT_LT(loss, 1e-4);
}

// --- errors ---------------------------------------------------------------------------------------------

namespace {
// Every second batch has 5 columns instead of 4: tower 1 gets them.
struct BadForTowerOne {
  int pulls = 0;
  Batch next_batch() {
    return pulls++ % 2 == 0 ? Batch{torch::zeros({2, 4}), torch::zeros({2, 1})} : Batch{torch::zeros({2, 5}), torch::zeros({2, 1})};
  }
};
}  // namespace

TEST(Towers, AFailureInATowerThreadReachesTheLoopNamingTheTower) {
  tp::Trainer trainer(BadForTowerOne{}, tower_mlp_desc(), tp::Replicated<>::cpu(2), tp::TrainOptions().steps_per_epoch(3));
  try {
    trainer.train();
    FAIL();
  } catch (const std::runtime_error& e) {
    EXPECT_NE(std::string(e.what()).find("tower 1 (cpu): the tower function failed on a batch of shape (data [2, 5]"),
              std::string::npos)
        << e.what();
  }
}

TEST(Towers, MakeModelMustBuildANewModelPerTower) {
  torch::nn::Linear shared(4, 1);
  auto desc = tp::model_desc([shared] { return shared; })
                  .tower_function([](const tp::TowerContext&, torch::nn::Linear& m, const Batch& b) { return m->forward(b.data).mean(); })
                  .optimizer([](torch::nn::Linear& m) { return torch::optim::SGD(m->parameters(), 0.1); });
  try {
    tp::Trainer trainer(feed(8), desc, tp::Replicated<>::cpu(2), tp::TrainOptions().steps_per_epoch(1));
    FAIL();
  } catch (const std::invalid_argument& e) {
    EXPECT_NE(std::string(e.what()).find("make_model() returned the same module twice"), std::string::npos);
  }
}

TEST(Towers, BadDeviceListsAreRejected) {
  EXPECT_THROW(tp::Replicated<>::cpu(0), std::invalid_argument);
  EXPECT_THROW(tp::Replicated<>(std::vector<torch::Device>{}), std::invalid_argument);
  try {
    tp::Replicated<tp::InProcess>({torch::Device(torch::kCUDA, 0)});
    FAIL();
  } catch (const std::invalid_argument& e) {
    EXPECT_NE(std::string(e.what()).find("tp::InProcess reduces CPU towers"), std::string::npos);
  }
  EXPECT_THROW(tp::Async::cpu(-1), std::invalid_argument);
}

// --- predictors ---------------------------------------------------------------------------------------

TEST(Predictor, IsAnEvalModeNoGradCopyOfTheTrainedModel) {
  auto desc = tp::model_desc([] {
                torch::manual_seed(2);
                return torch::nn::Sequential(torch::nn::Linear(4, 16), torch::nn::Dropout(0.5), torch::nn::Linear(16, 1));
              })
                  .tower_function([](const tp::TowerContext&, torch::nn::Sequential& m, const Batch& b) {
                    return torch::mse_loss(m->forward(b.data), b.target);
                  })
                  .optimizer([](torch::nn::Sequential& m) { return torch::optim::SGD(m->parameters(), 0.05); });
  tp::Trainer trainer(feed(8), desc, tp::Replicated<>::cpu(2), tp::TrainOptions().steps_per_epoch(5));
  trainer.train();
  auto predict = tp::make_predictor(trainer);
  const auto x = dataset().data.slice(0, 0, 10);
  const auto y = predict(x);
  EXPECT_FALSE(y.requires_grad());
  EXPECT_TRUE(torch::equal(y, predict(x)));  // eval mode: dropout off, deterministic
  trainer.model()->eval();
  {
    torch::NoGradGuard no_grad;
    EXPECT_TRUE(torch::allclose(y, trainer.model()->forward(x)));
  }
  trainer.model()->train();
  trainer.train();  // more training does not touch the predictor until sync()
  EXPECT_TRUE(torch::equal(y, predict(x)));
  predict.sync(trainer.model());
  EXPECT_FALSE(torch::equal(y, predict(x)));
}

namespace {
struct RecordNorms {
  std::vector<double> seen;
  void after_step(auto& t) { seen.push_back(t.replicas().gradient_processing().last_norm()); }
};
}  // namespace

TEST(GradientNorm, PutsTheMeanAndMaxOfTheReducedGradientsNorm) {
  // Two towers, batch 8 each, give the gradient of one tower with batch 16: its norm is the
  // one recorded.
  tp::Trainer two(feed(8), tower_mlp_desc(), tp::Replicated<>::cpu(2).gradients(tp::GradientProcessing().record_norm()),
                  tp::TrainOptions().steps_per_epoch(3), RecordNorms{}, tp::GradientNorm{}, tp::JSONWriter(::testing::TempDir() + "/tp_gradnorm"));
  two.train();
  tp::Trainer one(feed(16), tower_mlp_desc(), tp::SingleDevice().gradients(tp::GradientProcessing().record_norm()), tp::TrainOptions().steps_per_epoch(3),
                  RecordNorms{});
  one.train();
  const auto& a = two.callback<RecordNorms>().seen;
  const auto& b = one.callback<RecordNorms>().seen;
  ASSERT_EQ(a.size(), 3u);
  for (std::size_t i = 0; i < a.size(); ++i) EXPECT_NEAR(a[i], b[i], 1e-5 * b[i]) << i;
  const auto stats = tp::JSONWriter::read(::testing::TempDir() + "/tp_gradnorm/stats.json");
  ASSERT_EQ(stats.size(), 1u);
  EXPECT_NEAR(stats[0].scalars.at("gradient_norm/mean"), (a[0] + a[1] + a[2]) / 3, 1e-12);
  EXPECT_EQ(stats[0].scalars.at("gradient_norm/max"), std::max({a[0], a[1], a[2]}));
}

TEST(GradientNorm, WithoutRecordingIsAClearError) {
  tp::Trainer trainer(feed(8), tower_mlp_desc(), tp::SingleDevice(), tp::TrainOptions().steps_per_epoch(1), tp::GradientNorm{});
  try {
    trainer.train();
    FAIL() << "no error";
  } catch (const std::invalid_argument& e) {
    EXPECT_NE(std::string(e.what()).find("GradientProcessing().record_norm()"), std::string::npos) << e.what();
  }
}

// compress_gradients takes the types a wire can carry, and says which where it is given another
// (checked when the option is set: nothing connects before build).
TEST(MultiProcessOptions, CompressionTakesHalfPrecisionTypesOnly) {
  tp::process_environment env;
  tp::MultiProcess<tp::backend::Gloo> policy(env);
  EXPECT_NO_THROW(policy.compress_gradients(torch::kHalf));
  EXPECT_NO_THROW(policy.compress_gradients(torch::kFloat));
  EXPECT_EQ(tp_test::error_message_of<std::invalid_argument>([&] { policy.compress_gradients(torch::kInt); }),
            "tp::MultiProcess: compress_gradients takes torch::kHalf, torch::kBFloat16 or torch::kFloat (off), not Int");
  const auto bf16 = tp_test::error_message_of<std::invalid_argument>([&] { policy.compress_gradients(torch::kBFloat16); });
  if (TORCH_VERSION_MAJOR < 2) EXPECT_NE(bf16.find("LibTorch 1.x's Gloo cannot sum bf16"), std::string::npos) << bf16;
  else EXPECT_EQ(bf16, "(no error)");
}

// --- what every policy shares ------------------------------------------------------------------

// A tower without an optimizer trains with a user step on every one-process policy: the replicas
// hold no optimizer, so what goes through for_each_optimizer finds none.
TEST(Policies, TowerWithoutOptimizerTrainsWithAUserStep) {
  const auto check = [](auto distribution) {
    tp::Trainer trainer(feed(8), tp::model_desc([] { return torch::nn::Linear(4, 1); }), std::move(distribution),
                        tp::TrainOptions().steps_per_epoch(3).model_summary(false));
    int optimizers = 0;
    trainer.replicas().for_each_optimizer([&](auto&) { ++optimizers; });
    EXPECT_EQ(optimizers, 0);
    int steps = 0;
    trainer.train([&](auto& t) {
      (void)t.input().next_batch();
      ++steps;
    });
    EXPECT_EQ(steps, 3);
  };
  check(tp::SingleDevice());
  check(tp::Replicated<>::cpu(2));
  check(tp::ParameterServer<>::cpu(2));
  check(tp::Async::cpu(2));
}

// The update options: set whole or one at a time, checked where they are set, in the policy's name.
// With keyed randomness the step's dropout depends on (seed, step, micro-batch) only, not on
// the generator's state, which is put back after each micro-batch's forward: what draws outside
// the step draws as without the option. Without it, the generator decides the masks.
TEST(Policies, KeyedRandomnessKeysTheStepsDropoutByPlaceAndLeavesTheGeneratorAlone) {
  const auto trained = [](bool keyed, std::uint64_t generator_seed, torch::Tensor* drawn_after = nullptr) {
    auto policy = tp::SingleDevice().accumulate(2);
    if (keyed) policy.keyed_randomness(3);
    tp::Trainer trainer(tp::FeedInput(tp_test::mlp_flow()), tp_test::mlp_desc(), std::move(policy), tp::TrainOptions().steps_per_epoch(4).max_epoch(2));
    torch::manual_seed(generator_seed);
    trainer.train();
    if (drawn_after) *drawn_after = torch::rand({4});
    return tp_test::weights_of(trainer);
  };
  torch::Tensor drawn;
  const auto a = trained(true, 100, &drawn), b = trained(true, 200);
  tp_test::expect_bitwise_equal(a, b);
  torch::manual_seed(100);
  EXPECT_TRUE(torch::equal(drawn, torch::rand({4}))) << "the generator is not as the step found it";
  const auto c = trained(false, 100), d = trained(false, 200);
  EXPECT_FALSE(torch::equal(c[0], d[0])) << "without keys, dropout follows the generator";
  const auto message = tp_test::error_message_of<std::invalid_argument>([] { tp::Replicated<>::cpu(2).update(tp::UpdateOptions().keyed_randomness(1)); });
  EXPECT_NE(message.find("tp::Replicated: keyed_randomness keys the default generators"), std::string::npos) << message;
}

TEST(Policies, ShareTheUpdateOptions) {
  const auto options = tp::UpdateOptions().accumulate(3).bucket_bytes(1024).gradients(tp::GradientProcessing().record_norm());
  auto replicated = tp::Replicated<>::cpu(2).update(options);
  EXPECT_EQ(replicated.update().accumulate(), 3);
  EXPECT_EQ(replicated.update().bucket_bytes(), 1024u);
  EXPECT_TRUE(replicated.update().gradients().records_norm());
  EXPECT_EQ(tp::SingleDevice().accumulate(2).update().accumulate(), 2);
  const auto message = tp_test::error_message_of<std::invalid_argument>([] { tp::ParameterServer<>::cpu(2).bucket_bytes(0); });
  EXPECT_TRUE(message.starts_with("tp::ParameterServer: bucket_bytes must be > 0")) << message;
  EXPECT_THROW(tp::Async::cpu(1).update(tp::UpdateOptions().accumulate(0)), std::invalid_argument);
  EXPECT_THROW(tp::UpdateOptions().bucket_bytes(0).validate(), std::invalid_argument);
  auto kept = tp::Replicated<>::cpu(2).accumulate(3);
  EXPECT_THROW(kept.accumulate(0), std::invalid_argument);
  EXPECT_EQ(kept.update().accumulate(), 3);  // a rejected value leaves the policy as it was
}
