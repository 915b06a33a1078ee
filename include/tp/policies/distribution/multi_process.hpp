#pragma once
// MultiProcess<Backend>: one process per device, Horovod style (docs/DESIGN.md, "Many processes"). Every process runs
// the same program and trains its own replica on its own batches (shard the dataflow with
// tp::data::shard); their gradients are averaged by all-reduce, so every replica makes the same
// update. Backend: tp::backend::Gloo (CPU, c10d ProcessGroupGloo) or, with CUDA, NCCL.
//
//   tp::Trainer trainer(tp::FeedInput(flow | tp::data::shard(env.rank, env.world_size) | tp::data::batch(64)),
//                       desc, tp::MultiProcess<tp::backend::Gloo>(), options, callbacks...);
//
// - Rendezvous: the environment of tp-run, torchrun, mpirun or SLURM (tp/distributed/environment.hpp),
//   through c10d's TCP store on MASTER_ADDR:MASTER_PORT, which rank 0 hosts.
// - At the start of train() (so after a resume too) rank 0's weights, buffers and optimizer
//   state are broadcast to every rank.
// - Gradients are fused into buckets (25 MB by default) and all-reduced while backward runs,
//   in the same order on every rank; the parameters' gradients are views into the buckets (no
//   copies). Gradient processing then runs on the averages, so a NaN policy decides the same
//   everywhere. `.compress_gradients(torch::kHalf)` sends them as fp16 (half the bytes, for a
//   slow link; bf16 on NCCL, and on Gloo from LibTorch 2.x), averaged back into fp32.
// - A stop requested on any rank (request_stop, EarlyStopping, a stop signal, the time budget)
//   is agreed by all before the next step; only rank 0 runs chief-only callbacks (the file
//   writers, so the on-stop checkpoint too).
// - A collective that fails (a rank died) or times out (a rank stalls; `timeout`, 5 minutes by
//   default) throws on the other ranks with a message that names the ranks that did not answer.
#include <algorithm>
#include <cstdint>
#include <cstring>
#include <chrono>
#include <memory>
#include <sstream>
#include <stdexcept>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include <torch/serialize/input-archive.h>
#include <torch/serialize/output-archive.h>
#include <torch/types.h>
#include <torch/version.h>

#include <tp/batch.hpp>
#include <tp/concepts/tower.hpp>
#include <tp/detail/archive.hpp>
#include <tp/detail/micro_batches.hpp>
#include <tp/detail/overlapping_reducer.hpp>
#include <tp/policies/distribution/policy_base.hpp>
#include <tp/policies/distribution/replicas_base.hpp>
#include <tp/detail/run_tower.hpp>
#include <tp/distributed/environment.hpp>
#include <tp/distributed/rendezvous.hpp>
#include <tp/loss_scaler.hpp>
#include <tp/tower_context.hpp>

namespace tp {

template <class Backend>
class MultiProcess : public detail::policy_base<MultiProcess<Backend>, /*FusesGradients=*/true> {
 public:
  static constexpr const char* policy_name = "MultiProcess";

  // The process's place from the environment (or given, e.g. by a test).
  explicit MultiProcess(process_environment environment = read_process_environment()) : environment_(std::move(environment)) {}

  // How long a collective or the rendezvous may wait for the other ranks (default 5 minutes).
  MultiProcess& timeout(std::chrono::milliseconds t) {
    if (t.count() <= 0) throw std::invalid_argument("tp::MultiProcess: the timeout must be > 0");
    timeout_ = t;
    return *this;
  }
  // All-reduce buckets while backward runs (default) or only after it (for comparison).
  MultiProcess& overlap(bool on) {
    overlap_ = on;
    return *this;
  }
  // The gradients' type on the wire: torch::kFloat (default, as they are), torch::kHalf or
  // torch::kBFloat16 (DDP's fp16_compress_hook and bf16_compress_hook).
  MultiProcess& compress_gradients(torch::Dtype wire) {
    if (wire != torch::kFloat && wire != torch::kHalf && wire != torch::kBFloat16)
      throw std::invalid_argument(std::string("tp::MultiProcess: compress_gradients takes torch::kHalf, torch::kBFloat16 or torch::kFloat (off), not ") +
                                  c10::toString(wire));
#if TORCH_VERSION_MAJOR < 2
    if (wire == torch::kBFloat16 && std::string_view(Backend::name) == "gloo")
      throw std::invalid_argument("tp::MultiProcess: LibTorch 1.x's Gloo cannot sum bf16 (LibTorch 2.x's can); compress_gradients(torch::kHalf) "
                                  "halves the bytes as well");
#endif
    wire_ = wire;
    return *this;
  }
  const process_environment& environment() const noexcept { return environment_; }

  // This process's model and optimizer (none for a tower without one), the process group, and
  // the default step. With gradient accumulation, one all-reduce of the accumulated gradients a
  // step (after the last micro-batch's backward; none before it).
  template <class Tower>
  class Replicas : public detail::replicas_base<Tower> {
   public:
    using model_type = model_t<Tower>;

    Replicas(Tower& tower, const MultiProcess& options)
        : detail::replicas_base<Tower>(tower, options.update()),
          env_(options.environment_),
          timeout_(options.timeout_),
          device_(Backend::device(env_)),
          model_((connect(), tower.make_model())) {
      (*model_).to(device_);
      (*model_).train();
      this->add_optimizer(tower, model_);
      if (this->update_.gradients().active()) this->names_ = detail::parameter_names(model_);
      reducer_ = std::make_unique<detail::overlapping_reducer>((*model_).parameters(), group_, this->update_.bucket_bytes(),
                                                               options.overlap_, options.wire_);
      reducer_->hook();
    }
    Replicas(Replicas&&) noexcept = default;
    ~Replicas() {
      // After a failed collective a dead peer's sockets may never close cleanly: let the
      // process's exit reclaim them rather than wait in the group's destructor.
      if (broken_) {
        (void)group_.release();
        (void)store_.release();
      }
    }

    model_type& main_model() noexcept { return model_; }
    bool is_chief() const noexcept { return env_.rank == 0; }
    int rank() const noexcept { return env_.rank; }
    int world_size() const noexcept { return env_.world_size; }
    torch::Device device() const noexcept { return device_; }
    std::size_t buckets() const noexcept { return reducer_->buckets(); }
    // Gradient all-reduces launched so far (one per bucket per optimizer step), and how many of
    // them were launched before a step's last micro-batch (none should be).
    std::int64_t gradient_all_reduces() const noexcept { return reducer_->launched(); }
    std::int64_t early_gradient_all_reduces() const noexcept { return early_all_reduces_; }

    // Every rank starts from rank 0's weights, buffers and optimizer state.
    void start() {
      torch::NoGradGuard no_grad;
      std::vector<torch::Tensor> tensors;
      for (auto& [name, t] : detail::module_tensors(*model_)) tensors.push_back(t);
      for (auto& t : tensors) broadcast(t, "the broadcast of rank 0's weights");
      if constexpr (detail::replicas_base<Tower>::has_optimizer) broadcast_optimizer(this->optimizer());
    }

    template <class Input>
      requires detail::steps_on<Tower, Input>
    torch::Tensor run_step(Tower& tower, Input& input) {
      const TowerContext ctx{.is_training = true, .index = env_.rank, .device = device_, .is_main = env_.rank == 0};
      reducer_->begin();  // zeroes the gradients (views into the buckets: no optimizer zero_grad)
      const double scale = detail::loss_scale(this->scaler_);
      const auto launched_before = reducer_->launched();
      torch::Tensor cost;
      try {
        // The buckets' all-reduces start from the gradient hooks of the last micro-batch's
        // backward: the earlier ones only accumulate.
        cost = detail::over_micro_batches(this->micro_batches(), scale, [&](bool last) {
          const auto batch = detail::next_batch_on(input, device_);
          auto micro_cost = detail::run_tower(tower, ctx, model_, batch);
          if (last) early_all_reduces_ += reducer_->launched() - launched_before;
          reducer_->arm(last);
          return micro_cost;
        });
        TP_PHASE("tp::reduce");  // what backward's all-reduces have left to do
        reducer_->finish();
      } catch (const detail::collective_error& e) {
        fail(e.operation, e);
      } catch (const c10::Error& e) {  // a hook's failure, through the autograd engine
        fail("the gradient all-reduce during backward", e);
      }
      ++steps_;
      // The reduced gradients are the same on every rank, so the loss scaler's inf check and
      // gradient processing take the same decision everywhere.
      if (!this->process_gradients(model_, scale)) return cost;
      TP_PHASE("tp::optimizer_step");
      this->optimizer().step();
      return cost;
    }

    // Averages the gradients now in .grad across the ranks (what a step does after backward).
    void reduce_gradients() {
      TP_PHASE("tp::reduce");
      try {
        reducer_->reduce_now();
      } catch (const detail::collective_error& e) {
        fail(e.operation, e);
      }
    }

    // The largest stop code of all ranks (0: none wants to stop): every rank gets the same
    // answer, so that all stop after the same step, for the same reason (see Trainer).
    int agree_on_stop(int mine) {
      auto code = torch::tensor({static_cast<std::int32_t>(mine)}, torch::kInt).to(device_);
      std::vector<torch::Tensor> one{code};
      run(group_->allreduce(one, c10d::AllreduceOptions{c10d::ReduceOp::MAX}), "agreeing on a stop request");
      return code.item<int>();
    }
    // Sums values across the ranks, in place.
    void sum_across_processes(std::vector<double>& values) {
      if (values.empty()) return;
      auto t = torch::tensor(values, torch::kDouble).to(device_);
      std::vector<torch::Tensor> one{t};
      run(group_->allreduce(one), "summing scalars across ranks");
      t = t.cpu();
      for (std::size_t i = 0; i < values.size(); ++i) values[i] = t[static_cast<std::int64_t>(i)].item<double>();
    }

   private:
    void connect() {
      try {
        store_ = detail::connect_store(env_, timeout_);
      } catch (const std::invalid_argument&) {
        throw;  // a bad variable: its message already says which and what to do
      } catch (const std::exception& e) {
        throw std::runtime_error(who() + e.what());
      }
      try {
        group_ = Backend::connect(store_, env_, timeout_);
      } catch (const std::exception& e) {
        throw std::runtime_error(who() + "cannot connect the " + std::string(Backend::name) + " process group: " + first_line(e.what()));
      }
    }

    // Rank 0's optimizer state, serialized, to every rank.
    template <class Optimizer>
    void broadcast_optimizer(Optimizer& optimizer) {
      std::string bytes;
      if (env_.rank == 0) {
        torch::serialize::OutputArchive archive;
        optimizer.save(archive);
        std::ostringstream out;
        archive.save_to(out);
        bytes = out.str();
      }
      // Through the backend's device (NCCL moves only GPU tensors).
      auto size = torch::tensor({static_cast<std::int64_t>(bytes.size())}).to(device_);
      broadcast(size, "the broadcast of rank 0's optimizer state");
      auto data = torch::empty({size.item<std::int64_t>()}, torch::kUInt8);
      if (env_.rank == 0) std::memcpy(data.data_ptr(), bytes.data(), bytes.size());
      data = data.to(device_);
      broadcast(data, "the broadcast of rank 0's optimizer state");
      data = data.cpu();
      if (env_.rank != 0) {
        torch::serialize::InputArchive archive;
        archive.load_from(static_cast<const char*>(data.data_ptr()), static_cast<std::size_t>(data.numel()));
        optimizer.load(archive);
      }
    }

    void broadcast(torch::Tensor& t, const std::string& what) {
      std::vector<torch::Tensor> one{t};
      run(group_->broadcast(one), what);
    }
    void run(const c10::intrusive_ptr<c10d::Work>& work, const std::string& what) {
      try {
        work->wait();
      } catch (const std::exception& e) {
        fail(what, e);
      }
    }

    // A collective failed: find which ranks are gone, and say so.
    [[noreturn]] void fail(const std::string& what, const std::exception& e) {
      broken_ = true;
      throw std::runtime_error(who() + what + " at step " + std::to_string(steps_) + " failed: " + first_line(e.what()) + "; " +
                               missing_ranks());
    }

    // Every rank that sees the failure reports to the store; those that do not report within a
    // few seconds are named.
    std::string missing_ranks() {
      const auto window = std::min<std::chrono::milliseconds>(timeout_, std::chrono::seconds(10));
      const std::string prefix = "tp/failure/" + std::to_string(steps_) + "/";
      std::vector<int> missing;
      try {
        store_->set(prefix + std::to_string(env_.rank), std::vector<std::uint8_t>{1});
        const auto deadline = std::chrono::steady_clock::now() + window;
        for (int r = 0; r < env_.world_size; ++r) {
          if (r == env_.rank) continue;
          const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(deadline - std::chrono::steady_clock::now());
          try {
            store_->wait({prefix + std::to_string(r)}, std::max(left, std::chrono::milliseconds(1)));
          } catch (const std::exception&) {
            missing.push_back(r);
          }
        }
      } catch (const std::exception&) {
        return "rank 0, which hosts the rendezvous store at " + address() + ", cannot be reached: it has died or stalls";
      }
      if (missing.empty()) return "every rank saw it fail too";
      std::string list;
      for (int r : missing) list += (list.empty() ? "" : ", ") + std::to_string(r);
      return std::string(missing.size() == 1 ? "rank " : "ranks ") + list + " did not answer within " + detail::seconds_text(window) +
             ": it has died or stalls (see its own output)";
    }

    std::string who() const { return "tp::MultiProcess (rank " + std::to_string(env_.rank) + " of " + std::to_string(env_.world_size) + "): "; }
    std::string address() const { return env_.master_addr + ":" + std::to_string(env_.master_port); }
    static std::string first_line(const std::string& text) { return text.substr(0, text.find('\n')); }

    process_environment env_;
    std::chrono::milliseconds timeout_;
    torch::Device device_;
    c10::intrusive_ptr<c10d::Store> store_;
    c10::intrusive_ptr<detail::collective_group> group_;
    model_type model_;
    std::unique_ptr<detail::overlapping_reducer> reducer_;  // on the heap: the hooks point at it
    std::int64_t steps_ = 0;
    std::int64_t early_all_reduces_ = 0;
    bool broken_ = false;
  };

  template <class Tower>
  using Replica = Replicas<Tower>;  // the old name

 private:
  process_environment environment_;
  std::chrono::milliseconds timeout_ = std::chrono::minutes(5);
  bool overlap_ = true;
  torch::Dtype wire_ = torch::kFloat;
};

}  // namespace tp
