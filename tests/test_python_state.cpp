// State across the Python border: tp's checkpoints open in Python as Lightning's do, Python's
// state_dict and optimizer files load into tp, and training goes on across the border in both
// directions. Python is Debian's python3-torch (tests/python/state_peer.py).
#include <cstdint>
#include <cstdlib>
#include <fstream>
#include <memory>
#include <string>

#include <gtest/gtest.h>
#include <torch/torch.h>

#include "support.hpp"

namespace fs = std::filesystem;
using namespace tp_test;

namespace {

int peer(const std::string& arguments) {
  const std::string command = std::string(TP_PYTHON) + " " + tp_test::source_dir() + "/tests/python/state_peer.py " + arguments;
  return std::system(command.c_str());
}

std::unique_ptr<torch::optim::Optimizer> optimizer_for(const std::string& name, torch::nn::Linear& model) {
  if (name == "sgd") return std::make_unique<torch::optim::SGD>(model->parameters(), torch::optim::SGDOptions(0.05).momentum(0.9));
  if (name == "adam") return std::make_unique<torch::optim::Adam>(model->parameters(), torch::optim::AdamOptions(0.01));
  if (name == "adamw") return std::make_unique<torch::optim::AdamW>(model->parameters(), torch::optim::AdamWOptions(0.01).weight_decay(0.01));
  return std::make_unique<tp::optim::RAdam>(model->parameters(), tp::optim::RAdamOptions(0.01));
}

// x [32, 4], y [32, 3], and a Linear(4, 3)'s first weight and bias.
struct Problem {
  torch::Tensor x, y, w0, b0;
  Problem() {
    torch::manual_seed(5);
    x = torch::randn({32, 4}), y = torch::randn({32, 3}), w0 = torch::randn({3, 4}) * 0.5, b0 = torch::randn({3}) * 0.1;
  }
  void save(const fs::path& path) const {
    c10::Dict<std::string, torch::Tensor> all;
    all.insert("x", x), all.insert("y", y), all.insert("w0", w0), all.insert("b0", b0);
    tp::detail::write_torch_save(path, c10::impl::toGenericDict(all));
  }
  torch::nn::Linear fresh() const {
    torch::nn::Linear model(4, 3);
    torch::NoGradGuard no_grad;
    model->weight.copy_(w0), model->bias.copy_(b0);
    return model;
  }
  // A trainer with the optimizer `name` for `steps` steps: step s trains on rows
  // [8 (s % 4), 8 (s % 4) + 8), as state_peer.py does.
  auto trainer(const std::string& name, int steps) const {
    return tp::Trainer(tp::FeedInput(tp::data::examples(x, y) | tp::data::batch(8)),
                       tp::model_desc([this] { return fresh(); })
                           .tower_function([](const tp::TowerContext&, torch::nn::Linear& m, const Batch& b) {
                             return torch::mse_loss(m->forward(b.data), b.target);
                           })
                           .optimizer([name](torch::nn::Linear& m) { return tp::optim::AnyOptimizer(optimizer_for(name, m)); }),
                       tp::SingleDevice(), tp::TrainOptions().steps_per_epoch(4).max_epoch(steps / 4).model_summary(false));
  }
};

double largest_difference(const torch::nn::Linear& model, const tp::detail::py_value& state) {
  return std::max((model->weight - state.find("weight")->tensor()).abs().max().item<double>(),
                  (model->bias - state.find("bias")->tensor()).abs().max().item<double>());
}

constexpr int k = 20, m = 20;
// Python's and LibTorch's optimizers run the same arithmetic in a slightly different order
// (Adam's denominator, for one), which changes the last bit of a float32 now and then; over 20
// steps on weights of size 1 that stays far below 1e-5, while losing any part of the optimizer's
// state (a momentum, a step count) moves the weights by more than 1e-3 (checked below).
constexpr double tolerance = 1e-5;

}  // namespace

// Python trains k steps and saves a Lightning-shaped checkpoint; a tp trainer loads its weights
// and its optimizer state and trains m more: the weights are Python's after k + m steps.
TEST(PythonState, TrainingGoesOnInTpFromPythonsCheckpoint) {
  for (const std::string name : {"sgd", "adam", "adamw", "radam"}) {
    SCOPED_TRACE(name);
    TempDir dir("py_to_tp_" + name);
    const Problem problem;
    problem.save(dir.path / "data.pt");
    ASSERT_EQ(peer("train " + dir.path.string() + " " + name + " " + std::to_string(k) + " " + std::to_string(m)), 0)
        << "Python's torch comes from Debian's python3-torch (scripts/setup.sh installs it)";
    auto trainer = problem.trainer(name, m);
    const auto report = tp::load_state_dict(*trainer.model(), dir.path / "python_k.pt");
    EXPECT_TRUE(report.missing_keys.empty() && report.unexpected_keys.empty());
    tp::load_optimizer_state(trainer.replicas().optimizer().get(), dir.path / "python_k.pt");
    trainer.train();
    const auto python = tp::detail::read_torch_save(dir.path / "python_final.pt");
    const double difference = largest_difference(trainer.model(), python);
    std::printf("%s: Python %d steps, tp::Trainer %d more: largest difference from Python's %d steps %.3g\n", name.c_str(), k, m, k + m,
                difference);
    EXPECT_LT(difference, tolerance);

    // Without the optimizer's state the same weights go elsewhere: the test sees a lost state.
    auto without = problem.trainer(name, m);
    tp::load_state_dict(*without.model(), dir.path / "python_k.pt");
    without.train();
    EXPECT_GT(largest_difference(without.model(), python), 1e-3);
  }
}

// A tp trainer trains k steps and checkpoints; Python loads the checkpoint's state_dict (strict)
// and optimizer_states[0] and trains m more: the weights are those of a tp trainer's k + m steps.
TEST(PythonState, TrainingGoesOnInPythonFromTpsCheckpoint) {
  for (const std::string name : {"sgd", "adam", "adamw", "radam"}) {
    SCOPED_TRACE(name);
    TempDir dir("tp_to_py_" + name);
    const Problem problem;
    problem.save(dir.path / "data.pt");
    auto first = problem.trainer(name, k);
    first.train();
    tp::save_checkpoint(first, dir.path / "tp_k.ckpt");
    tp::save_optimizer_state(first.replicas().optimizer().get(), dir.path / "tp_k_optimizer.pt");
    tp::save_state_dict(*first.model(), dir.path / "tp_k_model.pt");
    ASSERT_EQ(peer("resume " + dir.path.string() + " " + name + " " + std::to_string(k) + " " + std::to_string(m)), 0);
    auto whole = problem.trainer(name, k + m);
    whole.train();
    const double difference = largest_difference(whole.model(), tp::detail::read_torch_save(dir.path / "python_after_tp.pt"));
    std::printf("%s: tp::Trainer %d steps, Python %d more: largest difference from tp's %d steps %.3g\n", name.c_str(), k, m, k + m, difference);
    EXPECT_LT(difference, tolerance);
  }
}

// A trainer's checkpoint is what torch.load returns for a Lightning checkpoint: Python builds
// the same module, loads its state_dict with strict=True and its SGD state, and computes what
// tp computes.
TEST(PythonState, PythonOpensATrainersCheckpoint) {
  TempDir dir("py_opens_ckpt");
  auto trainer = mlp_trainer(2, tp::EarlyStopping("val_loss", 3));
  trainer.train();
  const auto path = dir.path / tp::checkpoint_file_name(trainer.global_step());
  tp::save_checkpoint(trainer, path);
  torch::manual_seed(3);
  const auto x = torch::randn({5, 6});
  tp::detail::write_torch_save(dir.path / "x.pt", x);
  ASSERT_EQ(peer("checkpoint " + dir.path.string() + " " + path.string()), 0);
  const auto python = tp::detail::read_torch_save(dir.path / "python_view.pt");
  trainer.model()->eval();
  const auto ours = trainer.model()->forward(x);
  EXPECT_TRUE(torch::equal(ours, python.find("forward")->tensor())) << ours << python.find("forward")->tensor();
  EXPECT_EQ(python.find("global_step")->as_int(), 14);
  EXPECT_EQ(python.find("epoch")->as_int(), 2);
  EXPECT_DOUBLE_EQ(python.find("lr")->as_double(), 0.02);

  // The checkpoint Python changed (a learning rate) and saved again: the run goes on with it.
  auto resumed = mlp_trainer(3, tp::EarlyStopping("val_loss", 3));
  tp::load_checkpoint(resumed, dir.path / "edited.ckpt");
  EXPECT_EQ(resumed.global_step(), 14);
  EXPECT_TRUE(torch::equal(resumed.model()->a->weight, trainer.model()->a->weight));
  EXPECT_DOUBLE_EQ(resumed.replicas().optimizer().param_groups()[0].options().get_lr(), 0.005);
  resumed.train();
  EXPECT_EQ(resumed.global_step(), 21);
}

// What tp refuses, each with a message that names the file and the problem, loading nothing.
TEST(PythonState, RefusesWhatDoesNotFitAndLoadsNothing) {
  TempDir dir("py_bad");
  ASSERT_EQ(peer("bad " + dir.path.string()), 0);
  torch::manual_seed(1);
  torch::nn::Linear model(4, 3);
  const auto before = model->weight.clone();
  auto expect_error = [&](auto&& load, const std::string& file, std::initializer_list<std::string> words) {
    try {
      load();
      ADD_FAILURE() << "no error for " << file;
    } catch (const tp::checkpoint_error& e) {
      const std::string what = e.what();
      EXPECT_NE(what.find(file), std::string::npos) << what;
      for (const auto& w : words) EXPECT_NE(what.find(w), std::string::npos) << "missing '" << w << "' in: " << what;
    }
    EXPECT_TRUE(torch::equal(model->weight, before)) << file << ": the model changed";
  };
  const auto other = (dir.path / "other_model.pt").string();
  expect_error([&] { tp::load_state_dict(*model, other); }, other, {"does not fit this model", "weight is [3, 5] in the file but [3, 4] here"});
  {
    torch::nn::Sequential two(torch::nn::Linear(4, 3));
    try {
      tp::load_state_dict(*two, other);
      ADD_FAILURE() << "no error";
    } catch (const tp::checkpoint_error& e) {
      EXPECT_NE(std::string(e.what()).find("missing keys: 0.weight, 0.bias"), std::string::npos) << e.what();
      EXPECT_NE(std::string(e.what()).find("unexpected keys: bias, weight"), std::string::npos) << e.what();
    }
    // Not strict: the keys that do not fit are reported, and what fits is loaded (here nothing).
    const auto report = tp::load_state_dict(*two, other, tp::StateDictOptions().strict(false).prefix("x."));
    EXPECT_EQ(report.missing_keys, (std::vector<std::string>{"0.weight", "0.bias"}));
    EXPECT_TRUE(report.unexpected_keys.empty());
  }
  const auto plain = (dir.path / "plain.pkl").string();
  expect_error([&] { tp::load_state_dict(*model, plain); }, plain, {"not a torch.save file"});
  const auto legacy = (dir.path / "legacy.pt").string();
  expect_error([&] { tp::load_state_dict(*model, legacy); }, legacy, {"not a torch.save file"});
  // A folder where a file is named (a nanoGPT out_dir's ckpt.pt made a folder): named, not an
  // allocation failure.
  fs::create_directories(dir.path / "folder.pt");
  expect_error([&] { tp::load_state_dict(*model, dir.path / "folder.pt"); }, (dir.path / "folder.pt").string(), {"is a folder, not a torch.save file"});
  const auto list = (dir.path / "a_list.pt").string();
  expect_error([&] { tp::load_state_dict(*model, list); }, list, {"not a state_dict"});
  // A state_dict cut short.
  tp::save_state_dict(*model, dir.path / "mine.pt");
  const auto whole = tp_test::read_all(dir.path / "mine.pt");
  std::ofstream(dir.path / "cut.pt", std::ios::binary) << whole.substr(0, whole.size() * 2 / 3);
  const auto cut = (dir.path / "cut.pt").string();
  expect_error([&] { tp::load_state_dict(*model, cut); }, cut, {});
  // SGD's state into Adam: refused, and Adam keeps its own.
  torch::optim::Adam adam(model->parameters(), torch::optim::AdamOptions(0.01));
  model(torch::ones({2, 4})).sum().backward();
  adam.step();
  const auto moment = static_cast<torch::optim::AdamParamState&>(*adam.state().begin()->second).exp_avg().clone();
  const auto sgd = (dir.path / "sgd_state.pt").string();
  try {
    tp::load_optimizer_state(adam, sgd);
    ADD_FAILURE() << "no error";
  } catch (const tp::checkpoint_error& e) {
    EXPECT_NE(std::string(e.what()).find(sgd), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find("another optimizer's state"), std::string::npos) << e.what();
  }
  EXPECT_EQ(adam.state().size(), 2u);
  EXPECT_TRUE(torch::equal(static_cast<torch::optim::AdamParamState&>(*adam.state().begin()->second).exp_avg(), moment));
}
