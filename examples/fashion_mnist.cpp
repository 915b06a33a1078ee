// Trains a small CNN on Fashion-MNIST and prints the test accuracy after every epoch.
//
//   fashion_mnist [--epochs N] [--steps-per-epoch N] [--batch N] [--input queue|feed]
//                 [--towers N] [--logdir DIR] [--min-accuracy A] [--max-time SECONDS]
//                 [--precision fp32|bf16-mixed] [--channels-last] [--threads N]
//                 [--optimizer adam|sgd|nadam|radam|lamb|lars] [--profile-steps A:B]
//                 [--init-from STATE_DICT]
//   tp-run -n 2 fashion_mnist [--compress fp32|fp16] ...   one process per rank, Gloo all-reduce
//                                                          (MultiProcess), fp16 on the wire or not
//                             [--shard none|optimizer|gradients]   each rank keeps 1/N of the
//                                                          optimizer state (ZeRO 1), and of the
//                                                          reduced gradients (ZeRO 2)
//
// --precision bf16-mixed runs the forward passes under bf16 autocast, --channels-last keeps
// images and convolution weights in NHWC order: together 2.6 times faster on a CPU with bf16
// instructions (tp says at the start what the CPU has). --threads sets the intra-op threads.
// --optimizer chooses the optimizer (Adam by default), each with a learning rate of its own
// (lowered to 0.3 times from epoch 3 on).
// --input queue (the default) prepares batches in a background thread while the step runs
// (QueueInput); feed prepares them in the training thread (FeedInput). --towers N > 1 trains N
// CPU towers (Replicated<InProcess>), each with its own batch of --batch: the global batch is N
// times larger, and an epoch has N times fewer steps. Scalars go to the console, to
// DIR/stats.json and to TensorBoard event files in DIR (default: train_log/fashion_mnist).
// What TensorBoard shows besides the scalars: histograms of the weights and gradients, the
// first convolution's filters as an image (each epoch), and the flags as text. The model summary
// is printed at the start, and each epoch the callbacks that took over 5% of it. --profile-steps
// A:B writes DIR/trace-steps-A-B.json, a Chrome trace of steps A to B with tp's phases (open it
// in ui.perfetto.dev). Writing `learning_rate: 0.0001` into DIR/hyper.txt sets the learning rate
// of a running job from its next epoch on. Every 100 steps the weights are checked for NaN/Inf.
// Checkpoints go to DIR every epoch (the newest 10 kept, and min-test_error.ckpt, the best), and
// running the same command again resumes from the newest one: with more --epochs it goes on,
// to the bit as if it had never stopped. TP_LOGDIR_ACTION=backup|remove|new_dir starts afresh.
// Ctrl-C (SIGINT), SIGTERM or SIGUSR1 end it after the current step, with a checkpoint of that
// step: it says "interrupted at global step N; run the same command to resume" and exits with
// 128 + the signal (a second Ctrl-C ends it at once). Under SLURM, SIGUSR1 also requeues the job
// (sbatch --signal=USR1@90). --max-time ends it the same way before that many seconds have
// passed, checkpoint included, with status 0. Checkpoints open in Python (torch.load: the
// model's state_dict, Adam's state as torch.optim's; fashion_mnist_state_dict.py scores one),
// and --init-from starts from a state_dict file that Python (torch.save(model.state_dict()))
// or tp-export --state-dict wrote.
// With --min-accuracy it exits non-zero if the final test accuracy is below A (the examples run
// as tests that way). --help lists the flags and their defaults; a bad flag or value exits with
// status 2, naming it, before any data is read.
#include <algorithm>
#include <charconv>
#include <cstdlib>
#include <iostream>
#include <limits>
#include <stdexcept>
#include <string>
#include <string_view>
#include <vector>

#include <CLI/CLI.hpp>
#include <tp/tp.hpp>
#include <tp/data.hpp>
#include <tp/monitors.hpp>
#include <tp/distributed.hpp>
#include <torch/torch.h>

#include "fashion_mnist_net.hpp"
#include "flags.hpp"

namespace {

using fashion_mnist::Net;
using fashion_mnist::normalize;


struct flags {
  int epochs = 3;
  std::int64_t steps_per_epoch = 0;  // 0: one pass over the training set
  std::int64_t batch = 64;
  std::string input = "queue";
  std::int64_t towers = 1;
  std::string logdir = "train_log/fashion_mnist";
  double min_accuracy = 0;
  double max_time = 0;  // seconds; 0: no limit
  std::string precision = "fp32";
  bool channels_last = false;
  int threads = 0;  // 0: LibTorch's default
  std::string optimizer = "adam";
  std::string compress = "fp32";            // the gradients on the wire under tp-run
  std::string shard = "none";               // what the ranks shard under tp-run
  std::string init_from;                    // a state_dict file the weights start from
  std::string profile_steps;                // "A:B": a Chrome trace of steps A to B
  std::vector<tp::Profiler::window> profile;  // parsed from it
  std::string config;                       // the flags, as TOML, for TensorBoard
};

// "A:B" with 1 <= A <= B, as --profile-steps takes it.
std::vector<tp::Profiler::window> parse_window(const std::string& text) {
  const auto colon = text.find(':');
  std::int64_t first = 0, last = 0;
  const auto number = [](std::string_view part, std::int64_t& value) {
    const auto [end, error] = std::from_chars(part.data(), part.data() + part.size(), value);
    return !part.empty() && error == std::errc() && end == part.data() + part.size();
  };
  if (colon == std::string::npos || !number(std::string_view(text).substr(0, colon), first) ||
      !number(std::string_view(text).substr(colon + 1), last) || first < 1 || last < first)
    throw CLI::ValidationError("--profile-steps must be A:B, the first and last step to profile with 1 <= A <= B, not '" + text + "'");
  return {{first, last}};
}

// The optimizer --optimizer names, and its learning rate for this net and batch.
struct optimizer_choice {
  const char* name;
  double lr;
};
constexpr optimizer_choice optimizers[] = {{"adam", 1e-3}, {"sgd", 0.05}, {"nadam", 1e-3}, {"radam", 1e-3}, {"lamb", 5e-3}, {"lars", 0.1}};

double learning_rate_of(const std::string& name) {
  for (const auto& o : optimizers)
    if (name == o.name) return o.lr;
  throw std::invalid_argument("unknown optimizer " + name);
}

// One type for every choice (tp::optim::AnyOptimizer), so that one trainer serves them all.
tp::optim::AnyOptimizer make_optimizer(const std::string& name, Net& net) {
  const double lr = learning_rate_of(name);
  if (name == "sgd") return torch::optim::SGD(net->parameters(), torch::optim::SGDOptions(lr).momentum(0.9));
  if (name == "nadam") return tp::optim::NAdam(net->parameters(), tp::optim::NAdamOptions(lr));
  if (name == "radam") return tp::optim::RAdam(net->parameters(), tp::optim::RAdamOptions(lr));
  if (name == "lamb") return tp::optim::LAMB(net->parameters(), tp::optim::LAMBOptions(lr).weight_decay(1e-4).exclude_bias_and_norm(true));
  if (name == "lars")
    return tp::optim::LARS(net->parameters(), tp::optim::LARSOptions(lr).trust_coefficient(0.02).weight_decay(1e-4).exclude_bias_and_norm(true));
  return torch::optim::Adam(net->parameters(), torch::optim::AdamOptions(lr));
}

// A number below `low` is refused, naming the least; text that is no number is left to CLI11's
// conversion, which names the flag and the value.
CLI::Validator at_least(std::int64_t low) {
  return CLI::Validator(
      [low](std::string& text) -> std::string {
        std::int64_t value = 0;
        const auto [end, error] = std::from_chars(text.data(), text.data() + text.size(), value);
        if (error != std::errc() || end != text.data() + text.size() || value >= low) return {};
        return "must be at least " + std::to_string(low) + ", not " + text;
      },
      ">= " + std::to_string(low));
}

// The flags, or an exit: 0 after --help, 2 after a bad flag or value.
flags parse(int argc, char** argv) {
  flags f;
  CLI::App app("Trains a small CNN on Fashion-MNIST and prints the test accuracy after every epoch; run it again to "
               "resume from the newest checkpoint in --logdir. Under tp-run each process is one rank.",
               "fashion_mnist");
  app.option_defaults()->always_capture_default();
  app.add_option("--epochs", f.epochs, "epochs to train, counting those a resumed run has done")->check(at_least(1));
  app.add_option("--steps-per-epoch", f.steps_per_epoch, "steps in an epoch")
      ->check(at_least(1))
      ->default_str("one pass over the training set");
  app.add_option("--batch", f.batch, "batch size of each tower")->check(at_least(1));
  app.add_option("--input", f.input, "queue: batches made in a background thread (QueueInput); feed: in the training thread (FeedInput)");
  app.add_option("--towers", f.towers, "CPU towers in this process (Replicated); 1 under tp-run")->check(at_least(1));
  app.add_option("--logdir", f.logdir, "where stats.json, TensorBoard events and checkpoints go");
  app.add_option("--min-accuracy", f.min_accuracy, "exit with status 1 if the final test accuracy is below this");
  app.add_option("--precision", f.precision, "fp32, or bf16-mixed (autocast: bf16 matrix products, fp32 weights)")
      ->check(CLI::IsMember({"fp32", "bf16-mixed"}));
  app.add_flag("--channels-last", f.channels_last, "images and convolution weights in channels-last (NHWC) order");
  app.add_option("--threads", f.threads, "intra-op threads (0: LibTorch's default, one per core)")->check(CLI::NonNegativeNumber);
  app.add_option("--optimizer", f.optimizer, "adam, sgd (momentum 0.9), nadam, radam, lamb or lars");
  app.add_option("--compress", f.compress, "under tp-run: gradients all-reduced as fp32, or as fp16 (half the bytes on the wire)")
      ->check(CLI::IsMember({"fp32", "fp16"}));
  app.add_option("--shard", f.shard, "under tp-run: none, optimizer (each rank keeps 1/N of the optimizer state) or gradients (and of the reduced gradients)")
      ->check(CLI::IsMember({"none", "optimizer", "gradients"}));
  app.add_option("--init-from", f.init_from,
                 "a state_dict file (Python's torch.save(model.state_dict()), tp-export --state-dict) the weights start from; "
                 "a checkpoint in --logdir to resume from takes precedence")
      ->check(CLI::ExistingFile);
  app.add_option("--profile-steps", f.profile_steps, "A:B writes a Chrome trace of steps A to B (global steps) to --logdir")
      ->default_str("none");
  app.add_option("--max-time", f.max_time, "seconds this run may take, its last checkpoint included (0: no limit)")->check(CLI::NonNegativeNumber);
  app.failure_message(examples::failure_message("fashion_mnist"));
  app.allow_extras();  // so that the error below names the first unknown argument, not all of them in reverse
  try {
    app.parse(argc, argv);
    if (const auto extra = app.remaining(); !extra.empty())
      throw CLI::ExtrasError((extra.front().starts_with("-") ? "unknown option " : "unexpected argument ") + extra.front(),
                             CLI::ExitCodes::ExtrasError);
    if (f.input != "queue" && f.input != "feed") throw CLI::ValidationError("--input must be queue or feed, not '" + f.input + "'");
    if (std::none_of(std::begin(optimizers), std::end(optimizers), [&](const auto& o) { return f.optimizer == o.name; }))
      throw CLI::ValidationError("--optimizer must be adam, sgd, nadam, radam, lamb or lars, not '" + f.optimizer + "'");
    if (!f.profile_steps.empty()) f.profile = parse_window(f.profile_steps);
    f.config = app.config_to_str(/*default_also=*/true, /*write_description=*/false);
  } catch (const CLI::ParseError& e) {
    app.exit(e);  // --help to stdout, errors to stderr
    std::exit(e.get_exit_code() == 0 ? 0 : 2);
  }
  return f;
}

struct result {
  tp::train_outcome outcome;
  double accuracy = std::numeric_limits<double>::quiet_NaN();  // on the chief, after a run to the end
};

// Trains with any input and distribution policy.
template <class Input, class Distribution>
result train(Input input, Distribution distribution, const tp::data::FashionMnist& test, tp::TrainOptions options,
             const flags& f, const std::string& logdir, const tp::process_environment& env) {
  auto desc = tp::model_desc([init = f.init_from] {
                Net net;
                if (!init.empty()) tp::load_state_dict(*net, init);  // strict: every name and shape must fit
                return net;
              })
                  .tower_function([](const tp::TowerContext&, Net& net, const torch::data::Example<>& b) {
                    return torch::nn::functional::cross_entropy(net->forward(b.data), b.target);
                  })
                  .optimizer([name = f.optimizer](Net& net) { return make_optimizer(name, net); })
                  .precision(tp::parse_precision(f.precision))
                  .channels_last(f.channels_last);
  const double lr = learning_rate_of(f.optimizer);
  // Validation: the test set's cost and error, in inference mode, after every epoch.
  auto test_flow = tp::data::examples(normalize(test.images), test.labels) | tp::data::shard(env.rank, env.world_size) | tp::data::batch(1000);
  // The learning rate follows the schedule, or LOGDIR/hyper.txt where a person has edited it.
  tp::Trainer trainer(std::move(input), std::move(desc), std::move(distribution), std::move(options), tp::Profiler(logdir, f.profile),
                      tp::RunEnvironment(), tp::ProgressBar(), tp::ScheduledHyperParamSetter(tp::learning_rate(), {{1, lr}, {3, 0.3 * lr}}),
                      tp::HumanHyperParamSetter(std::filesystem::path(logdir) / "hyper.txt", tp::learning_rate()), tp::MovingAverage("cost"),
                      tp::NumericsWatch().every_steps(100),
                      tp::InferenceRunner(std::move(test_flow), fashion_mnist::test_outputs, tp::ScalarStats({"cost"}, "test_"),
                                          tp::ClassificationError("logits", "label", "test_error")),
                      tp::ParamHistograms(), tp::FilterImages("conv1.weight"), tp::CallbackTimeLogger(), tp::ScalarPrinter(),
                      tp::JSONWriter(logdir), tp::TensorBoardWriter(logdir).config("```\n" + f.config + "```"), tp::ModelSaver(logdir),
                      tp::MinSaver(logdir, "test_error"), tp::SlurmRequeue());
  const auto outcome = trainer.train();
  if (outcome.interrupted() || !trainer.is_chief()) return {outcome};  // rank 0 reports the accuracy
  return {outcome, fashion_mnist::last_test_accuracy(trainer)};
}

}  // namespace

int main(int argc, char** argv) try {
  const flags f = parse(argc, argv);
  const int epochs = f.epochs;
  const std::int64_t batch_size = f.batch, towers = f.towers;

  torch::manual_seed(0);
  auto train_set = tp::data::fashion_mnist(tp::data::split::train);
  auto test_set = tp::data::fashion_mnist(tp::data::split::test);
  // Under tp-run (or torchrun, mpirun, srun) each process trains on its share of the data.
  const auto env = tp::read_process_environment();
  if (env.world_size > 1 && towers > 1) throw std::invalid_argument("--towers > 1 is for one process; under tp-run give each process one tower");
  const std::int64_t steps =
      f.steps_per_epoch > 0 ? f.steps_per_epoch : train_set.images.size(0) / (batch_size * towers * env.world_size);
  if (env.is_chief())
    std::cout << "Fashion-MNIST: " << train_set.images.size(0) << " training and " << test_set.images.size(0) << " test images; " << epochs
              << " epochs of " << steps << " steps, " << towers * env.world_size << " tower(s) of batch " << batch_size
              << (env.world_size > 1 ? " in " + std::to_string(env.world_size) + " processes" : std::string()) << "\n";

  if (env.is_chief() && !f.init_from.empty()) std::cout << "weights start from " << f.init_from << " (a state_dict)\n";

  auto flow = tp::data::examples(normalize(train_set.images), train_set.labels) | tp::data::shuffle(42) |
              tp::data::shard(env.rank, env.world_size) | tp::data::batch(batch_size);
  const std::string logdir = tp::log_dir(f.logdir, tp::if_exists::keep).string();
  const std::string& input = f.input;
  const auto options = tp::TrainOptions()
                           .steps_per_epoch(steps)
                           .max_epoch(epochs)
                           .max_time(std::chrono::milliseconds(static_cast<std::int64_t>(f.max_time * 1000)))
                           .intra_op_threads(f.threads);
  // The one-type change: SingleDevice, Replicated or MultiProcess.
  auto run = [&](auto distribution) {
    return input == "queue" ? train(tp::QueueInput(std::move(flow)), std::move(distribution), test_set, options, f, logdir, env)
                            : train(tp::FeedInput(std::move(flow)), std::move(distribution), test_set, options, f, logdir, env);
  };
  const auto wire = f.compress == "fp16" ? torch::kHalf : torch::kFloat;
  const auto shard = f.shard == "optimizer" ? tp::sharding::optimizer_state : f.shard == "gradients" ? tp::sharding::gradients : tp::sharding::none;
  const auto [outcome, accuracy] = env.world_size > 1 ? run(tp::MultiProcess<tp::backend::Gloo>(env).compress_gradients(wire).shard(shard))
                                   : towers == 1      ? run(tp::SingleDevice::best_available())
                                                      : run(tp::Replicated<>::cpu(static_cast<int>(towers)));
  if (outcome.interrupted()) {
    if (env.is_chief())
      std::cout << (outcome.cause == tp::end_cause::signal ? "interrupted" : "out of --max-time") << " at global step "
                << outcome.global_step << "; run the same command to resume" << std::endl;
    return outcome.exit_status();
  }
  if (env.is_chief()) std::cout << "final test accuracy: " << accuracy << "\n";
  if (env.is_chief() && accuracy < f.min_accuracy) {
    std::cerr << "test accuracy " << accuracy << " is below the required " << f.min_accuracy << "\n";
    return 1;
  }
  return 0;
} catch (const std::exception& e) {
  std::cerr << "fashion_mnist: " << e.what() << "\n";
  return 1;
}
