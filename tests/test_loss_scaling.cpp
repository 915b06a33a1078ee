// Dynamic loss scaling (tp::LossScaler, GradScaler's semantics): its skip/grow/shrink logic on
// CPU tensors, the path through every in-process distribution policy (scale before backward,
// unscale the reduced gradients before gradient processing, skip on inf/NaN), and its state in
// checkpoints. fp16 autocast needs CUDA; the scaler itself runs in any precision, so these
// tests run it in fp32 on the CPU.
#include <gtest/gtest.h>

#include "support.hpp"

using namespace tp_test;

TEST(LossScaler, GrowsAfterAnIntervalOfFiniteUpdatesAndBacksOffOnInfOrNan) {
  auto scaler = tp::LossScaler().init_scale(8).growth_interval(3);
  EXPECT_EQ(scaler.scale_loss(torch::tensor(1.5f)).item<float>(), 12.0f);

  std::vector<torch::Tensor> gradients{torch::tensor({16.0f, -8.0f}), torch::tensor({4.0f}), torch::Tensor()};
  EXPECT_TRUE(scaler.unscale(gradients));
  EXPECT_TRUE(torch::equal(gradients[0], torch::tensor({2.0f, -1.0f})));
  EXPECT_TRUE(torch::equal(gradients[1], torch::tensor({0.5f})));
  EXPECT_FALSE(gradients[2].defined()) << "an undefined gradient stays undefined";

  scaler.update(true);
  scaler.update(true);
  EXPECT_EQ(scaler.scale(), 8);
  EXPECT_EQ(scaler.growth_tracker(), 2);
  scaler.update(true);
  EXPECT_EQ(scaler.scale(), 16) << "grows after growth_interval finite updates in a row";
  EXPECT_EQ(scaler.growth_tracker(), 0);

  std::vector<torch::Tensor> overflowed{torch::tensor({1.0f, std::numeric_limits<float>::infinity()})};
  EXPECT_FALSE(scaler.unscale(overflowed));
  scaler.update(true);
  scaler.update(false);
  EXPECT_EQ(scaler.scale(), 8) << "backs off by half";
  EXPECT_EQ(scaler.growth_tracker(), 0) << "an overflow restarts the interval";
  std::vector<torch::Tensor> nan{torch::tensor({std::numeric_limits<float>::quiet_NaN()})};
  EXPECT_FALSE(scaler.unscale(nan));
  scaler.update(false);
  EXPECT_EQ(scaler.scale(), 4);
  EXPECT_EQ(scaler.skipped(), 2);

  auto huge = tp::LossScaler().init_scale(1e308).growth_interval(1);
  huge.update(true);
  EXPECT_EQ(huge.scale(), 1e308) << "a growth that would make the scale infinite is not taken";
}

TEST(LossScaler, BadOptionsSayWhatIsAllowed) {
  auto message = [](auto make) { return error_message_of<std::invalid_argument>(make); };
  EXPECT_EQ(message([] { tp::LossScaler().init_scale(0); }), "tp::LossScaler: init_scale must be a finite number > 0, got 0.000000");
  EXPECT_EQ(message([] { tp::LossScaler().growth_factor(1); }), "tp::LossScaler: growth_factor must be > 1, got 1.000000");
  EXPECT_EQ(message([] { tp::LossScaler().backoff_factor(1); }), "tp::LossScaler: backoff_factor must be in (0, 1), got 1.000000");
  EXPECT_EQ(message([] { tp::LossScaler().growth_interval(0); }), "tp::LossScaler: growth_interval must be >= 1 update, got 0");
  EXPECT_EQ(message([] { tp::LossScaler().init_scale(std::numeric_limits<double>::infinity()); }),
            "tp::LossScaler: init_scale must be a finite number > 0, got inf");
}

// GradScaler.step for a step of one's own: unscale, step only with finite gradients, update.
TEST(LossScaler, StepUnscalesAndSkipsAnOptimizerStepWithInfGradients) {
  auto w = torch::ones({2}).requires_grad_();
  torch::optim::SGD sgd({w}, 0.5);
  auto scaler = tp::LossScaler().init_scale(4);
  scaler.scale_loss((w * torch::tensor({1.0f, 2.0f})).sum()).backward();
  EXPECT_TRUE(scaler.step(sgd));
  EXPECT_TRUE(torch::equal(w.detach(), torch::tensor({0.5f, 0.0f}))) << w;
  sgd.zero_grad();
  scaler.scale_loss((w * std::numeric_limits<float>::infinity()).sum()).backward();
  EXPECT_FALSE(scaler.step(sgd));
  EXPECT_TRUE(torch::equal(w.detach(), torch::tensor({0.5f, 0.0f}))) << "the update with inf gradients is skipped";
  EXPECT_EQ(scaler.scale(), 2);
}

TEST(LossScaler, Fp16MixedBringsAScalerAndNeedsACudaTower) {
  auto desc = mlp_desc().precision(tp::precision::fp16_mixed);
  ASSERT_NE(desc.loss_scaler(), nullptr);
  EXPECT_EQ(desc.loss_scaler()->scale(), 65536) << "GradScaler's initial scale";
  EXPECT_EQ(mlp_desc().loss_scaler(), nullptr) << "fp32 has no loss scaling unless asked for";
  auto custom = mlp_desc().loss_scaling(tp::LossScaler().init_scale(128)).precision(tp::precision::fp16_mixed);
  EXPECT_EQ(custom.loss_scaler()->scale(), 128) << "fp16_mixed keeps a scaler set before it";
  auto t = tp::Trainer(tp::FeedInput(mlp_flow()), std::move(desc), tp::SingleDevice(), tp::TrainOptions().steps_per_epoch(1));
  try {
    t.train();
    FAIL() << "fp16-mixed trained on a CPU tower";
  } catch (const std::exception& e) {
    EXPECT_NE(std::string(e.what()).find("fp16-mixed precision needs a CUDA tower"), std::string::npos) << e.what();
  }
}

namespace {
// What a run with a scaler shows after each step.
struct ScaleSeen {
  struct step {
    double scale;
    std::int64_t skipped;
    bool weights_moved;
  };
  std::shared_ptr<std::vector<step>> steps = std::make_shared<std::vector<step>>();
  std::shared_ptr<std::vector<torch::Tensor>> before = std::make_shared<std::vector<torch::Tensor>>();
  void before_step(auto& t) { *before = weights_of(t); }
  void after_step(auto& t) {
    const auto after = weights_of(t);
    bool moved = false;
    for (std::size_t i = 0; i < after.size(); ++i) moved = moved || !torch::equal(after[i], (*before)[i]);
    const auto* s = t.tower().loss_scaler();
    steps->push_back({s->scale(), s->skipped(), moved});
  }
};

auto scaled_mlp(double init_scale, std::int64_t growth_interval) {
  return mlp_desc().loss_scaling(tp::LossScaler().init_scale(init_scale).growth_interval(growth_interval));
}

// The MLP without dropout: towers on threads draw dropout masks from the one CPU generator in
// an order the threads decide, so a multi-tower run with dropout is not reproducible.
auto plain_mlp() {
  return tp::model_desc([] {
           torch::manual_seed(21);
           return torch::nn::Sequential(torch::nn::Linear(6, 16), torch::nn::ReLU(), torch::nn::Linear(16, 1));
         })
      .tower_function([](const tp::TowerContext&, torch::nn::Sequential& m, const Batch& b) { return torch::mse_loss(m->forward(b.data), b.target); })
      .optimizer([](torch::nn::Sequential& m) { return torch::optim::SGD(m->parameters(), torch::optim::SGDOptions(0.02).momentum(0.9)); });
}

template <class Distribution>
std::vector<torch::Tensor> mlp_weights(bool scaled, Distribution distribution, std::shared_ptr<double> norm = {}) {
  auto options = tp::TrainOptions().steps_per_epoch(7).max_epoch(2);
  auto run = [&](auto desc) {
    auto t = tp::Trainer(tp::FeedInput(mlp_flow()), std::move(desc), distribution, options);
    t.train();
    if (norm) *norm = t.replicas().gradient_processing().last_norm();
    if (scaled) {
      EXPECT_EQ(t.tower().loss_scaler()->scale(), 1024.0 * 128) << "14 finite updates with growth_interval 2 double 1024 seven times";
      EXPECT_EQ(t.tower().loss_scaler()->skipped(), 0);
    }
    return weights_of(t);
  };
  return scaled ? run(plain_mlp().loss_scaling(tp::LossScaler().init_scale(1024).growth_interval(2))) : run(plain_mlp());
}
}  // namespace

// A power-of-two scale changes no bit: the gradients are unscaled exactly, before gradient
// processing (clipping sees the true norm), under every in-process policy.
TEST(LossScaling, APowerOfTwoScaleLeavesEveryPolicysTrainingBitForBit) {
  const auto clipping = tp::GradientProcessing().clip_global_norm(0.5).record_norm();
  auto scaled_norm = std::make_shared<double>(), plain_norm = std::make_shared<double>();
  expect_bitwise_equal(mlp_weights(true, tp::SingleDevice().gradients(clipping).accumulate(2), scaled_norm),
                       mlp_weights(false, tp::SingleDevice().gradients(clipping).accumulate(2), plain_norm));
  EXPECT_EQ(*scaled_norm, *plain_norm) << "clipping must see the unscaled gradients";
  EXPECT_GT(*plain_norm, 0.5) << "the clipping bound must bite for this to show anything";
  expect_bitwise_equal(mlp_weights(true, tp::Replicated<>::cpu(2).gradients(clipping)), mlp_weights(false, tp::Replicated<>::cpu(2).gradients(clipping)));
  expect_bitwise_equal(mlp_weights(true, tp::ParameterServer<>::cpu(2)), mlp_weights(false, tp::ParameterServer<>::cpu(2)));
  expect_bitwise_equal(mlp_weights(true, tp::Async::cpu(1).accumulate(2)), mlp_weights(false, tp::Async::cpu(1).accumulate(2)));
}

// A scale so large that the scaled gradients overflow: each such step is skipped (the weights
// do not move, every tower stays identical) and halves the scale, until the gradients fit and
// training goes on; a finite step never shrinks the scale.
TEST(LossScaling, OverflowSkipsTheUpdateAndBacksOffUntilTheGradientsFit) {
  ScaleSeen seen;
  auto t = tp::Trainer(tp::FeedInput(mlp_flow()), scaled_mlp(std::ldexp(1.0, 127), 1000), tp::Replicated<>::cpu(2),
                       tp::TrainOptions().steps_per_epoch(7).max_epoch(3), seen);
  t.train();
  ASSERT_EQ(seen.steps->size(), 21u);
  double scale = std::ldexp(1.0, 127);
  std::int64_t skipped = 0;
  for (const auto& step : *seen.steps) {
    const bool skip = step.skipped > skipped;
    EXPECT_EQ(step.weights_moved, !skip);
    EXPECT_EQ(step.scale, skip ? scale / 2 : scale);
    scale = step.scale;
    skipped = step.skipped;
  }
  EXPECT_GE(skipped, 1) << "a scale of 2^127 must overflow the first gradients";
  EXPECT_LT(skipped, 21) << "training must go on once the scale has come down";
  EXPECT_FALSE(seen.steps->front().weights_moved);
  EXPECT_TRUE(seen.steps->back().weights_moved);
  EXPECT_TRUE(t.replicas().identical());
}

// The scale and its interval count are in checkpoints: a resumed run scales as the
// uninterrupted one would and ends with its bits.
TEST(LossScaling, TheScaleIsInCheckpointsAndResumesExactly) {
  TempDir dir("loss_scale_resume");
  std::ostringstream log;
  auto run = [&](int epochs, auto... saver) {
    auto t = tp::Trainer(tp::FeedInput(mlp_flow()), scaled_mlp(std::ldexp(1.0, 127), 3), tp::SingleDevice(),
                         tp::TrainOptions().steps_per_epoch(7).max_epoch(epochs), saver...);
    t.train();
    return std::pair{weights_of(t), *t.tower().loss_scaler()};
  };
  const auto [first, first_scaler] = run(1, tp::ModelSaver(dir.path).log_to(log));
  EXPECT_GT(first_scaler.skipped(), 0);
  const auto [resumed, resumed_scaler] = run(3, tp::ModelSaver(dir.path).log_to(log));
  const auto [straight, straight_scaler] = run(3);
  expect_bitwise_equal(resumed, straight);
  EXPECT_EQ(resumed_scaler.scale(), straight_scaler.scale());
  EXPECT_EQ(resumed_scaler.growth_tracker(), straight_scaler.growth_tracker());

  // A corrupt scale is a checkpoint error, not a silent restart.
  tp::state_tree bad;
  bad.put("scale", -1.0);
  bad.put("growth_tracker", std::int64_t{0});
  tp::LossScaler scaler;
  EXPECT_THROW(scaler.load(bad), tp::checkpoint_error);
  EXPECT_EQ(scaler.scale(), 65536);
}
