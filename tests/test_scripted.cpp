// Models from Python: a TorchScript file scripted by Python (Debian's python3-torch) trains in
// tp as it trains in Python, to 1e-5, dropout and BatchNorm included; tp's export (from the
// trainer, or from a checkpoint with tp-export) runs in Python with tp's outputs; every
// distribution policy, checkpoints and exact resume, and bf16-mixed work with it.
#include <gtest/gtest.h>

#include <cstdlib>
#include <fstream>

#include <tp/scripted_module.hpp>

#include "support.hpp"

using namespace tp_test;

namespace {

void python(const std::string& command, const std::filesystem::path& dir) {
  const std::string line = std::string(TP_PYTHON) + " " + tp_test::source_dir() + "/tests/scripted/reference_scripted.py " + command + " " + dir.string();
  ASSERT_EQ(std::system(line.c_str()), 0) << line << " failed (Python's torch is Debian's python3-torch; scripts/setup.sh installs it)";
}

auto scripted_desc(std::filesystem::path model) {
  return tp::model_desc([model] { return tp::ScriptedModule(model.string()); })
      .tower_function([](const tp::TowerContext&, tp::ScriptedModule& m, const Batch& b) {
        return torch::nn::functional::cross_entropy(m->forward(b.data), b.target);
      })
      .optimizer([](tp::ScriptedModule& m) { return torch::optim::SGD(m->parameters(), torch::optim::SGDOptions(0.1).momentum(0.9)); });
}

// The data Python wrote, in batches of 8, in order.
auto python_flow(const std::filesystem::path& dir) {
  return tp::data::examples(read_raw(dir / "x", torch::kFloat, {40, 1, 8, 8}), read_raw(dir / "y", torch::kLong, {40})) | tp::data::batch(8);
}

}  // namespace

TEST(Scripted, TrainsAsPythonTrainsTheSameFileAndItsExportRunsInPython) {
  TempDir dir("scripted");
  python("make", dir.path);
  auto t = tp::Trainer(tp::FeedInput(python_flow(dir.path)), scripted_desc(dir.path / "model.pt"), tp::SingleDevice(),
                       tp::TrainOptions().steps_per_epoch(5).max_epoch(2));
  torch::manual_seed(1);  // Python seeds 1 before its first step: the same dropout masks
  t.train();
  std::size_t compared = 0;
  double worst = 0;
  auto compare = [&](const std::string& name, const torch::Tensor& ours) {
    const auto theirs = read_raw(dir.path / "python" / name, ours.scalar_type(), ours.sizes().vec());
    worst = std::max(worst, (ours.to(torch::kDouble) - theirs.to(torch::kDouble)).abs().max().item<double>());
    ++compared;
  };
  for (const auto& p : t.model()->named_parameters()) compare(p.key(), p.value().detach());
  for (const auto& b : t.model()->named_buffers()) compare(b.key(), b.value());
  std::printf("largest difference from Python's training over 10 steps: %.3g\n", worst);
  EXPECT_EQ(compared, 9u) << "conv, bn and fc weights and biases, and bn's three buffers, under Python's names";
  EXPECT_LT(worst, 1e-5);
  EXPECT_EQ(t.model()->named_buffers()["bn.num_batches_tracked"].item<std::int64_t>(), 10);

  // Exported from the trainer, it gives in Python what tp's predictor gives.
  t.model()->save((dir.path / "exported.pt").string());
  auto predict = tp::make_predictor(t);
  write_raw(dir.path / "tp_outputs", predict(read_raw(dir.path / "x", torch::kFloat, {40, 1, 8, 8})));
  python("check", dir.path);
}

// Every tower loads its own copy; checkpoints resume exactly; tp-export writes a checkpoint's
// weights into the TorchScript file; bf16-mixed runs TorchScript's ops under autocast.
TEST(Scripted, WorksWithEveryPolicyCheckpointsAndBf16) {
  TempDir dir("scripted_policies");
  python("make", dir.path);
  const auto model = dir.path / "model.pt";
  auto options = tp::TrainOptions().steps_per_epoch(5).max_epoch(2);
  auto replicated = tp::Trainer(tp::FeedInput(python_flow(dir.path)), scripted_desc(model), tp::Replicated<>::cpu(2), options);
  replicated.train();
  // The towers' weights agree (their BatchNorm statistics do not: each tower sees its own batches).
  auto& towers = replicated.replicas();
  ASSERT_NE(&*towers.model(0), &*towers.model(1));
  const auto a = towers.model(0)->parameters(), b = towers.model(1)->parameters();
  for (std::size_t i = 0; i < a.size(); ++i) EXPECT_TRUE(torch::equal(a[i], b[i])) << "parameter " << i;
  EXPECT_FALSE(torch::equal(towers.model(0)->named_buffers()["bn.running_mean"], towers.model(1)->named_buffers()["bn.running_mean"]));
  auto server = tp::Trainer(tp::FeedInput(python_flow(dir.path)), scripted_desc(model), tp::ParameterServer<>::cpu(2), options);
  server.train();
  auto async = tp::Trainer(tp::FeedInput(python_flow(dir.path)), scripted_desc(model), tp::Async::cpu(2), options);
  async.train();
  EXPECT_EQ(async.replicas().updates(), 20) << "2 towers x 10 steps, each update applied to the shared weights";
  EXPECT_FALSE(torch::equal(async.model()->named_parameters()["fc.weight"], tp::ScriptedModule(model.string())->named_parameters()["fc.weight"]));

  std::ostringstream log;
  const auto saved = dir.path / "run";
  auto run = [&](int epochs, auto... saver) {
    auto t = tp::Trainer(tp::FeedInput(python_flow(dir.path)), scripted_desc(model), tp::SingleDevice(),
                         tp::TrainOptions().steps_per_epoch(5).max_epoch(epochs), saver...);
    t.train();
    return weights_of(t);
  };
  torch::manual_seed(3);
  run(1, tp::ModelSaver(saved).log_to(log));
  const auto resumed = run(2, tp::ModelSaver(saved).log_to(log));
  torch::manual_seed(3);
  expect_bitwise_equal(resumed, run(2));

  // tp-export: the newest checkpoint's weights in the TorchScript file.
  const auto checkpoint = tp::list_checkpoints(saved).back().second;
  const std::string export_line = std::string(TP_EXPORT) + " " + checkpoint.string() + " --scripted-model " + model.string() + " -o " +
                                  (dir.path / "exported.pt").string();
  ASSERT_EQ(std::system(export_line.c_str()), 0) << export_line;
  tp::ScriptedModule from_checkpoint(model.string());
  tp::load_model(checkpoint, *from_checkpoint);
  from_checkpoint->eval();
  const auto x = read_raw(dir.path / "x", torch::kFloat, {40, 1, 8, 8});
  write_raw(dir.path / "tp_outputs", from_checkpoint->forward(x).detach());
  python("check", dir.path);

  auto bf16 = tp::Trainer(tp::FeedInput(python_flow(dir.path)), scripted_desc(model).precision(tp::precision::bf16_mixed), tp::SingleDevice(),
                          options);
  bf16.train();
  EXPECT_TRUE(std::isfinite(bf16.last_cost().item<double>()));
  EXPECT_EQ(bf16.model()->parameters()[0].scalar_type(), torch::kFloat) << "the weights stay fp32";

  EXPECT_THROW(tp::ScriptedModule((dir.path / "missing.pt").string()), std::invalid_argument);
}
