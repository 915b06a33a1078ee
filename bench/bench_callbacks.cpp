// The cost of the default callback set on the Fashion-MNIST CNN: one epoch of training with a
// progress bar, the three monitors (console, stats.json, TensorBoard), a moving average of the
// cost and a checkpoint at the epoch's end, against the same epoch with no callback at all, in
// the same process. As in bench_loop_overhead, the figure is the paired ratio: both run in every
// iteration, in alternating order, one pair per repetition, and the median of the pairs' ratios
// is reported (target: <= 1.02).
//
// An epoch here is 100 steps of batch 64, about a tenth of a pass over Fashion-MNIST: the
// per-epoch costs (a 5 MB checkpoint written and fsynced, stats.json rewritten) weigh about ten
// times more than in a real epoch of 937 steps.
#include <benchmark/benchmark.h>

#include <chrono>
#include <filesystem>
#include <iostream>
#include <sstream>

#include <tp/tp.hpp>
#include <tp/data.hpp>
#include <tp/monitors.hpp>
#include <torch/torch.h>

#include "../examples/fashion_mnist_net.hpp"

namespace {

constexpr std::int64_t steps_per_epoch = 100;

torch::data::Example<> batch() {
  torch::manual_seed(0);
  return {torch::randn({64, 1, 28, 28}), torch::randint(0, 10, {64}, torch::kLong)};
}

auto desc() {
  return tp::model_desc([] {
           torch::manual_seed(1);
           return fashion_mnist::Net();
         })
      .tower_function([](const tp::TowerContext&, fashion_mnist::Net& net, const torch::data::Example<>& b) {
        return torch::nn::functional::cross_entropy(net->forward(b.data), b.target);
      })
      .optimizer([](fashion_mnist::Net& net) { return torch::optim::Adam(net->parameters(), torch::optim::AdamOptions(1e-3)); });
}

auto bare() { return tp::Trainer(tp::DummyInput(batch()), desc(), tp::SingleDevice(), tp::TrainOptions().model_summary(false).steps_per_epoch(steps_per_epoch)); }

std::filesystem::path logdir() { return std::filesystem::temp_directory_path() / ("tp_bench_callbacks_" + std::to_string(::getpid())); }

std::ostringstream console;  // what a terminal would show, kept off the benchmark's output

auto with_defaults() {
  return tp::Trainer(tp::DummyInput(batch()), desc(), tp::SingleDevice(), tp::TrainOptions().model_summary(false).steps_per_epoch(steps_per_epoch),
                     tp::ProgressBar(console, false), tp::MovingAverage("cost"), tp::ScalarPrinter(console), tp::JSONWriter(logdir()),
                     tp::TensorBoardWriter(logdir()), tp::ModelSaver(logdir()).resume(false).keep_last(2));
}

double seconds(auto&& f) {
  const auto start = std::chrono::steady_clock::now();
  f();
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
}

void paired(benchmark::State& state) {
  static auto none = bare();  // kept across repetitions: the first pair warms both up
  static auto full = with_defaults();
  double none_seconds = 0, full_seconds = 0;
  static bool none_first = true;
  for (auto _ : state) {
    if (none_first) {
      none_seconds += seconds([&] { none.train(); });
      full_seconds += seconds([&] { full.train(); });
    } else {
      full_seconds += seconds([&] { full.train(); });
      none_seconds += seconds([&] { none.train(); });
    }
    none_first = !none_first;
    console.str("");
  }
  state.counters["defaults_over_none"] = full_seconds / none_seconds;
  state.counters["ms_per_step_none"] = 1000 * none_seconds / static_cast<double>(state.iterations() * steps_per_epoch);
}

// One pair per repetition: the median of the pairs' ratios shrugs off a pair that a burst of
// other work on the machine hit.
BENCHMARK(paired)->Unit(benchmark::kSecond)->Iterations(1)->Repetitions(15);

class RatioReporter : public benchmark::ConsoleReporter {
 public:
  void ReportRuns(const std::vector<Run>& runs) override {
    for (const auto& run : runs)
      if (run.run_type == Run::RT_Aggregate && run.aggregate_name == "median") median = run.counters.at("defaults_over_none");
    ConsoleReporter::ReportRuns(runs);
  }
  double median = 0;
};

}  // namespace

int main(int argc, char** argv) {
  benchmark::Initialize(&argc, argv);
  RatioReporter reporter;
  benchmark::RunSpecifiedBenchmarks(&reporter);
  std::filesystem::remove_all(logdir());
  if (reporter.median > 0)
    std::cout << "\nratio default callbacks / none, per epoch of " << steps_per_epoch << " steps, paired, median of repetitions: "
              << reporter.median << "\n";
}
