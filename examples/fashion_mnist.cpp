// Trains a small CNN on Fashion-MNIST and prints the test accuracy after every epoch.
//
//   fashion_mnist [--epochs N] [--steps-per-epoch N] [--batch N] [--input queue|feed]
//                 [--towers N] [--logdir DIR] [--min-accuracy A]
//   tp-run -n 2 fashion_mnist ...        one process per rank, Gloo all-reduce (MultiProcess)
//
// --input queue (the default) prepares batches in a background thread while the step runs
// (QueueInput); feed prepares them in the training thread (FeedInput). --towers N > 1 trains N
// CPU towers (Replicated<InProcess>), each with its own batch of --batch: the global batch is N
// times larger, and an epoch has N times fewer steps. Scalars go to the console, to
// DIR/stats.json and to TensorBoard event files in DIR (default: train_log/fashion_mnist).
// Checkpoints go to DIR every epoch (the newest 10 kept, and min-test_error.ckpt, the best), and
// running the same command again resumes from the newest one: with more --epochs it goes on,
// to the bit as if it had never stopped. TP_LOGDIR_ACTION=backup|remove|new_dir starts afresh.
// With --min-accuracy it exits non-zero if the final test accuracy is below A (the examples run
// as tests that way).
#include <cstdlib>
#include <iostream>
#include <limits>
#include <stdexcept>
#include <string>

#include <tp/tp.hpp>
#include <torch/torch.h>

#include "fashion_mnist_net.hpp"

namespace {

using fashion_mnist::Net;
using fashion_mnist::normalize;


std::string option(int argc, char** argv, const std::string& name, const std::string& fallback) {
  for (int i = 1; i + 1 < argc; ++i)
    if (argv[i] == name) return argv[i + 1];
  return fallback;
}

std::int64_t flag(int argc, char** argv, const std::string& name, std::int64_t fallback) {
  return std::stoll(option(argc, argv, name, std::to_string(fallback)));
}

// Trains with any input and distribution policy; returns the final test accuracy.
template <class Input, class Distribution>
double train(Input input, Distribution distribution, const tp::data::FashionMnist& test, int epochs, std::int64_t steps,
             const std::string& logdir, const tp::process_environment& env) {
  auto desc = tp::model_desc([] { return Net(); })
                  .tower_function([](const tp::TowerContext&, Net& net, const torch::data::Example<>& b) {
                    return torch::nn::functional::cross_entropy(net->forward(b.data), b.target);
                  })
                  .optimizer([](Net& net) { return torch::optim::Adam(net->parameters(), torch::optim::AdamOptions(1e-3)); });
  // Validation: the test set's cost and error, in inference mode, after every epoch.
  auto test_flow = tp::data::examples(normalize(test.images), test.labels) | tp::data::shard(env.rank, env.world_size) | tp::data::batch(1000);
  auto outputs = [](Net& net, const torch::data::Example<>& b) {
    auto logits = net->forward(b.data);
    return tp::outputs{{"cost", torch::nn::functional::cross_entropy(logits, b.target)}, {"logits", logits}, {"label", b.target}};
  };
  tp::Trainer trainer(std::move(input), std::move(desc), std::move(distribution),
                      tp::TrainOptions().steps_per_epoch(steps).max_epoch(epochs), tp::ProgressBar(),
                      tp::ScheduledHyperParamSetter(tp::learning_rate(), {{1, 1e-3}, {3, 3e-4}}), tp::MovingAverage("cost"),
                      tp::InferenceRunner(std::move(test_flow), outputs, tp::ScalarStats({"cost"}, "test_"),
                                          tp::ClassificationError("logits", "label", "test_error")),
                      tp::ScalarPrinter(), tp::JSONWriter(logdir), tp::TensorBoardWriter(logdir), tp::ModelSaver(logdir),
                      tp::MinSaver(logdir, "test_error"));
  trainer.train();
  if (!trainer.is_chief()) return std::numeric_limits<double>::quiet_NaN();  // rank 0 reports
  // The run's last test error, from its stats.json: a resumed run that had nothing left to do
  // still reports the accuracy it ended with.
  const auto history = tp::JSONWriter::read(trainer.template callback<tp::JSONWriter>().path());
  for (auto it = history.rbegin(); it != history.rend(); ++it)
    if (const auto found = it->scalars.find("test_error"); found != it->scalars.end()) return 1.0 - found->second;
  throw std::runtime_error("the run in " + logdir + " has no test error in its stats.json");
}

}  // namespace

int main(int argc, char** argv) try {
  const int epochs = static_cast<int>(flag(argc, argv, "--epochs", 3));
  const std::int64_t batch_size = flag(argc, argv, "--batch", 64);
  const double min_accuracy = std::stod(option(argc, argv, "--min-accuracy", "0"));

  torch::manual_seed(0);
  auto train_set = tp::data::fashion_mnist(tp::data::split::train);
  auto test_set = tp::data::fashion_mnist(tp::data::split::test);
  const std::int64_t towers = flag(argc, argv, "--towers", 1);
  if (towers < 1) throw std::invalid_argument("--towers must be >= 1, got " + std::to_string(towers));
  // Under tp-run (or torchrun, mpirun, srun) each process trains on its share of the data.
  const auto env = tp::read_process_environment();
  if (env.world_size > 1 && towers > 1) throw std::invalid_argument("--towers > 1 is for one process; under tp-run give each process one tower");
  const std::int64_t steps =
      flag(argc, argv, "--steps-per-epoch", train_set.images.size(0) / (batch_size * towers * env.world_size));
  if (env.is_chief())
    std::cout << "Fashion-MNIST: " << train_set.images.size(0) << " training and " << test_set.images.size(0) << " test images; " << epochs
              << " epochs of " << steps << " steps, " << towers * env.world_size << " tower(s) of batch " << batch_size
              << (env.world_size > 1 ? " in " + std::to_string(env.world_size) + " processes" : std::string()) << "\n";

  auto flow = tp::data::examples(normalize(train_set.images), train_set.labels) | tp::data::shuffle(42) |
              tp::data::shard(env.rank, env.world_size) | tp::data::batch(batch_size);
  const std::string logdir = tp::log_dir(option(argc, argv, "--logdir", "train_log/fashion_mnist"), tp::if_exists::keep).string();
  const std::string input = option(argc, argv, "--input", "queue");
  if (input != "queue" && input != "feed") throw std::invalid_argument("--input must be queue or feed, not '" + input + "'");
  // The one-type change: SingleDevice, Replicated or MultiProcess.
  auto run = [&](auto distribution) {
    return input == "queue" ? train(tp::QueueInput(std::move(flow)), std::move(distribution), test_set, epochs, steps, logdir, env)
                            : train(tp::FeedInput(std::move(flow)), std::move(distribution), test_set, epochs, steps, logdir, env);
  };
  const double accuracy = env.world_size > 1 ? run(tp::MultiProcess<tp::backend::Gloo>(env))
                          : towers == 1      ? run(tp::SingleDevice::best_available())
                                             : run(tp::Replicated<>::cpu(static_cast<int>(towers)));
  if (env.is_chief()) std::cout << "final test accuracy: " << accuracy << "\n";
  if (env.is_chief() && accuracy < min_accuracy) {
    std::cerr << "test accuracy " << accuracy << " is below the required " << min_accuracy << "\n";
    return 1;
  }
  return 0;
} catch (const std::exception& e) {
  std::cerr << "fashion_mnist: " << e.what() << "\n";
  return 1;
}
