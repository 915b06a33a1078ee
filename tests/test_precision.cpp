// What a tower computes in: bf16-mixed precision (autocast in the towers and in validation,
// fp32 weights and gradients), channels-last memory order (weights, and batches converted by
// the input), the intra-op threads option, and the report of what the run uses.
#include <gtest/gtest.h>

#include <sched.h>
#include <sys/resource.h>

#include <optional>
#include <thread>

#include <ATen/Parallel.h>

#include "support.hpp"

using namespace tp_test;

namespace {

// An MLP trained on a fixed regression problem, in the given precision; records the dtype the
// first layer computed in, as the tower function saw it.
struct DtypeSeen {
  std::shared_ptr<std::vector<torch::ScalarType>> seen = std::make_shared<std::vector<torch::ScalarType>>();
};

auto mlp_in(tp::precision p, DtypeSeen seen = {}) {
  return tp::model_desc([] { return MlpHolder(); })
      .tower_function([seen](const tp::TowerContext&, MlpHolder& m, const Batch& b) {
        const auto hidden = m->a->forward(b.data);
        seen.seen->push_back(hidden.scalar_type());
        return torch::mse_loss(m->b->forward(torch::relu(hidden)), b.target);
      })
      .optimizer([](MlpHolder& m) { return torch::optim::SGD(m->parameters(), torch::optim::SGDOptions(0.02).momentum(0.9)); })
      .precision(p);
}

// The cost of every step.
struct Costs {
  std::shared_ptr<std::vector<double>> values = std::make_shared<std::vector<double>>();
  void after_step(auto& t) { values->push_back(t.last_cost().template item<double>()); }
};

}  // namespace

TEST(Precision, NamesParseAndBadOnesAreClearErrors) {
  EXPECT_EQ(tp::parse_precision("bf16-mixed"), tp::precision::bf16_mixed);
  EXPECT_EQ(tp::parse_precision("fp32"), tp::precision::fp32);
  EXPECT_STREQ(tp::precision_name(tp::precision::fp16_mixed), "fp16-mixed");
  try {
    tp::parse_precision("bf16");
    FAIL();
  } catch (const std::invalid_argument& e) {
    EXPECT_STREQ(e.what(), "tp: unknown precision 'bf16'; give fp32, bf16-mixed or fp16-mixed");
  }
  try {
    tp::autocast_scope scope(tp::precision::fp16_mixed, c10::DeviceType::CPU);
    FAIL();
  } catch (const std::invalid_argument& e) {
    EXPECT_NE(std::string(e.what()).find("fp16-mixed precision needs a CUDA tower"), std::string::npos) << e.what();
  }
}

TEST(Precision, AutocastScopesNestAndPutTheStateBack) {
  const auto a = torch::randn({4, 4});
  EXPECT_EQ(torch::mm(a, a).scalar_type(), torch::kFloat);
  {
    const tp::autocast_scope outer(tp::precision::bf16_mixed, c10::DeviceType::CPU);
    EXPECT_EQ(torch::mm(a, a).scalar_type(), torch::kBFloat16);
    {
      const tp::autocast_scope fp32(tp::precision::fp32, c10::DeviceType::CPU);  // does nothing
      EXPECT_EQ(torch::mm(a, a).scalar_type(), torch::kBFloat16);
    }
    EXPECT_EQ(torch::mm(a, a).scalar_type(), torch::kBFloat16);
  }
  EXPECT_EQ(torch::mm(a, a).scalar_type(), torch::kFloat);
}

// The tolerance: over 4 epochs of 10 steps, each epoch's mean cost in bf16-mixed is within 10%
// (+ 0.005) of fp32's. bf16 keeps 8 bits of mantissa, so its products differ from fp32's in
// the third digit, and single steps of a momentum trajectory drift further apart than epochs
// do. Both learn, and the weights and gradients stay fp32.
TEST(Precision, Bf16MixedFollowsFp32WithinAStatedToleranceAndKeepsFp32Weights) {
  DtypeSeen fp32_seen, bf16_seen;
  Costs fp32_costs, bf16_costs;
  auto options = tp::TrainOptions().steps_per_epoch(10).max_epoch(4);
  auto fp32 = tp::Trainer(tp::FeedInput(mlp_flow()), mlp_in(tp::precision::fp32, fp32_seen), tp::SingleDevice(), options, fp32_costs);
  auto bf16 = tp::Trainer(tp::FeedInput(mlp_flow()), mlp_in(tp::precision::bf16_mixed, bf16_seen), tp::SingleDevice(), options, bf16_costs);
  fp32.train();
  bf16.train();
  EXPECT_EQ(fp32_seen.seen->front(), torch::kFloat);
  EXPECT_EQ(bf16_seen.seen->front(), torch::kBFloat16);  // the tower function ran under autocast
  ASSERT_EQ(fp32_costs.values->size(), 40u);
  ASSERT_EQ(bf16_costs.values->size(), 40u);
  auto epoch_mean = [](const std::vector<double>& v, int epoch) {
    double sum = 0;
    for (int i = 0; i < 10; ++i) sum += v[static_cast<std::size_t>(10 * epoch + i)];
    return sum / 10;
  };
  for (int e = 0; e < 4; ++e) {
    const double want = epoch_mean(*fp32_costs.values, e), got = epoch_mean(*bf16_costs.values, e);
    EXPECT_NEAR(got, want, 0.1 * want + 0.005) << "epoch " << e + 1;
  }
  EXPECT_LT(epoch_mean(*bf16_costs.values, 3), 0.5 * epoch_mean(*bf16_costs.values, 0)) << "bf16-mixed did not learn";
  for (const auto& p : bf16.model()->parameters()) {
    EXPECT_EQ(p.scalar_type(), torch::kFloat);
    EXPECT_EQ(p.grad().scalar_type(), torch::kFloat);
  }
}

TEST(Precision, ValidationRunsUnderTheTowersAutocast) {
  auto seen = std::make_shared<torch::ScalarType>(torch::kFloat);
  auto infer = [seen](MlpHolder& m, const Batch& b) {
    const auto hidden = m->a->forward(b.data);
    *seen = hidden.scalar_type();
    return tp::outputs{{"cost", torch::mse_loss(m->b->forward(torch::relu(hidden)).to(torch::kFloat), b.target)}};
  };
  auto trainer = tp::Trainer(tp::FeedInput(mlp_flow()), mlp_in(tp::precision::bf16_mixed), tp::SingleDevice(), tp::TrainOptions().steps_per_epoch(2),
                             tp::InferenceRunner(mlp_flow(), infer, tp::ScalarStats({"cost"}, "val/")));
  trainer.train();
  EXPECT_EQ(*seen, torch::kBFloat16);
  EXPECT_EQ(torch::mm(torch::ones({2, 2}), torch::ones({2, 2})).scalar_type(), torch::kFloat);  // and not after it
}

namespace {
struct RaiseInStep9 {
  void before_step(auto& t) {
    if (t.global_step() == 8) std::raise(SIGTERM);
  }
};
}  // namespace

// A run in bf16-mixed interrupted by a signal and resumed ends with the bits of an uninterrupted one.
TEST(Precision, Bf16MixedResumesExactly) {
  TempDir dir("bf16_resume");
  auto options = tp::TrainOptions().steps_per_epoch(7).max_epoch(3);
  auto run = [&](auto... callbacks) {
    auto t = tp::Trainer(tp::FeedInput(mlp_flow()), mlp_in(tp::precision::bf16_mixed), tp::SingleDevice(), options, callbacks...);
    t.train();
    return weights_of(t);
  };
  std::ostringstream log;
  run(RaiseInStep9{}, tp::ModelSaver(dir.path).log_to(log));
  expect_bitwise_equal(run(tp::ModelSaver(dir.path).log_to(log)), run());
}

namespace {
// A conv net whose tower function records the memory order of the batch it gets.
struct Conv : torch::nn::Module {
  Conv() {
    torch::manual_seed(3);
    conv = register_module("conv", torch::nn::Conv2d(torch::nn::Conv2dOptions(2, 4, 3)));
  }
  torch::nn::Conv2d conv{nullptr};
};
TORCH_MODULE_IMPL(ConvHolder, Conv);

auto conv_desc(std::shared_ptr<std::vector<bool>> channels_last_seen) {
  return tp::model_desc([] { return ConvHolder(); })
      .tower_function([channels_last_seen](const tp::TowerContext&, ConvHolder& m, const Batch& b) {
        channels_last_seen->push_back(b.data.is_contiguous(torch::MemoryFormat::ChannelsLast) && !b.data.is_contiguous());
        return m->conv->forward(b.data).mean();
      })
      .optimizer([](ConvHolder& m) { return torch::optim::SGD(m->parameters(), 0.01); })
      .channels_last();
}

auto image_flow() {
  torch::manual_seed(5);
  return tp::data::examples(torch::randn({16, 2, 6, 6}), torch::zeros({16})) | tp::data::batch(4);
}
}  // namespace

TEST(ChannelsLast, TheModelsWeightsAndEveryInputsBatchesAreChannelsLast) {
  auto seen = std::make_shared<std::vector<bool>>();
  auto options = tp::TrainOptions().steps_per_epoch(3);
  auto queue = tp::Trainer(tp::QueueInput(image_flow()), conv_desc(seen), tp::SingleDevice(), options);
  queue.train();
  EXPECT_TRUE(queue.model()->conv->weight.is_contiguous(torch::MemoryFormat::ChannelsLast));
  EXPECT_FALSE(queue.model()->conv->weight.is_contiguous());
  auto feed = tp::Trainer(tp::FeedInput(image_flow()), conv_desc(seen), tp::SingleDevice(), options);
  feed.train();
  auto dummy = tp::Trainer(tp::DummyInput(*image_flow().begin()), conv_desc(seen), tp::SingleDevice(), options);
  dummy.train();
  EXPECT_EQ(*seen, std::vector<bool>(9, true));
  // The same training in NCHW order gives the same weights (up to the order of additions).
  auto nchw_seen = std::make_shared<std::vector<bool>>();
  auto nchw = tp::Trainer(tp::FeedInput(image_flow()), conv_desc(nchw_seen).channels_last(false), tp::SingleDevice(), options);
  nchw.train();
  EXPECT_EQ(*nchw_seen, std::vector<bool>(3, false));
  EXPECT_TRUE(torch::allclose(nchw.model()->conv->weight, feed.model()->conv->weight, 1e-5, 1e-6));
}

TEST(RunEnvironment, SaysWhatTheRunComputesWith) {
  std::ostringstream out;
  auto trainer = tp::Trainer(tp::FeedInput(mlp_flow()), mlp_in(tp::precision::bf16_mixed), tp::SingleDevice(),
                             tp::TrainOptions().steps_per_epoch(1).intra_op_threads(1), tp::RunEnvironment(out));
  trainer.train();
  const auto said = out.str();
  EXPECT_NE(said.find("tp: CPU "), std::string::npos) << said;
  // Set-up installs OpenBLAS for Debian's LibTorch; PyTorch's own builds link MKL.
  EXPECT_TRUE(said.find("BLAS OpenBLAS") != std::string::npos || said.find("BLAS MKL (in LibTorch)") != std::string::npos) << said;
  EXPECT_EQ(said.find("warning: LibTorch calls neither"), std::string::npos) << said;
  EXPECT_NE(said.find("1 intra-op thread(s)"), std::string::npos) << said;
  EXPECT_NE(said.find("precision bf16-mixed; memory format contiguous"), std::string::npos) << said;
  EXPECT_EQ(at::get_num_threads(), 1);
  try {
    tp::TrainOptions().steps_per_epoch(1).intra_op_threads(-2).validate();
    FAIL();
  } catch (const std::invalid_argument& e) {
    EXPECT_NE(std::string(e.what()).find("intra_op_threads must be >= -1"), std::string::npos);
  }
}

// --- intra-op threads by default ----------------------------------------------------------------

TEST(IntraOpThreads, TheChoiceFollowsTheOptionTheEnvironmentAndTheCores) {
  using tp::detail::choose_intra_op_threads;
  EXPECT_EQ(choose_intra_op_threads(0, nullptr, 8, 1).threads, 8);       // the physical cores
  EXPECT_EQ(choose_intra_op_threads(0, nullptr, 8, 4).threads, 2);       // shared by 4 local ranks
  EXPECT_EQ(choose_intra_op_threads(0, nullptr, 2, 4).threads, 1);       // at least one
  EXPECT_EQ(choose_intra_op_threads(0, "3", 8, 1).threads, 0);           // OMP_NUM_THREADS: LibTorch's
  EXPECT_EQ(choose_intra_op_threads(0, "3", 8, 1).reason, "OMP_NUM_THREADS=3");
  EXPECT_EQ(choose_intra_op_threads(0, "", 8, 1).threads, 8);            // set but empty: not set
  EXPECT_EQ(choose_intra_op_threads(5, "3", 8, 1).threads, 5);           // the option wins
  EXPECT_EQ(choose_intra_op_threads(-1, nullptr, 8, 1).threads, 0);      // left as it is
  EXPECT_NE(choose_intra_op_threads(0, nullptr, 8, 4).reason.find("8 physical core(s) this process may run on, shared by 4 processes"),
            std::string::npos);
}

TEST(IntraOpThreads, PhysicalCoresFollowTheAffinity) {
  const int all = tp::detail::physical_cores_available();
  EXPECT_GE(all, 1);
  EXPECT_LE(all, static_cast<int>(std::thread::hardware_concurrency()));
  int pinned = 0;
  std::thread([&] {  // affinity is per thread: pin a thread of our own to one CPU
    cpu_set_t one;
    CPU_ZERO(&one);
    CPU_SET(sched_getcpu(), &one);
    ASSERT_EQ(sched_setaffinity(0, sizeof(one), &one), 0);
    pinned = tp::detail::physical_cores_available();
  }).join();
  EXPECT_EQ(pinned, 1);
}

namespace {
// Sets or unsets an environment variable for a scope.
struct scoped_env {
  std::string name;
  std::optional<std::string> old;
  scoped_env(std::string n, const char* value) : name(std::move(n)) {
    if (const char* v = std::getenv(name.c_str())) old = v;
    if (value) ::setenv(name.c_str(), value, 1);
    else ::unsetenv(name.c_str());
  }
  ~scoped_env() {
    if (old) ::setenv(name.c_str(), old->c_str(), 1);
    else ::unsetenv(name.c_str());
  }
};
}  // namespace

TEST(IntraOpThreads, TrainUsesThePhysicalCoresUnlessOmpNumThreadsIsSet) {
  const int before = at::get_num_threads();
  {
    scoped_env omp("OMP_NUM_THREADS", nullptr), local("LOCAL_WORLD_SIZE", nullptr), world("WORLD_SIZE", nullptr);
    at::set_num_threads(1);
    std::ostringstream out;
    auto trainer = tp::Trainer(tp::FeedInput(mlp_flow()), mlp_in(tp::precision::fp32), tp::SingleDevice(),
                               tp::TrainOptions().steps_per_epoch(1), tp::RunEnvironment(out));
    trainer.train();
    EXPECT_EQ(at::get_num_threads(), tp::detail::physical_cores_available());
    EXPECT_NE(out.str().find(std::to_string(at::get_num_threads()) + " intra-op thread(s) (tp's default: the "), std::string::npos) << out.str();
    EXPECT_EQ(out.str().find("hint"), std::string::npos) << out.str();
  }
  {
    scoped_env omp("OMP_NUM_THREADS", "1"), local("LOCAL_WORLD_SIZE", nullptr), world("WORLD_SIZE", nullptr);
    at::set_num_threads(1);
    std::ostringstream out;
    auto trainer = tp::Trainer(tp::FeedInput(mlp_flow()), mlp_in(tp::precision::fp32), tp::SingleDevice(),
                               tp::TrainOptions().steps_per_epoch(1), tp::RunEnvironment(out));
    trainer.train();
    EXPECT_EQ(at::get_num_threads(), 1);  // as OMP_NUM_THREADS says (LibTorch read it at start)
    EXPECT_NE(out.str().find("1 intra-op thread(s) (OMP_NUM_THREADS=1)"), std::string::npos) << out.str();
  }
  at::set_num_threads(before);
}

// --- freed memory kept for the next step ----------------------------------------------------------

TEST(FreedMemory, TheChoiceFollowsTheOptionAndTheEnvironment) {
  using tp::detail::choose_freed_memory;
  EXPECT_TRUE(choose_freed_memory(true, nullptr, nullptr, nullptr).set);
  EXPECT_TRUE(choose_freed_memory(true, "", nullptr, "glibc.pthread.rseq=0").set);  // empty, or another tunable: not set
  EXPECT_FALSE(choose_freed_memory(false, nullptr, nullptr, nullptr).set);
  EXPECT_EQ(choose_freed_memory(true, "65536", nullptr, nullptr).reason, "MALLOC_MMAP_THRESHOLD_=65536");
  EXPECT_EQ(choose_freed_memory(true, nullptr, "0", nullptr).reason, "MALLOC_TRIM_THRESHOLD_=0");
  EXPECT_FALSE(choose_freed_memory(true, nullptr, nullptr, "glibc.malloc.trim_threshold=0").set);
}

// Each step holds 16 MiB in 2 MiB blocks and frees them, as a step's activations are. Without
// tp's setting, glibc hands the freed top of its heap back to the system after every step (its
// trim threshold follows the largest block freed, 4 MiB here), and the next step faults in all
// 4096 pages again: 65 thousand faults in these 19 steps with keep_freed_memory(false), 78
// thousand with MALLOC_TRIM_THRESHOLD_=131072.
TEST(FreedMemory, StepsReuseTheMemoryTheStepBeforeFreed) {
#if defined(__SANITIZE_ADDRESS__) || defined(__SANITIZE_THREAD__)
  GTEST_SKIP() << "a sanitizer's allocator keeps freed memory its own way";
#endif
  const auto page_faults = [] {
    rusage usage{};
    getrusage(RUSAGE_SELF, &usage);
    return usage.ru_minflt;
  };
  long at_step_5 = 0, at_step_24 = 0;
  auto trainer = tp_test::make_trainer(tp::TrainOptions().steps_per_epoch(25).max_epoch(1).model_summary(false));
  trainer.train([&](auto& t) {
    std::vector<torch::Tensor> blocks;
    for (int i = 0; i < 8; ++i) blocks.push_back(torch::full({512 * 1024}, float(i)));  // 2 MiB each, every page written
    if (t.global_step() == 5) at_step_5 = page_faults();
    if (t.global_step() == 24) at_step_24 = page_faults();
    return blocks.back().sum();
  });
  EXPECT_LT(at_step_24 - at_step_5, 4096) << "page faults in 19 steps that each reuse 16 MiB: freed memory went back to the system";
}

// --- gradient accumulation -------------------------------------------------------------------

namespace {
// Linear regression on 48 rows, shuffled, in batches of `batch`; plain SGD (no momentum state to
// blur the comparison).
auto regression_flow(std::int64_t batch) {
  torch::manual_seed(8);
  auto x = torch::randn({48, 4});
  auto y = x.matmul(torch::tensor({1.0f, -2.0f, 0.5f, 3.0f}).unsqueeze(1)) + 0.1 * torch::randn({48, 1});
  return tp::data::examples(x, y) | tp::data::shuffle(2) | tp::data::batch(batch);
}

// Sends itself SIGTERM inside the second micro-batch of the step that makes global_step `step`.
struct SignalInMicroBatch {
  std::shared_ptr<int> micro = std::make_shared<int>(0);
  std::int64_t step;
};

auto accumulating_desc(SignalInMicroBatch signal = {{}, -1}) {
  return tp::model_desc([] {
           torch::manual_seed(7);
           return torch::nn::Linear(4, 1);
         })
      .tower_function([signal](const tp::TowerContext&, torch::nn::Linear& m, const Batch& b) {
        if (signal.step > 0 && ++*signal.micro == 3 * (signal.step - 1) + 2) std::raise(SIGTERM);
        return torch::mse_loss(m->forward(b.data), b.target);
      })
      .optimizer([](torch::nn::Linear& m) { return torch::optim::SGD(m->parameters(), 0.05); });
}
}  // namespace

// k micro-batches of b examples make the update of one batch of k·b (mean loss), to 1e-5;
// global_step counts optimizer steps.
TEST(Accumulation, KMicroBatchesGiveTheUpdateOfOneBatchKTimesLarger) {
  auto options = tp::TrainOptions().steps_per_epoch(8).max_epoch(3);  // 24 steps: 6 passes over the data
  auto accumulated = tp::Trainer(tp::FeedInput(regression_flow(4)), accumulating_desc(), tp::SingleDevice().accumulate(3), options);
  auto large = tp::Trainer(tp::FeedInput(regression_flow(12)), accumulating_desc(), tp::SingleDevice(), options);
  accumulated.train();
  large.train();
  EXPECT_EQ(accumulated.global_step(), 24);
  const auto a = accumulated.model()->weight, b = large.model()->weight;
  EXPECT_TRUE(torch::allclose(a, b, 0, 1e-5)) << a << b;
  EXPECT_TRUE(torch::allclose(accumulated.model()->bias, large.model()->bias, 0, 1e-5));
  EXPECT_FALSE(torch::allclose(a, tp::Trainer(tp::FeedInput(regression_flow(4)), accumulating_desc(), tp::SingleDevice(), options).model()->weight))
      << "the comparison cannot tell trained weights from initial ones";
  try {
    tp::SingleDevice().accumulate(0);
    FAIL();
  } catch (const std::invalid_argument& e) {
    EXPECT_STREQ(e.what(), "tp::SingleDevice: accumulate must be >= 1 micro-batch per optimizer step, got 0");
  }
  EXPECT_THROW(tp::Replicated<>::cpu(2).accumulate(-1), std::invalid_argument);
  EXPECT_THROW(tp::ParameterServer<>::cpu(2).accumulate(0), std::invalid_argument);
  EXPECT_THROW(tp::Async::cpu(2).accumulate(0), std::invalid_argument);
}

namespace {
template <class Distribution>
std::pair<torch::Tensor, torch::Tensor> trained_weight_and_bias(std::int64_t batch, Distribution distribution) {
  auto t = tp::Trainer(tp::FeedInput(regression_flow(batch)), accumulating_desc(), std::move(distribution),
                       tp::TrainOptions().steps_per_epoch(8).max_epoch(3));
  t.train();
  EXPECT_EQ(t.global_step(), 24);
  return {t.model()->weight.detach().clone(), t.model()->bias.detach().clone()};
}
void expect_close(const std::pair<torch::Tensor, torch::Tensor>& a, const std::pair<torch::Tensor, torch::Tensor>& b) {
  EXPECT_TRUE(torch::allclose(a.first, b.first, 0, 1e-5)) << a.first << b.first;
  EXPECT_TRUE(torch::allclose(a.second, b.second, 0, 1e-5)) << a.second << b.second;
}
}  // namespace

// The same under the multi-tower policies: 2 towers x 3 micro-batches of 4 give one batch of 24.
// Async is shown with one tower: with several, which stale weights a gradient is computed on
// depends on the threads' timing, so no run of it is reproducible, accumulated or not.
TEST(Accumulation, EveryInProcessPolicyAccumulatesToTheLargeBatchUpdate) {
  const auto large = trained_weight_and_bias(24, tp::SingleDevice());
  expect_close(trained_weight_and_bias(4, tp::Replicated<>::cpu(2).accumulate(3)), large);
  expect_close(trained_weight_and_bias(4, tp::ParameterServer<>::cpu(2).accumulate(3)), large);
  expect_close(trained_weight_and_bias(4, tp::Async::cpu(1).accumulate(3)), trained_weight_and_bias(12, tp::Async::cpu(1)));
  EXPECT_FALSE(torch::allclose(trained_weight_and_bias(4, tp::Replicated<>::cpu(2)).first, large.first, 0, 1e-5))
      << "without accumulation the towers' batches of 4 must give another update";
}

// A step is never cut between micro-batches: a stop signal inside one finishes the step's
// accumulation and update, saves it, and the resumed run ends with the uninterrupted bits.
TEST(Accumulation, ASignalInsideAnAccumulationFinishesItAndResumesExactly) {
  TempDir dir("accumulate_resume");
  auto options = tp::TrainOptions().steps_per_epoch(8).max_epoch(2);
  std::ostringstream log;
  auto run = [&](SignalInMicroBatch signal, auto... saver) {
    auto t = tp::Trainer(tp::FeedInput(regression_flow(4)), accumulating_desc(signal), tp::SingleDevice().accumulate(3), options, saver...);
    const auto outcome = t.train();
    return std::pair{outcome, weights_of(t)};
  };
  const auto [interrupted, ignored] = run({std::make_shared<int>(0), 5}, tp::ModelSaver(dir.path).log_to(log));
  EXPECT_EQ(interrupted.cause, tp::end_cause::signal);
  EXPECT_EQ(interrupted.global_step, 5);
  const auto [resumed, weights] = run({{}, -1}, tp::ModelSaver(dir.path).log_to(log));
  EXPECT_EQ(resumed.cause, tp::end_cause::completed);
  expect_bitwise_equal(weights, run({{}, -1}).second);
}
