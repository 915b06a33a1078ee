// Host synchronisation per step on a GPU: each distribution policy's default step, run under
// CUDA's sync debug mode, must not make the host wait for the device (a .item(), a copy to the
// host, a stream sync). Every sync a step makes is caught with its call stack, so a failure
// says where it came from. Steps 1-3 warm up (the caching allocator, cuDNN's choices); the
// mode is on from step 4 until the epoch's last step begins: at an epoch's end MultiProcess
// agrees on a stop at once, a read by design (once an epoch, not a step).
//
// Built and run only where LibTorch has CUDA (scripts/gpu_check.sh, step "sync", which links
// with -rdynamic so that the stacks name tp's functions); type-checked elsewhere by the
// cuda_syntax tests.
#include <gtest/gtest.h>

#include <c10/cuda/CUDAFunctions.h>
#include <c10/util/Backtrace.h>
#include <c10/util/Exception.h>
#include <torch/torch.h>
#include <torch/version.h>

#include <map>
#include <mutex>
#include <sstream>
#include <string>
#include <utility>

#include <tp/distributed.hpp>
#include <tp/distributed/free_port.hpp>
#include <tp/policies/comm/nccl_backend.hpp>
#include <tp/tp.hpp>

namespace {

// Records each synchronising call with its stack; counts repeats of the same stack.
class sync_recorder : public c10::WarningHandler {
 public:
#if TORCH_VERSION_MAJOR >= 2
  void process(const c10::Warning& warning) override { record(warning.msg()); }
#else
  void process(const c10::SourceLocation&, const std::string& msg, bool) override { record(msg); }
#endif
  std::string report() const {
    std::ostringstream out;
    for (const auto& [stack, count] : sites_) out << count << " time(s):\n" << stack << "\n";
    return out.str();
  }
  std::size_t count() const {
    std::size_t n = 0;
    for (const auto& site : sites_) n += site.second;
    return n;
  }

 private:
  void record(const std::string& msg) {
    if (msg.find("synchroniz") == std::string::npos) return;
    const std::lock_guard lock(mutex_);
    ++sites_[c10::get_backtrace(/*frames_to_skip=*/3, /*maximum_number_of_frames=*/24, /*skip_python_frames=*/true)];
  }
  std::mutex mutex_;
  std::map<std::string, std::size_t> sites_;
};

// LibTorch 2 moved the global warning handler from c10::Warning to c10::WarningUtils.
#if TORCH_VERSION_MAJOR >= 2
namespace warnings = c10::WarningUtils;
#else
namespace warnings = c10::Warning;
#endif

constexpr std::int64_t steps = 12;

// Turns the sync debug mode on before step 4 and off before the last.
struct sync_watch {
  sync_recorder* recorder;
  c10::WarningHandler* previous = nullptr;
  void before_step(auto& trainer) {
    if (trainer.global_step() == 3) {
      torch::cuda::synchronize();
      previous = warnings::get_warning_handler();
      warnings::set_warning_handler(recorder);
      c10::cuda::warning_state().set_sync_debug_mode(c10::cuda::SyncDebugMode::L_WARN);
    } else if (trainer.global_step() == steps - 1) {
      off();
    }
  }
  void after_train(auto&) { off(); }
  void off() {
    c10::cuda::warning_state().set_sync_debug_mode(c10::cuda::SyncDebugMode::L_DISABLED);
    if (previous) warnings::set_warning_handler(std::exchange(previous, nullptr));
  }
};

struct NetImpl : torch::nn::Module {
  torch::nn::Conv2d conv1{torch::nn::Conv2dOptions(1, 8, 3).padding(1)};
  torch::nn::Linear fc{8 * 14 * 14, 10};
  NetImpl() {
    register_module("conv1", conv1);
    register_module("fc", fc);
  }
  torch::Tensor forward(torch::Tensor x) { return fc(torch::max_pool2d(torch::relu(conv1(x)), 2).flatten(1)); }
};
TORCH_MODULE(Net);

auto desc(tp::precision precision = tp::precision::fp32) {
  return tp::model_desc([] { return Net(); })
      .tower_function([](const tp::TowerContext&, Net& net, const torch::data::Example<>& b) {
        return torch::nn::functional::cross_entropy(net->forward(b.data), b.target);
      })
      .optimizer([](Net& net) { return torch::optim::Adam(net->parameters(), 1e-3); })
      .precision(precision);
}

torch::data::Example<> batch(torch::Device device) {
  return {torch::randn({32, 1, 28, 28}).to(device), torch::randint(0, 10, {32}, torch::kLong).to(device)};
}

// Trains `steps` steps with this input and policy; returns the syncs of steps 4 on.
template <class Input, class Policy, class Desc>
std::string syncs_of(Input input, Desc d, Policy policy) {
  sync_recorder recorder;
  tp::Trainer trainer(std::move(input), std::move(d), std::move(policy), tp::TrainOptions().steps_per_epoch(steps).max_epoch(1).model_summary(false),
                      sync_watch{&recorder});
  trainer.train();
  torch::cuda::synchronize();
  return recorder.count() == 0 ? std::string() : std::to_string(recorder.count()) + " sync(s) in " + std::to_string(steps - 4) + " steps:\n" + recorder.report();
}

class CudaSync : public ::testing::Test {
 protected:
  void SetUp() override {
    if (!torch::cuda::is_available()) GTEST_SKIP() << "no CUDA device";
  }
  const torch::Device gpu{torch::kCUDA, 0};
};

TEST_F(CudaSync, SingleDevice) { EXPECT_EQ(syncs_of(tp::DummyInput(batch(gpu)), desc(), tp::SingleDevice(gpu)), ""); }

TEST_F(CudaSync, SingleDeviceBf16) {
  EXPECT_EQ(syncs_of(tp::DummyInput(batch(gpu)), desc(tp::precision::bf16_mixed), tp::SingleDevice(gpu)), "");
}

TEST_F(CudaSync, SingleDeviceClipped) {
  EXPECT_EQ(syncs_of(tp::DummyInput(batch(gpu)), desc(), tp::SingleDevice(gpu).gradients(tp::GradientProcessing().clip_global_norm(1.0))), "");
}

TEST_F(CudaSync, SingleDeviceAccumulated) {
  EXPECT_EQ(syncs_of(tp::DummyInput(batch(gpu)), desc(), tp::SingleDevice(gpu).accumulate(2)), "");
}

TEST_F(CudaSync, StagingInput) {
  EXPECT_EQ(syncs_of(tp::StagingInput(tp::DummyInput(batch(torch::kCPU)), gpu), desc(), tp::SingleDevice(gpu)), "");
}

TEST_F(CudaSync, ReplicatedNccl) { EXPECT_EQ(syncs_of(tp::DummyInput(batch(gpu)), desc(), tp::Replicated<tp::NCCL>({gpu})), ""); }

TEST_F(CudaSync, ParameterServerOnTheGpu) {
  EXPECT_EQ(syncs_of(tp::DummyInput(batch(gpu)), desc(), tp::ParameterServer<tp::GPU>({gpu}, tp::GPU{0})), "");
}

TEST_F(CudaSync, MultiProcessNccl) {
  tp::process_environment env;
  env.master_port = static_cast<std::uint16_t>(tp::free_local_port());
  EXPECT_EQ(syncs_of(tp::DummyInput(batch(gpu)), desc(), tp::MultiProcess<tp::backend::NCCL>(env)), "");
}

// fp16 with loss scaling: whether to skip an update is read once per step (inherent: the
// update is skipped or not), and nothing else.
TEST_F(CudaSync, Fp16LossScalingReadsOncePerStep) {
  const auto report = syncs_of(tp::DummyInput(batch(gpu)), desc(tp::precision::fp16_mixed), tp::SingleDevice(gpu));
  const auto count = report.empty() ? 0 : std::stoul(report);
  EXPECT_LE(count, static_cast<unsigned long>(steps - 4)) << report;
}

}  // namespace
