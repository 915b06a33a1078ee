// Multi-process gradients on Gloo, two ranks on this machine (the program starts its second
// rank itself; only rank 0 reports):
//
// - allreduce: 25 MB of gradients (one bucket) averaged through tp (flatten into the bucket,
//   all-reduce, divide, write back into .grad) against the same c10d allreduce called directly on
//   an equally large buffer. Paired, in alternating order; the figure is the median of the
//   pairs' throughput ratio, tp / direct (target >= 0.95).
// - step: a training step of an MLP (8 MB of gradients in 1 MB buckets) with the buckets
//   all-reduced while backward runs, against the same step reducing after backward. Figure:
//   the median of the pairs' time ratio, overlapped / after.
//
// - sharded_step: the same step with Adam, unsharded against .shard(tp::sharding::
//   optimizer_state), .shard(tp::sharding::gradients) and .shard(tp::sharding::parameters)
//   (each Linear a tp::Sharded unit, in every variant), the last with and without prefetching
//   the next unit, in rotating order. Figures: the medians of sharded / unsharded step time,
//   and each rank's Adam state in bytes.
//
// bench/two_hosts.sh runs the step benchmarks between two network namespaces over a
// rate-limited link, with these variables: TP_BENCH_BUCKET_BYTES (default 1 MB),
// TP_BENCH_COMPRESS (fp16: compressed all-reduce) and TP_BENCH_BATCH (default 256).
#include <benchmark/benchmark.h>

#include <algorithm>
#include <chrono>
#include <cstdlib>
#include <iostream>
#include <string>
#include <vector>

#include <sys/wait.h>
#include <unistd.h>

#include <tp/distributed/free_port.hpp>
#include <tp/policies/comm/gloo.hpp>
#include <tp/policies/distribution/multi_process.hpp>
#include <tp/sharded.hpp>
#include <tp/tp.hpp>
#include <tp/distributed.hpp>
#include <torch/torch.h>

namespace {

using clock_type = std::chrono::steady_clock;

double seconds(auto&& f) {
  const auto start = clock_type::now();
  f();
  return std::chrono::duration<double>(clock_type::now() - start).count();
}

tp::process_environment environment() { return tp::read_process_environment(); }

// An MLP; with `units`, each Linear a unit of parameter sharding (a plain Linear elsewhere).
auto desc(std::int64_t width, std::int64_t layers, bool adam = false, bool units = false) {
  return tp::model_desc([=] {
           torch::manual_seed(3);
           torch::nn::Sequential net;
           for (std::int64_t i = 0; i < layers; ++i) {
             if (units) net->push_back(tp::Sharded<torch::nn::Linear>(width, width));
             else net->push_back(torch::nn::Linear(width, width));
             net->push_back(torch::nn::ReLU());
           }
           return net;
         })
      .tower_function([](const tp::TowerContext&, torch::nn::Sequential& m, const torch::data::Example<>& b) {
        return torch::mse_loss(m->forward(b.data), b.target);
      })
      .optimizer([adam](torch::nn::Sequential& m) -> tp::optim::AnyOptimizer {
        if (adam) return torch::optim::Adam(m->parameters(), 1e-4);
        return torch::optim::SGD(m->parameters(), 1e-3);
      });
}


// tp's reduction of ~25 MB of gradients against c10d's allreduce on a buffer of the same size.
void allreduce(benchmark::State& state) {
  static auto tower = desc(1024, 6);  // 6 x (1024 x 1024 + 1024) floats = 25.2 MB
  static auto replicas = tp::MultiProcess<tp::backend::Gloo>(environment()).overlap(false).build(tower);
  static auto group = [] {
    // A second process group over its own store port for the direct calls.
    auto env = environment();
    env.master_port = static_cast<std::uint16_t>(env.master_port + 1);
    c10d::TCPStoreOptions o;
    o.port = env.master_port;
    o.isServer = env.rank == 0;
    o.numWorkers = static_cast<std::size_t>(env.world_size);
    auto store = c10::make_intrusive<c10d::TCPStore>(env.master_addr, o);
    return tp::backend::Gloo::connect(store, env, std::chrono::minutes(2));
  }();
  static auto batch = torch::data::Example<>{torch::randn({32, 1024}), torch::randn({32, 1024})};
  auto& model = replicas.main_model();
  std::int64_t numel = 0;
  for (auto& p : model->parameters()) numel += p.numel();
  auto direct_buffer = torch::randn({numel});
  // Gradients to reduce: one backward, kept.
  torch::mse_loss(model->forward(batch.data), batch.target).backward();
  double tp_seconds = 0, direct_seconds = 0;
  static bool tp_first = true;
  for (auto _ : state) {
    auto through_tp = [&] { replicas.reduce_gradients(); };
    auto direct = [&] {
      std::vector<torch::Tensor> one{direct_buffer};
      group->allreduce(one)->wait();
      direct_buffer.div_(2);
    };
    if (tp_first) {
      tp_seconds += seconds(through_tp);
      direct_seconds += seconds(direct);
    } else {
      direct_seconds += seconds(direct);
      tp_seconds += seconds(through_tp);
    }
    tp_first = !tp_first;
  }
  state.counters["tp_over_direct_throughput"] = direct_seconds / tp_seconds;
  state.counters["MB"] = static_cast<double>(numel * 4) / 1e6;
  state.counters["direct_GBps"] = static_cast<double>(numel * 4) * static_cast<double>(state.iterations()) / direct_seconds / 1e9;
}

std::size_t bucket_bytes() {
  const char* text = std::getenv("TP_BENCH_BUCKET_BYTES");
  return text ? std::stoull(text) : std::size_t{1} << 20;
}
torch::Dtype wire() {
  const char* text = std::getenv("TP_BENCH_COMPRESS");
  return text && std::string(text) == "fp16" ? torch::kHalf : torch::kFloat;
}

// One training step, overlapped and not.
void step(benchmark::State& state) {
  static auto tower = desc(512, 8);  // 8 x (512 x 512 + 512) floats = 8.4 MB
  static auto overlapped = [] {
    auto env = environment();
    env.master_port = static_cast<std::uint16_t>(env.master_port + 2);
    return tp::MultiProcess<tp::backend::Gloo>(env).bucket_bytes(bucket_bytes()).compress_gradients(wire()).build(tower);
  }();
  static auto after = [] {
    auto env = environment();
    env.master_port = static_cast<std::uint16_t>(env.master_port + 3);
    return tp::MultiProcess<tp::backend::Gloo>(env).bucket_bytes(bucket_bytes()).compress_gradients(wire()).overlap(false).build(tower);
  }();
  static const std::int64_t rows = std::getenv("TP_BENCH_BATCH") ? std::stoll(std::getenv("TP_BENCH_BATCH")) : 256;
  static tp::DummyInput input(torch::data::Example<>{torch::randn({rows, 512}), torch::randn({rows, 512})});
  double overlap_seconds = 0, after_seconds = 0;
  static bool overlap_first = true;
  for (auto _ : state) {
    auto a = [&] { overlapped.run_step(tower, input); };
    auto b = [&] { after.run_step(tower, input); };
    if (overlap_first) {
      overlap_seconds += seconds(a);
      after_seconds += seconds(b);
    } else {
      after_seconds += seconds(b);
      overlap_seconds += seconds(a);
    }
    overlap_first = !overlap_first;
  }
  state.counters["overlapped_over_after"] = overlap_seconds / after_seconds;
  state.counters["after_ms"] = 1000 * after_seconds / static_cast<double>(state.iterations());
  state.counters["overlapped_ms"] = 1000 * overlap_seconds / static_cast<double>(state.iterations());
}

// One Adam step, unsharded and sharded three ways (the last with and without prefetch), in
// rotating order.
void sharded_step(benchmark::State& state) {
  static auto tower = desc(512, 8, /*adam=*/true, /*units=*/true);
  auto make = [](int port_offset, tp::sharding shard, bool prefetch = true) {
    auto env = environment();
    env.master_port = static_cast<std::uint16_t>(env.master_port + port_offset);
    return tp::MultiProcess<tp::backend::Gloo>(env).bucket_bytes(bucket_bytes()).compress_gradients(wire()).shard(shard).prefetch(prefetch).build(tower);
  };
  static auto plain = make(4, tp::sharding::none);
  static auto stage1 = make(5, tp::sharding::optimizer_state);
  static auto stage2 = make(6, tp::sharding::gradients);
  static auto stage3 = make(7, tp::sharding::parameters);
  static auto stage3_unfetched = make(8, tp::sharding::parameters, /*prefetch=*/false);
  static const std::int64_t rows = std::getenv("TP_BENCH_BATCH") ? std::stoll(std::getenv("TP_BENCH_BATCH")) : 256;
  static tp::DummyInput input(torch::data::Example<>{torch::randn({rows, 512}), torch::randn({rows, 512})});
  constexpr int variants = 5;
  double t[variants] = {0, 0, 0, 0, 0};
  static int first = 0;
  for (auto _ : state) {
    for (int k = 0; k < variants; ++k) {
      const int which = (first + k) % variants;
      t[which] += seconds([&] {
        if (which == 0) plain.run_step(tower, input);
        else if (which == 1) stage1.run_step(tower, input);
        else if (which == 2) stage2.run_step(tower, input);
        else if (which == 3) stage3.run_step(tower, input);
        else stage3_unfetched.run_step(tower, input);
      });
    }
    first = (first + 1) % variants;
  }
  state.counters["optimizer_state_over_plain"] = t[1] / t[0];
  state.counters["gradients_over_plain"] = t[2] / t[0];
  state.counters["parameters_over_plain"] = t[3] / t[0];
  state.counters["parameters_over_gradients"] = t[3] / t[2];
  state.counters["unprefetched_over_prefetched"] = t[4] / t[3];
  state.counters["plain_ms"] = 1000 * t[0] / static_cast<double>(state.iterations());
  state.counters["plain_state_MB"] = static_cast<double>(tp::detail::state_tensor_bytes(plain.optimizer())) / 1e6;
  state.counters["sharded_state_MB"] = static_cast<double>(tp::detail::state_tensor_bytes(stage1.optimizer())) / 1e6;
}

// Fixed iteration counts: both ranks must make the same collectives.
BENCHMARK(allreduce)->Unit(benchmark::kMillisecond)->Iterations(10)->Repetitions(9);
BENCHMARK(step)->Unit(benchmark::kMillisecond)->Iterations(10)->Repetitions(9);
BENCHMARK(sharded_step)->Unit(benchmark::kMillisecond)->Iterations(10)->Repetitions(9);

class MedianReporter : public benchmark::ConsoleReporter {
 public:
  void ReportRuns(const std::vector<Run>& runs) override {
    for (const auto& run : runs)
      if (run.run_type == Run::RT_Aggregate && run.aggregate_name == "median")
        for (const auto& [name, counter] : run.counters) medians[name] = counter.value;
    ConsoleReporter::ReportRuns(runs);
  }
  std::map<std::string, double> medians;
};


}  // namespace

int main(int argc, char** argv) {
  pid_t second = -1;
  if (!std::getenv("RANK")) {  // started by hand: become rank 0 and start rank 1
    const auto port = std::to_string(tp::free_local_port());  // and the next eight, for the other groups
    ::setenv("WORLD_SIZE", "2", 1);
    ::setenv("MASTER_ADDR", "127.0.0.1", 1);
    ::setenv("MASTER_PORT", port.c_str(), 1);
    second = ::fork();
    ::setenv("RANK", second == 0 ? "1" : "0", 1);
    if (second == 0) {
      ::execv("/proc/self/exe", argv);
      ::_exit(127);
    }
  }
  torch::set_num_threads(1);
  const bool chief = std::string(std::getenv("RANK")) == "0";
  if (!chief) std::cout.setstate(std::ios::failbit);  // rank 1 runs silently
  benchmark::Initialize(&argc, argv);
  MedianReporter reporter;
  benchmark::RunSpecifiedBenchmarks(&reporter);
  if (second > 0) {
    int status = 0;
    ::waitpid(second, &status, 0);
  }
  if (chief)
    std::cout << "\nmedians of the pairs: tp / direct allreduce throughput " << reporter.medians["tp_over_direct_throughput"]
              << "; step overlapped / reduced after backward " << reporter.medians["overlapped_over_after"] << " (" << reporter.medians["overlapped_ms"]
              << " ms / " << reporter.medians["after_ms"] << " ms); sharded step / unsharded: optimizer state "
              << reporter.medians["optimizer_state_over_plain"] << ", gradients " << reporter.medians["gradients_over_plain"] << ", parameters "
              << reporter.medians["parameters_over_plain"] << " (" << reporter.medians["parameters_over_gradients"]
              << " of stage 2's; without prefetch " << reporter.medians["unprefetched_over_prefetched"] << " times as long) ("
              << reporter.medians["plain_ms"] << " ms unsharded; Adam state per rank " << reporter.medians["sharded_state_MB"] << " MB sharded, "
              << reporter.medians["plain_state_MB"] << " MB unsharded)\n";
}
