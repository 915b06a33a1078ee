// Trains a Fashion-MNIST classifier written in Python and scripted with TorchScript, then writes
// the trained model as a TorchScript file that Python and C++ load as it is.
//
//   python3 examples/scripted_fashion_mnist.py model.pt
//   train_scripted model.pt [--epochs N] [--steps-per-epoch N] [--out trained.pt] [--logdir DIR]
//                           [--min-accuracy A]
//   python3 examples/scripted_fashion_mnist.py --score trained.pt
//
// MODEL.pt takes [N, 1, 28, 28] images, normalised as the fashion_mnist example does, and gives
// [N, 10] logits. Training is the fashion_mnist example's (QueueInput, Adam, test error after
// every epoch, checkpoints in DIR and resume); --out is written when training ends.
#include <iostream>
#include <limits>
#include <string>

#include <CLI/CLI.hpp>
#include <tp/scripted_module.hpp>
#include <tp/tp.hpp>
#include <tp/data.hpp>
#include <tp/monitors.hpp>
#include <torch/torch.h>

#include "fashion_mnist_net.hpp"

int main(int argc, char** argv) try {
  std::string model_path, out = "trained.pt", logdir = "train_log/train_scripted";
  int epochs = 3;
  std::int64_t steps_per_epoch = 0, batch = 64;
  double min_accuracy = 0;
  CLI::App app("Trains a scripted Fashion-MNIST classifier and writes the trained TorchScript file.");
  app.add_option("model", model_path, "the TorchScript file to train (torch.jit.script(model).save(...))")->required();
  app.add_option("--epochs", epochs, "epochs to train")->check(CLI::PositiveNumber);
  app.add_option("--steps-per-epoch", steps_per_epoch, "steps in an epoch (default: one pass over the training set)")->check(CLI::NonNegativeNumber);
  app.add_option("--out", out, "the trained TorchScript file to write");
  app.add_option("--logdir", logdir, "where stats.json and checkpoints go");
  app.add_option("--min-accuracy", min_accuracy, "exit with status 1 if the final test accuracy is below this");
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    app.exit(e);
    return e.get_exit_code() == 0 ? 0 : 2;
  }

  torch::manual_seed(0);
  const tp::ScriptedModule check(model_path);  // a bad file fails here, before any data is read
  const auto train_set = tp::data::fashion_mnist(tp::data::split::train);
  const auto test_set = tp::data::fashion_mnist(tp::data::split::test);
  const auto steps = steps_per_epoch > 0 ? steps_per_epoch : train_set.images.size(0) / batch;
  const auto dir = tp::log_dir(logdir, tp::if_exists::keep).string();

  using Batch = torch::data::Example<>;
  auto desc = tp::model_desc([&] { return tp::ScriptedModule(model_path); })
                  .tower_function([](const tp::TowerContext&, tp::ScriptedModule& m, const Batch& b) {
                    return torch::nn::functional::cross_entropy(m->forward(b.data), b.target);
                  })
                  .optimizer([](tp::ScriptedModule& m) { return torch::optim::Adam(m->parameters(), torch::optim::AdamOptions(1e-3)); });
  auto outputs = [](tp::ScriptedModule& m, const Batch& b) {
    auto logits = m->forward(b.data);
    return tp::outputs{{"cost", torch::nn::functional::cross_entropy(logits, b.target)}, {"logits", logits}, {"label", b.target}};
  };
  tp::Trainer trainer(
      tp::QueueInput(tp::data::examples(fashion_mnist::normalize(train_set.images), train_set.labels) | tp::data::shuffle(42) | tp::data::batch(batch)),
      std::move(desc), tp::SingleDevice(), tp::TrainOptions().steps_per_epoch(steps).max_epoch(epochs), tp::ProgressBar(),
      tp::InferenceRunner(tp::data::examples(fashion_mnist::normalize(test_set.images), test_set.labels) | tp::data::batch(1000), outputs,
                          tp::ClassificationError("logits", "label", "test_error")),
      tp::ScalarPrinter(), tp::JSONWriter(dir), tp::ModelSaver(dir));
  const auto outcome = trainer.train();
  if (outcome.interrupted()) {
    std::cout << "interrupted at global step " << outcome.global_step << "; run the same command to resume\n";
    return outcome.exit_status();
  }
  trainer.model()->save(out);
  const auto history = tp::JSONWriter::read(trainer.callback<tp::JSONWriter>().path());
  double accuracy = std::numeric_limits<double>::quiet_NaN();
  for (auto it = history.rbegin(); it != history.rend() && std::isnan(accuracy); ++it)
    if (const auto found = it->scalars.find("test_error"); found != it->scalars.end()) accuracy = 1.0 - found->second;
  std::cout << "final test accuracy: " << accuracy << "\nwrote " << out << "\n";
  return accuracy >= min_accuracy ? 0 : 1;
} catch (const std::exception& e) {
  std::cerr << "train_scripted: " << e.what() << "\n";
  return 1;
}
