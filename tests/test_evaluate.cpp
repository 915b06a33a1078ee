// Evaluating and serving without a trainer: tp::evaluate gives the scalars InferenceRunner put
// during training, from the trained model or from its checkpoint; tp::InferenceModel loads a
// checkpoint, pre-processes, warms up and predicts in batches.
#include <gtest/gtest.h>

#include <map>

#include "support.hpp"

using namespace tp_test;

namespace {

// The validation scalars a run put, by name, the last value of each.
struct LastScalars {
  std::shared_ptr<std::map<std::string, double>> values = std::make_shared<std::map<std::string, double>>();
  void on_scalar(auto&, std::string_view name, double value) { (*values)[std::string(name)] = value; }
};

auto validation_flow() {
  torch::manual_seed(31);
  auto x = torch::randn({30, 6});
  return tp::data::examples(x, x.sum(1, true)) | tp::data::batch(8);  // the last batch has 6
}
auto validation_outputs() {
  return [](MlpHolder& m, const Batch& b) {
    auto out = m->forward(b.data);
    return tp::outputs{{"cost", torch::mse_loss(out, b.target)}, {"sign_logits", torch::cat({-out, out}, 1)}, {"sign", (b.target > 0).squeeze(1).to(torch::kLong)}};
  };
}
auto inferencers() {
  return std::tuple{tp::ScalarStats({"cost"}, "val_"), tp::ClassificationError("sign_logits", "sign", "val_sign_error")};
}

}  // namespace

// The scalars of a checkpoint's model, evaluated alone, are those the run put at that epoch
// (the same batches, the same order of operations: equal to the bit).
TEST(Evaluate, ACheckpointsModelGivesTheScalarsTheTrainingRunPut) {
  TempDir dir("evaluate");
  std::ostringstream log;
  LastScalars seen;
  auto trainer = mlp_trainer(2, std::apply([](auto... inf) { return tp::InferenceRunner(validation_flow(), validation_outputs(), inf...); },
                                           inferencers()),
                             seen, tp::ModelSaver(dir.path).log_to(log));
  trainer.train();
  ASSERT_EQ(seen.values->count("val_cost"), 1u);

  MlpHolder restored;
  const auto latest = tp::list_checkpoints(dir.path).back().second;
  tp::load_model(latest, *restored);
  auto scalars = std::apply([&](auto... inf) { return tp::evaluate(restored, validation_flow(), validation_outputs(), inf...); }, inferencers());
  EXPECT_EQ(scalars.at("val_cost"), seen.values->at("val_cost"));
  EXPECT_EQ(scalars.at("val_sign_error"), seen.values->at("val_sign_error"));
  EXPECT_TRUE(restored->is_training()) << "evaluate puts the model's mode back";

  // The trained model itself, and in bf16-mixed within bf16's precision.
  auto direct = std::apply([&](auto... inf) { return tp::evaluate(trainer.model(), validation_flow(), validation_outputs(), inf...); }, inferencers());
  EXPECT_EQ(direct.at("val_cost"), seen.values->at("val_cost"));
  auto bf16 = std::apply([&](auto... inf) {
    return tp::evaluate(tp::EvaluateOptions().precision(tp::precision::bf16_mixed), restored, validation_flow(), validation_outputs(), inf...);
  }, inferencers());
  EXPECT_NEAR(bf16.at("val_cost"), seen.values->at("val_cost"), 0.05 * seen.values->at("val_cost"));
}

TEST(Evaluate, AnEmptyDataflowIsAClearError) {
  MlpHolder model;
  auto empty = tp::data::examples(torch::zeros({0, 6}), torch::zeros({0, 1})) | tp::data::batch(8);
  try {
    tp::evaluate(model, empty, validation_outputs(), tp::ScalarStats({"cost"}));
    FAIL();
  } catch (const std::runtime_error& e) {
    EXPECT_STREQ(e.what(), "tp::evaluate: the dataflow gave no batch");
  }
}

TEST(InferenceModel, LoadsACheckpointPreprocessesWarmsUpAndPredictsInBatches) {
  TempDir dir("inference_model");
  std::ostringstream log;
  auto trainer = mlp_trainer(1, tp::ModelSaver(dir.path).log_to(log));
  trainer.train();
  const auto checkpoint = tp::list_checkpoints(dir.path).back().second;

  auto served = tp::InferenceModel<MlpHolder>::from_checkpoint([] { return MlpHolder(); }, checkpoint)
                    .preprocess([](torch::Tensor x) { return x * 2; })
                    .warm_up(torch::zeros({4, 6}));
  torch::manual_seed(5);
  const auto inputs = torch::randn({10, 6});
  auto& trained = trainer.model();
  (*trained).eval();
  const auto expected = trained->forward(inputs * 2);
  const auto predicted = served.predict(inputs, 3);  // batches of 3, 3, 3 and 1
  EXPECT_FALSE(predicted.requires_grad());
  // Within roundings: some BLAS kernels round a row's product differently with the number of
  // rows (OpenBLAS's generic Prescott kernels, which it falls back to on CPUs it does not know).
  EXPECT_TRUE(torch::allclose(predicted, expected, 1e-5, 1e-6)) << "eval mode (no dropout), the trained weights, the pre-processing";
  EXPECT_TRUE(torch::equal(served(inputs), expected));  // the same rows at once: the same products

  try {
    served(torch::zeros({2, 5}));
    FAIL();
  } catch (const std::invalid_argument& e) {
    EXPECT_NE(std::string(e.what()).find("tp::InferenceModel: the model failed on an input of shape [2, 5]"), std::string::npos) << e.what();
  }
  EXPECT_THROW(served.predict(inputs, 0), std::invalid_argument);
  EXPECT_THROW(tp::InferenceModel<torch::nn::Linear>::from_checkpoint([] { return torch::nn::Linear(6, 2); }, checkpoint), tp::checkpoint_error);
}
