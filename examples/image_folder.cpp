// Trains the Fashion-MNIST example's CNN from image files on disk and prints the test accuracy.
//
//   image_folder TRAIN TEST [--epochs N] [--threads N] [--batch N] [--steps-per-epoch N]
//                [--augment] [--skip-bad-files] [--logdir DIR] [--min-accuracy A]
//   tp-run -n 2 image_folder TRAIN TEST ...     one process per rank, each with its share
//
// TRAIN is one of these, TEST one of the first two:
//   - a folder in torchvision's ImageFolder layout (one subfolder per class, PNG or JPEG files);
//   - a list file, NAME.txt: one `relative/path label` per line (paths from the list's folder);
//   - 'DIR/PREFIX*.tar' (quoted): the tar shards in DIR whose names start with PREFIX, in the
//     WebDataset layout (KEY.png or KEY.jpg beside KEY.cls), spread over the ranks by file.
// scripts/write_image_folder.py writes Fashion-MNIST out in all three (OUT/train, OUT/train.txt,
// 'OUT/train-*.tar').
//
// Files are read and decoded in --threads threads (parallel_map), each image seeded by the pass
// and its own index, so that a run gives the same batches with any number of threads, and a
// resumed run (run the same command again: checkpoints go to --logdir every epoch) goes on with
// exactly the images, crops and flips the interrupted run would have used. The indexed sources
// shuffle exactly (shuffle(42)) and the shards through a buffer of 4096. The model, the optimizer
// (Adam, its learning rate lowered to 0.3 times from epoch 3) and the seeds are fashion_mnist's:
// from a list file in the IDX files' order, the run sees the in-memory run's examples in its
// order. On a machine with a GPU it trains there (SingleDevice::best_available), its batches
// decoded into pinned memory and staged on the GPU a step ahead (StagingInput). --augment adds
// a random horizontal flip and a random resized crop of 75-100% of the image (torchvision's
// RandomResizedCrop). --skip-bad-files leaves out files that cannot be
// decoded, counting them each pass, instead of stopping at the first with its path.
#include <algorithm>
#include <filesystem>
#include <iostream>
#include <limits>
#include <stdexcept>
#include <string>
#include <string_view>
#include <vector>

#include <CLI/CLI.hpp>
#include <tp/tp.hpp>
#include <tp/data.hpp>
#include <tp/distributed.hpp>
#include <tp/images.hpp>
#include <tp/monitors.hpp>
#include <torch/torch.h>

#include "fashion_mnist_net.hpp"
#include "flags.hpp"

namespace {

namespace fs = std::filesystem;
using fashion_mnist::Net;

struct flags {
  std::string train, test;
  int epochs = 3;
  int threads = 2;
  std::int64_t batch = 64;
  std::int64_t steps_per_epoch = 0;  // 0: one pass over the training set
  bool augment = false;
  bool skip_bad_files = false;
  std::string logdir = "train_log/image_folder";
  double min_accuracy = 0;
};

flags parse(int argc, char** argv) {
  flags f;
  CLI::App app("Trains the Fashion-MNIST example's CNN from image files (an ImageFolder layout, a list file or tar shards) and "
               "prints the test accuracy; run it again to resume from the newest checkpoint in --logdir.",
               "image_folder");
  app.option_defaults()->always_capture_default();
  app.add_option("TRAIN", f.train, "training images: a folder of class folders, a list file (.txt) or 'DIR/PREFIX*.tar' shards")->required();
  app.add_option("TEST", f.test, "test images: a folder of class folders or a list file")->required();
  app.add_option("--epochs", f.epochs, "epochs to train, counting those a resumed run has done")->check(CLI::PositiveNumber);
  app.add_option("--threads", f.threads, "threads that read and decode images")->check(CLI::PositiveNumber);
  app.add_option("--batch", f.batch, "batch size")->check(CLI::PositiveNumber);
  app.add_option("--steps-per-epoch", f.steps_per_epoch, "steps in an epoch")->check(CLI::PositiveNumber)->default_str("one pass over TRAIN");
  app.add_flag("--augment", f.augment, "random horizontal flips and resized crops");
  app.add_flag("--skip-bad-files", f.skip_bad_files, "leave out images that cannot be decoded (counted each pass) instead of stopping");
  app.add_option("--logdir", f.logdir, "where stats.json, TensorBoard events and checkpoints go");
  app.add_option("--min-accuracy", f.min_accuracy, "exit with status 1 if the final test accuracy is below this");
  app.failure_message(examples::failure_message("image_folder"));
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    app.exit(e);
    std::exit(e.get_exit_code() == 0 ? 0 : 2);
  }
  return f;
}

// The shards a `DIR/PREFIX*.tar` argument names (tar_files_in), or none for another argument.
std::vector<std::string> tar_shards_named(const std::string& argument) {
  const std::string_view suffix = "*.tar";
  if (!argument.ends_with(suffix)) return {};
  const fs::path pattern(argument.substr(0, argument.size() - suffix.size()));
  auto shards = tp::data::tar_files_in(pattern.parent_path().empty() ? "." : pattern.parent_path().string(), pattern.filename().string());
  if (shards.empty()) throw std::invalid_argument(argument + " names no tar shards: no file in its folder starts with that prefix and ends in .tar");
  return shards;
}

struct result {
  tp::train_outcome outcome;
  double accuracy = std::numeric_limits<double>::quiet_NaN();  // on the chief, after a run to the end
};

// A list file or an image folder: image files with labels, in a fixed order (one type for both).
auto indexed_source(const std::string& path) {
  if (fs::is_regular_file(path) && fs::path(path).extension() == ".txt") return tp::data::list_file(path);
  return tp::data::image_folder(path);
}

// Calls f with this rank's share of the training images, in the order it trains on them: an
// indexed source shuffled exactly, then sharded; tar shards spread over the ranks and shuffled
// through a buffer. (Two dataflow types, so two trainers are compiled, not more.)
template <class F>
result with_training_source(const std::string& path, const tp::process_environment& env, F&& f) {
  if (auto shards = tar_shards_named(path); !shards.empty())
    return f(tp::data::tar_shards(std::move(shards), env.rank, env.world_size, /*shuffle_seed=*/5) | tp::data::shuffle_buffer(4096, 42));
  return f(indexed_source(path) | tp::data::shuffle(42) | tp::data::shard(env.rank, env.world_size));
}

}  // namespace

int main(int argc, char** argv) try {
  const flags f = parse(argc, argv);
  torch::manual_seed(0);
  const auto env = tp::read_process_environment();
  const std::string logdir = tp::log_dir(f.logdir, tp::if_exists::keep).string();

  // Grey 28x28 images normalised as the in-memory example does (Fashion-MNIST's mean and std).
  const auto eval_transforms = tp::data::transforms(tp::data::color::grey).normalize({0.2860}, {0.3530});
  auto train_transforms = eval_transforms;
  if (f.augment)
    train_transforms = tp::data::transforms(tp::data::color::grey)
                           .random_resized_crop(28, 28, {0.75, 1.0})
                           .random_horizontal_flip(0.5)
                           .normalize({0.2860}, {0.3530});
  const auto bad_files = f.skip_bad_files ? tp::data::bad_files::skip : tp::data::bad_files::fail;

  auto desc = tp::model_desc([] { return Net(); })
                  .tower_function([](const tp::TowerContext&, Net& net, const torch::data::Example<>& b) {
                    return torch::nn::functional::cross_entropy(net->forward(b.data), b.target);
                  })
                  .optimizer([](Net& net) { return torch::optim::Adam(net->parameters(), torch::optim::AdamOptions(1e-3)); });
  const auto options = tp::TrainOptions().max_epoch(f.epochs).steps_per_epoch(f.steps_per_epoch);

  // The run's outcome, and on the chief its last test accuracy (from stats.json: a resumed run
  // with nothing left to do still reports the accuracy it ended with).
  const auto [outcome, accuracy] = with_training_source(f.train, env, [&](auto train_files) {
    auto train_flow = std::move(train_files) | tp::data::decode_images(train_transforms, f.threads, /*seed=*/7, bad_files) | tp::data::batch(f.batch);
    // Validation: each rank scores its share of the test set after every epoch.
    auto test_flow = indexed_source(f.test) | tp::data::shard(env.rank, env.world_size) |
                     tp::data::decode_images(eval_transforms, f.threads, /*seed=*/7, bad_files) | tp::data::batch(1000);
    auto run = [&](auto distribution) -> result {
      // On a GPU, batches are decoded into pinned memory and copied while the step before runs.
      torch::Device device = torch::kCPU;
      if constexpr (requires { distribution.device(); }) device = distribution.device();
      auto trainer = tp::make_trainer(
          tp::StagingInput(tp::QueueInput(std::move(train_flow)), device), std::move(desc), std::move(distribution), options, tp::default_callbacks(logdir),
          tp::InferenceRunner(std::move(test_flow), fashion_mnist::test_outputs, tp::ScalarStats({"cost"}, "test_"),
                              tp::ClassificationError("logits", "label", "test_error")),
          tp::ScheduledHyperParamSetter(tp::learning_rate(), {{1, 1e-3}, {3, 3e-4}}), tp::ModelSaver(logdir));
      const auto outcome = trainer.train();
      if (outcome.interrupted() || !trainer.is_chief()) return {outcome};
      return {outcome, fashion_mnist::last_test_accuracy(trainer)};
    };
    return env.world_size > 1 ? run(tp::MultiProcess<tp::backend::Gloo>(env)) : run(tp::SingleDevice::best_available());
  });
  if (outcome.interrupted()) {
    if (env.is_chief()) std::cout << "interrupted at global step " << outcome.global_step << "; run the same command to resume" << std::endl;
    return outcome.exit_status();
  }
  if (!env.is_chief()) return 0;
  std::cout << "final test accuracy: " << accuracy << "\n";
  if (accuracy < f.min_accuracy) {
    std::cerr << "test accuracy " << accuracy << " is below the required " << f.min_accuracy << "\n";
    return 1;
  }
  return 0;
} catch (const std::exception& e) {
  std::cerr << "image_folder: " << e.what() << "\n";
  return 1;
}
