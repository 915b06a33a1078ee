// Does QueueInput hide the cost of data? A step whose data costs D (real CPU work in the
// dataflow: passes of a 1-D blur over every datapoint, in plain C++) and whose compute costs C
// (an MLP training step). With FeedInput a step takes about D + C; with QueueInput, whose
// thread prepares the next batches during the step, it should take max(D, C) (target: at most
// 1.05 x max(D, C)).
//
// D is calibrated at start to about C / 2 and to about 2 C. Every iteration of a benchmark
// times, on fresh trainers, S steps of each of: data alone, compute alone, FeedInput,
// QueueInput; the counters are the ratios within that iteration, and the figures to read are
// their medians over the repetitions. A second benchmark times one Fashion-MNIST epoch (the
// example's CNN) with FeedInput and with QueueInput.
#include <benchmark/benchmark.h>
#include <dlfcn.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <iostream>
#include <thread>
#include <vector>

#include <tp/tp.hpp>
#include <tp/data.hpp>
#include <torch/torch.h>

#include "../examples/fashion_mnist_net.hpp"

namespace {

using clock_type = std::chrono::steady_clock;
using Example = torch::data::Example<>;
constexpr std::int64_t batch_size = 32, steps = 100;

// `passes` passes of a 3-tap blur over the datapoint's 784 values: the data work.
struct Blur {
  int passes;
  Example operator()(Example e) const {
    std::vector<float> a(e.data.data_ptr<float>(), e.data.data_ptr<float>() + e.data.numel()), b(a.size());
    for (int p = 0; p < passes; ++p) {
      b.front() = a.front();
      b.back() = a.back();
      for (std::size_t i = 1; i + 1 < a.size(); ++i) b[i] = 0.25f * a[i - 1] + 0.5f * a[i] + 0.25f * a[i + 1];
      std::swap(a, b);
    }
    return {torch::from_blob(a.data(), {static_cast<std::int64_t>(a.size())}).clone(), e.target};
  }
};

const torch::Tensor& images() {
  static const torch::Tensor x = (torch::manual_seed(0), torch::rand({4096, 784}));
  return x;
}
const torch::Tensor& labels() {
  static const torch::Tensor y = torch::randint(0, 10, {4096}, torch::kLong);
  return y;
}

auto dataflow(int passes) {
  return tp::data::examples(images(), labels()) | ranges::views::transform(Blur{passes}) | tp::data::shuffle(1) |
         tp::data::batch(batch_size);
}

auto mlp_desc() {
  return tp::model_desc([] {
           torch::manual_seed(1);
           return torch::nn::Sequential(torch::nn::Linear(784, 1024), torch::nn::ReLU(), torch::nn::Linear(1024, 1024),
                                        torch::nn::ReLU(), torch::nn::Linear(1024, 10));
         })
      .tower_function([](const tp::TowerContext&, torch::nn::Sequential& m, const Example& b) {
        return torch::nn::functional::cross_entropy(m->forward(b.data), b.target);
      })
      .optimizer([](torch::nn::Sequential& m) { return torch::optim::SGD(m->parameters(), 0.01); });
}

template <class Input>
double seconds_to_train(Input input) {
  tp::Trainer trainer(std::move(input), mlp_desc(), tp::SingleDevice(), tp::TrainOptions().model_summary(false).intra_op_threads(-1).steps_per_epoch(steps));
  const auto start = clock_type::now();
  trainer.train();
  return std::chrono::duration<double>(clock_type::now() - start).count();
}

double seconds_of_data(int passes) {
  tp::FeedInput input(dataflow(passes));
  const auto start = clock_type::now();
  for (std::int64_t i = 0; i < steps; ++i) benchmark::DoNotOptimize(input.next_batch());
  return std::chrono::duration<double>(clock_type::now() - start).count();
}

double seconds_of_compute() {
  tp::FeedInput once(dataflow(0));
  return seconds_to_train(tp::DummyInput(once.next_batch()));
}

// Blur passes that make the data of one step cost about `fraction` of its compute.
int passes_for(double fraction) {
  const double compute = seconds_of_compute();
  const double per_pass = (seconds_of_data(64) - seconds_of_data(0)) / 64.0;
  return std::max(1, static_cast<int>(std::lround(fraction * compute / per_pass)));
}

void overlap(benchmark::State& state) {
  const int passes = passes_for(state.range(0) / 100.0);
  double data = 0, compute = 0, feed = 0, queue = 0;
  for (auto _ : state) {
    data += seconds_of_data(passes);
    compute += seconds_of_compute();
    feed += seconds_to_train(tp::FeedInput(dataflow(passes)));
    queue += seconds_to_train(tp::QueueInput(dataflow(passes), 8));
  }
  const double n = static_cast<double>(state.iterations() * steps);
  state.counters["D_ms"] = 1e3 * data / n;
  state.counters["C_ms"] = 1e3 * compute / n;
  state.counters["feed_ms"] = 1e3 * feed / n;
  state.counters["queue_ms"] = 1e3 * queue / n;
  state.counters["feed/(D+C)"] = feed / (data + compute);
  state.counters["queue/max(D,C)"] = queue / std::max(data, compute);
}

// The machine's own share: the data work in one thread and the compute in another, at the same
// time, with no queue between them. If D grows here as it does under QueueInput, the cost is
// the two cores interfering (caches, memory, clocks), not the queue.
void interference(benchmark::State& state) {
  const int passes = passes_for(state.range(0) / 100.0);
  double data_alone = 0, compute_alone = 0, data_together = 0, compute_together = 0;
  for (auto _ : state) {
    data_alone += seconds_of_data(passes);
    compute_alone += seconds_of_compute();
    double d = 0;
    std::thread data_thread([&] { d = seconds_of_data(passes); });
    compute_together += seconds_of_compute();
    data_thread.join();
    data_together += d;
  }
  state.counters["D_together/D_alone"] = data_together / data_alone;
  state.counters["C_together/C_alone"] = compute_together / compute_alone;
}

// --- Fashion-MNIST, the example's model ------------------------------------------------------------

using fashion_mnist::Net;

template <class Input>
double fashion_epoch_seconds(Input input, std::int64_t steps_per_epoch) {
  auto desc = tp::model_desc([] { return Net(); })
                  .tower_function([](const tp::TowerContext&, Net& net, const Example& b) {
                    return torch::nn::functional::cross_entropy(net->forward(b.data), b.target);
                  })
                  .optimizer([](Net& net) { return torch::optim::Adam(net->parameters(), torch::optim::AdamOptions(1e-3)); });
  tp::Trainer trainer(std::move(input), std::move(desc), tp::SingleDevice(), tp::TrainOptions().model_summary(false).intra_op_threads(-1).steps_per_epoch(steps_per_epoch));
  const auto start = clock_type::now();
  trainer.train();
  return std::chrono::duration<double>(clock_type::now() - start).count();
}

void fashion_mnist_epoch(benchmark::State& state) {
  auto train = tp::data::fashion_mnist(tp::data::split::train);
  auto normalized = fashion_mnist::normalize(train.images);
  auto flow = [&] { return tp::data::examples(normalized, train.labels) | tp::data::shuffle(42) | tp::data::batch(64); };
  const std::int64_t epoch = train.images.size(0) / 64;
  double feed = 0, queue = 0;
  for (auto _ : state) {
    feed += fashion_epoch_seconds(tp::FeedInput(flow()), epoch);
    queue += fashion_epoch_seconds(tp::QueueInput(flow()), epoch);
  }
  const double n = static_cast<double>(state.iterations());
  state.counters["feed_epoch_s"] = feed / n;
  state.counters["queue_epoch_s"] = queue / n;
  state.counters["queue/feed"] = queue / feed;
}

BENCHMARK(overlap)->Arg(50)->Arg(200)->ArgName("D_percent_of_C")->Unit(benchmark::kMillisecond)->Iterations(1)->Repetitions(7)
    ->ReportAggregatesOnly(true);
BENCHMARK(interference)->Arg(200)->ArgName("D_percent_of_C")->Unit(benchmark::kMillisecond)->Iterations(1)->Repetitions(7)
    ->ReportAggregatesOnly(true);
BENCHMARK(fashion_mnist_epoch)->Unit(benchmark::kSecond)->Iterations(1)->Repetitions(1);

}  // namespace

int main(int argc, char** argv) {
  // One thread for LibTorch and for OpenBLAS: the two cores are for the step and the data.
  torch::set_num_threads(1);
  if (auto set = reinterpret_cast<void (*)(int)>(dlsym(RTLD_DEFAULT, "openblas_set_num_threads"))) set(1);
  benchmark::Initialize(&argc, argv);
  benchmark::RunSpecifiedBenchmarks();
  benchmark::Shutdown();
}
