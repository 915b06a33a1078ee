// The cost of the composed loop: one tiny-MLP training step through tp::Trainer (DummyInput,
// SingleDevice, 16 callbacks whose hooks do nothing) against the same step written by hand in
// LibTorch, in the same process. The figure to read is the paired ratio: both loops run in
// every iteration of one benchmark, in alternating order, and the median over repetitions of
// tp_time / hand_time is reported (target: <= 1.01). The separate benchmarks give the absolute
// times.
//
// `bench_loop_overhead --only tp|hand` runs just one loop, 500 steps after a warm-up, and marks
// them for callgrind (bench/loop_instructions.sh): instructions do not move with the machine's
// load, so their ratio says whether tp's loop does more work than the hand-written one.
#include <benchmark/benchmark.h>
#if __has_include(<valgrind/callgrind.h>)
#include <valgrind/callgrind.h>
#else
#define CALLGRIND_START_INSTRUMENTATION
#define CALLGRIND_STOP_INSTRUMENTATION
#endif

#include <algorithm>
#include <chrono>
#include <cstring>
#include <iostream>
#include <map>
#include <string>
#include <vector>

#include <tp/tp.hpp>
#include <torch/torch.h>

namespace {

constexpr std::int64_t steps_per_iteration = 100;

torch::data::Example<> batch() {
  torch::manual_seed(0);
  return {torch::randn({32, 64}), torch::randint(0, 10, {32}, torch::kLong)};
}

torch::nn::Sequential tiny_mlp() {
  torch::manual_seed(1);
  return torch::nn::Sequential(torch::nn::Linear(64, 64), torch::nn::ReLU(), torch::nn::Linear(64, 10));
}

// Sixteen distinct callback types with every hook, all empty.
template <int I>
struct NoOp {
  void before_train(auto&) {}
  void before_epoch(auto&) {}
  void before_step(auto&) {}
  void after_step(auto&) {}
  void after_epoch(auto&) {}
  void after_train(auto&) {}
};

template <int... I>
auto trainer_with_noops(std::integer_sequence<int, I...>) {
  auto desc = tp::model_desc(tiny_mlp)
                  .tower_function([](const tp::TowerContext&, torch::nn::Sequential& m, const torch::data::Example<>& b) {
                    return torch::nn::functional::cross_entropy(m->forward(b.data), b.target);
                  })
                  .optimizer([](torch::nn::Sequential& m) { return torch::optim::SGD(m->parameters(), 0.01); });
  return tp::Trainer(tp::DummyInput(batch()), std::move(desc), tp::SingleDevice(),
                     tp::TrainOptions().model_summary(false).intra_op_threads(-1).steps_per_epoch(steps_per_iteration), NoOp<I>{}...);
}

// The hand-written loop: what a LibTorch user writes without tp.
struct HandWritten {
  torch::data::Example<> b = batch();
  torch::nn::Sequential model = tiny_mlp();
  torch::optim::SGD sgd{model->parameters(), 0.01};

  void run() {
    for (std::int64_t i = 0; i < steps_per_iteration; ++i) {
      const auto input = b;  // what an input hands over: new handles to the same tensors
      auto loss = torch::nn::functional::cross_entropy(model->forward(input.data), input.target);
      sgd.zero_grad();
      loss.backward();
      sgd.step();
      benchmark::DoNotOptimize(loss);
    }
  }
};

void hand_written(benchmark::State& state) {
  HandWritten hand;
  for (auto _ : state) hand.run();
  state.SetItemsProcessed(state.iterations() * steps_per_iteration);
}

void tp_trainer(benchmark::State& state) {
  auto trainer = trainer_with_noops(std::make_integer_sequence<int, 16>{});
  for (auto _ : state) {
    trainer.train();
    auto cost = trainer.last_cost();  // a handle: DoNotOptimize of a const reference is deprecated
    benchmark::DoNotOptimize(cost);
  }
  state.SetItemsProcessed(state.iterations() * steps_per_iteration);
}

// Both loops in every iteration, in alternating order, each timed on its own: the ratio of one
// iteration is immune to the machine getting slower or faster between iterations (it is shared).
void paired(benchmark::State& state) {
  HandWritten hand;
  auto trainer = trainer_with_noops(std::make_integer_sequence<int, 16>{});
  using clock = std::chrono::steady_clock;
  double hand_seconds = 0, tp_seconds = 0;
  bool hand_first = true;
  for (auto _ : state) {
    auto time = [](auto&& f) {
      const auto start = clock::now();
      f();
      return std::chrono::duration<double>(clock::now() - start).count();
    };
    if (hand_first) {
      hand_seconds += time([&] { hand.run(); });
      tp_seconds += time([&] { trainer.train(); });
    } else {
      tp_seconds += time([&] { trainer.train(); });
      hand_seconds += time([&] { hand.run(); });
    }
    hand_first = !hand_first;
  }
  state.counters["tp_over_hand"] = tp_seconds / hand_seconds;
}

BENCHMARK(hand_written)->Unit(benchmark::kMicrosecond)->MinTime(0.2)->Repetitions(10);
BENCHMARK(tp_trainer)->Unit(benchmark::kMicrosecond)->MinTime(0.2)->Repetitions(10);
BENCHMARK(paired)->Unit(benchmark::kMicrosecond)->MinTime(0.4)->Repetitions(20);

// Collects the median of every benchmark to print ratios at the end.
class MedianCollector : public benchmark::ConsoleReporter {
 public:
  void ReportRuns(const std::vector<Run>& runs) override {
    for (const auto& run : runs)
      if (run.run_type == Run::RT_Aggregate && run.aggregate_name == "median") {
        medians[run.run_name.function_name] = run.GetAdjustedRealTime();
        if (auto ratio = run.counters.find("tp_over_hand"); ratio != run.counters.end()) paired_ratio = ratio->second;
      }
    ConsoleReporter::ReportRuns(runs);
  }
  std::map<std::string, double> medians;
  double paired_ratio = 0;
};

// --only tp|hand: one loop, its steps after the warm-up marked for callgrind.
int run_only(const char* which) {
  const bool tp_loop = std::strcmp(which, "tp") == 0;
  if (!tp_loop && std::strcmp(which, "hand") != 0) {
    std::cerr << "bench_loop_overhead: --only takes tp or hand, not '" << which << "'\n";
    return 2;
  }
  HandWritten hand;
  auto trainer = trainer_with_noops(std::make_integer_sequence<int, 16>{});
  auto run = [&] { tp_loop ? (void)trainer.train() : hand.run(); };
  for (int i = 0; i < 3; ++i) run();  // warm-up: first allocations, LibTorch's lazy set-up
  CALLGRIND_START_INSTRUMENTATION;
  for (int i = 0; i < 5; ++i) run();
  CALLGRIND_STOP_INSTRUMENTATION;
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  torch::set_num_threads(1);  // a tiny step: threads would only add noise
  if (argc == 3 && std::strcmp(argv[1], "--only") == 0) return run_only(argv[2]);
  std::vector<char*> args(argv, argv + argc);
  std::string interleave = "--benchmark_enable_random_interleaving=true";
  args.push_back(interleave.data());
  int count = static_cast<int>(args.size());
  benchmark::Initialize(&count, args.data());
  MedianCollector reporter;
  benchmark::RunSpecifiedBenchmarks(&reporter);
  if (reporter.medians.count("hand_written") && reporter.medians.count("tp_trainer")) {
    const double hand = reporter.medians["hand_written"], tp = reporter.medians["tp_trainer"];
    std::cout << "\nmedian time per " << steps_per_iteration << " steps: hand-written " << hand << " us, tp::Trainer "
              << tp << " us (ratio of medians " << tp / hand << ")\n";
  }
  if (reporter.paired_ratio > 0)
    std::cout << "ratio tp::Trainer / hand-written, paired, median of repetitions: " << reporter.paired_ratio
              << "  (target <= 1.01)\n";
  benchmark::Shutdown();
}
