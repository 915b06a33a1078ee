// The cost of tp's phase markers (tp/trainer/detail/phase_marker.hpp) with no profiler running: the
// tiny-MLP step of bench_loop_overhead written by hand, against the same step with the markers
// a tp::Trainer step has with 16 callbacks (input wait, forward, backward, optimizer step, and
// each callback's before_step and after_step). The trainer asks whether a profiler runs once
// per hook (detail::profiling), so the 16 callbacks add 2 checks per step, not 32. Paired as in bench_loop_overhead:
// both loops in every iteration, alternating, and the median over repetitions of
// marked_time / plain_time (target: <= 1.01). bench_loop_overhead measures the whole trainer,
// markers included, against the hand-written loop.
#include <benchmark/benchmark.h>

#include <chrono>
#include <iostream>
#include <vector>

#include <tp/tp.hpp>
#include <torch/torch.h>

namespace {

constexpr std::int64_t steps_per_iteration = 100;

template <int I>
struct Callback {};
// What the trainer does at a hook: one check, then a marker around each callback's hook only
// if a profiler runs.
template <int... I>
void callback_markers(std::integer_sequence<int, I...>) {
  const auto hook = [] { benchmark::ClobberMemory(); };
  if (tp::detail::profiling())
    ([&] {
      const tp::detail::phase_scope marker([] { return tp::detail::callback_phase_name<Callback<I>, tp::detail::before_step_tag>(); });
      hook();
    }(), ...);
  else
    (((void)I, hook()), ...);
}

template <bool marked>
struct Loop {
  torch::data::Example<> batch = [] {
    torch::manual_seed(0);
    return torch::data::Example<>{torch::randn({32, 64}), torch::randint(0, 10, {32}, torch::kLong)};
  }();
  torch::nn::Sequential model = [] {
    torch::manual_seed(1);
    return torch::nn::Sequential(torch::nn::Linear(64, 64), torch::nn::ReLU(), torch::nn::Linear(64, 10));
  }();
  torch::optim::SGD sgd{model->parameters(), 0.01};

  void run() {
    for (std::int64_t i = 0; i < steps_per_iteration; ++i) benchmark::DoNotOptimize(marked ? marked_step() : plain_step());
  }
  torch::Tensor plain_step() {
    sgd.zero_grad();
    const auto input = batch;  // what an input hands over: new handles to the same tensors
    auto loss = torch::nn::functional::cross_entropy(model->forward(input.data), input.target);
    loss.backward();
    sgd.step();
    return loss;
  }
  // The same, marked as the trainer and SingleDevice mark it.
  torch::Tensor marked_step() {
    callback_markers(std::make_integer_sequence<int, 16>{});
    sgd.zero_grad();
    const auto input = [&] {
      TP_PHASE("tp::input_wait");
      return batch;
    }();
    auto loss = [&] {
      TP_PHASE("tp::tower_forward");
      return torch::nn::functional::cross_entropy(model->forward(input.data), input.target);
    }();
    {
      TP_PHASE("tp::tower_backward");
      loss.backward();
    }
    {
      TP_PHASE("tp::optimizer_step");
      sgd.step();
    }
    callback_markers(std::make_integer_sequence<int, 16>{});
    return loss;
  }
};

void plain(benchmark::State& state) {
  Loop<false> loop;
  for (auto _ : state) loop.run();
  state.SetItemsProcessed(state.iterations() * steps_per_iteration);
}
void marked(benchmark::State& state) {
  Loop<true> loop;
  for (auto _ : state) loop.run();
  state.SetItemsProcessed(state.iterations() * steps_per_iteration);
}
void paired(benchmark::State& state) {
  Loop<false> a;
  Loop<true> b;
  using clock = std::chrono::steady_clock;
  double plain_seconds = 0, marked_seconds = 0;
  bool plain_first = true;
  const auto time = [](auto&& f) {
    const auto start = clock::now();
    f();
    return std::chrono::duration<double>(clock::now() - start).count();
  };
  for (auto _ : state) {
    if (plain_first) {
      plain_seconds += time([&] { a.run(); });
      marked_seconds += time([&] { b.run(); });
    } else {
      marked_seconds += time([&] { b.run(); });
      plain_seconds += time([&] { a.run(); });
    }
    plain_first = !plain_first;
  }
  state.counters["marked_over_plain"] = marked_seconds / plain_seconds;
}

BENCHMARK(plain)->Unit(benchmark::kMicrosecond)->MinTime(0.2)->Repetitions(5);
BENCHMARK(marked)->Unit(benchmark::kMicrosecond)->MinTime(0.2)->Repetitions(5);
BENCHMARK(paired)->Unit(benchmark::kMicrosecond)->MinTime(0.4)->Repetitions(20);

class RatioCollector : public benchmark::ConsoleReporter {
 public:
  void ReportRuns(const std::vector<Run>& runs) override {
    for (const auto& run : runs)
      if (run.run_type == Run::RT_Aggregate && run.aggregate_name == "median")
        if (auto r = run.counters.find("marked_over_plain"); r != run.counters.end()) ratio = r->second;
    ConsoleReporter::ReportRuns(runs);
  }
  double ratio = 0;
};

}  // namespace

int main(int argc, char** argv) {
  torch::set_num_threads(1);  // a tiny step: threads would only add noise
  benchmark::Initialize(&argc, argv);
  RatioCollector reporter;
  benchmark::RunSpecifiedBenchmarks(&reporter);
  if (reporter.ratio > 0)
    std::cout << "ratio marked / plain step, paired, median of repetitions: " << reporter.ratio << "  (target <= 1.01)\n";
  benchmark::Shutdown();
}
