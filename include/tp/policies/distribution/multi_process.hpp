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
//   is agreed by all: after a step, through a vote that rides in the next step's own collective
//   (so the ranks stop together one step after the request, two on a GPU, whose votes are read
//   a boundary later rather than waited for; no collective of its own); at an epoch's end, at
//   once. Only rank 0 runs chief-only callbacks (the file writers, so the on-stop checkpoint too).
// - `.shard(tp::sharding::optimizer_state)` (ZeRO stage 1) keeps on each rank the optimizer
//   state of its shard of every gradient bucket only (about 1/N of it, policies/distribution/detail/shard_plan.hpp):
//   the buckets are all-reduced as above, each rank steps its shard, and one all-gather per
//   bucket brings the updated weights to every rank. `.shard(tp::sharding::gradients)` (stage 2)
//   also reduces each shard to its owner only (half an all-reduce's traffic) and keeps only its
//   shard of the gradients (policies/distribution/detail/overlapping_reducer.hpp); gradient processing then sums its
//   norms across the ranks. Each rank writes its shard of the optimizer state as its own part
//   of a checkpoint (tp/checkpoint/files.hpp), and a sharded run resumes unsharded, on another number
//   of ranks, or sharded otherwise (policies/distribution/sharded_optimizer.hpp).
// - At start the ranks check that they built the same model (parameter names and shapes).
// - A collective that fails (a rank died) or times out (a rank stalls; `timeout`, 5 minutes by
//   default) throws on the other ranks with a message that names the ranks that did not answer.
#include <algorithm>
#include <cstdint>
#include <cstring>
#include <chrono>
#include <map>
#include <memory>
#include <optional>
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
#include <tp/checkpoint/state_dict.hpp>
#include <tp/checkpoint/state_tree.hpp>
#include <tp/policies/distribution/detail/keyed_randomness.hpp>
#include <tp/policies/distribution/detail/micro_batches.hpp>
#include <tp/policies/distribution/detail/overlapping_reducer.hpp>
#include <tp/policies/distribution/detail/parameter_units.hpp>
#include <tp/policies/distribution/sharded_optimizer.hpp>
#include <tp/policies/distribution/detail/stop_vote.hpp>
#include <tp/policies/distribution/policy_base.hpp>
#include <tp/policies/distribution/replicas_base.hpp>
#include <tp/policies/distribution/detail/run_tower.hpp>
#include <tp/distributed/environment.hpp>
#include <tp/distributed/rendezvous.hpp>
#include <tp/loss_scaler.hpp>
#include <tp/model_summary.hpp>
#include <tp/tower_context.hpp>

namespace tp {

// What MultiProcess shards across the ranks (ZeRO's stages): nothing, the optimizer state (1),
// the optimizer state and the reduced gradients (2), or those and the parameters of the
// model's tp::Sharded units too (3, FSDP).
enum class sharding { none, optimizer_state, gradients, parameters };

template <class Backend>
class MultiProcess : public detail::policy_base<MultiProcess<Backend>, /*FusesGradients=*/true, /*KeysRandomness=*/true> {
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
  // With .shard(tp::sharding::parameters): gather the next unit's parameters while this one
  // computes (default), or only when it runs (for comparison).
  MultiProcess& prefetch(bool on) {
    prefetch_ = on;
    return *this;
  }
  // With .shard(tp::sharding::parameters): build the model sharded (off by default). Each unit
  // keeps this rank's row of rank 0's values as soon as it is built (a broadcast per unit while
  // the tower's make_model runs), so no rank holds more than one unit whole beyond its rows and
  // the parameters outside units: a model whose whole weights do not fit one rank can be made.
  // The model equals the one a run that builds it whole starts from. Its contract (FSDP's meta-
  // device initialisation has the same): a unit's parameters are initialised while the unit is
  // built (in its block's constructor, or before the block is wrapped); the run refuses a model
  // that writes to them later (an initialisation over the whole model at the end of its
  // constructor, weights loaded in make_model: load them after the trainer is made, with
  // trainer.gather_parameters() first).
  MultiProcess& build_sharded(bool on = true) {
    build_sharded_ = on;
    return *this;
  }
  // With .shard(tp::sharding::parameters): the type units' parameters are gathered in for the
  // steps, torch::kBFloat16 or torch::kHalf (half the bytes; the step computes with the rounded
  // values, as it does under bf16 autocast anyway: FSDP's MixedPrecisionPolicy param_dtype), or
  // torch::kFloat (default, exact). Each rank's rows, what the optimizer steps, stay fp32, and
  // the gradients are reduced as compress_gradients says.
  MultiProcess& compress_parameters(torch::Dtype wire) {
    if (wire != torch::kFloat && wire != torch::kHalf && wire != torch::kBFloat16)
      throw std::invalid_argument(std::string("tp::MultiProcess: compress_parameters takes torch::kBFloat16, torch::kHalf or torch::kFloat (off), not ") +
                                  c10::toString(wire));
    parameter_wire_ = wire;
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
  // Shards the optimizer state (and the gradients) across the ranks (default: none).
  MultiProcess& shard(sharding what) {
    sharding_ = what;
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
          sharding_(options.sharding_),
          model_((connect(), make_model(tower, options.build_sharded_))),
          votes_(device_.is_cuda()) {
      (*model_).to(device_);
      (*model_).train();
      {
        const detail::whole_shaped shapes(*model_);  // built sharded: the optimizer groups parameters by their whole shapes
        this->add_optimizer(tower, model_);
      }
      if (this->update_.gradients().active()) this->names_ = detail::parameter_names(model_);
      if (sharding_ != sharding::none) refuse_tied_parameters();
      const bool to_owners = sharding_ == sharding::gradients || sharding_ == sharding::parameters;
      std::vector<detail::bucket> layout;
      if (sharding_ == sharding::parameters) {
        if constexpr (!detail::replicas_base<Tower>::has_optimizer)
          throw std::invalid_argument(who() + ".shard(tp::sharding::parameters) needs a tower with an optimizer: the sharded parameters "
                                              "are what it steps");
        units_ = std::make_unique<detail::parameter_units>(*model_, group_, env_.rank, env_.world_size, options.prefetch_, options.parameter_wire_);
        layout = units_->layout((*model_).parameters(), this->update_.bucket_bytes());
      }
      reducer_ = std::make_unique<detail::overlapping_reducer>((*model_).parameters(), group_, this->update_.bucket_bytes(),
                                                               options.overlap_, options.wire_, to_owners, std::move(layout));
      reducer_->hook();
      if constexpr (detail::replicas_base<Tower>::has_optimizer) {
        if (sharding_ != sharding::none) {
          auto plan = detail::make_shard_plan(reducer_->layout(), env_.rank, env_.world_size);
          if (to_owners) reducer_->own(plan);
          // This rank's shard of each bucket's averaged gradients: the reducer's own (stage 2), or
          // a view into the all-reduced bucket (stage 1).
          auto shard_gradient = [this, to_owners, plan](std::size_t k) {
            const auto [begin, length] = plan.range(k, plan.rank);
            return to_owners ? reducer_->owned(k) : reducer_->flat(k).narrow(0, begin, length);
          };
          // A unit's bucket: its parameters are sharded, and the optimizer steps this rank's row.
          std::vector<int> unit_of_bucket;
          for (const auto& b : reducer_->layout()) unit_of_bucket.push_back(units_ ? units_->unit_of()[b.parameters.front()] : -1);
          auto row = [this, unit_of_bucket](std::size_t k) {
            return unit_of_bucket[k] < 0 ? torch::Tensor() : units_->shard(static_cast<std::size_t>(unit_of_bucket[k]));
          };
          sharded_ = std::make_unique<detail::sharded_optimizer<optimizer_type>>(
              this->optimizer(), (*model_).parameters(), detail::parameter_names(model_), std::move(plan), reducer_->layout(), shard_gradient, group_, row);
        }
      }
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
    // The gradient bytes this rank keeps between steps (stage 2 keeps its shard only).
    std::int64_t gradient_bytes() const { return reducer_->kept_bytes(); }

    // Every rank starts from rank 0's weights, buffers and optimizer state, once the ranks have
    // checked that they built the same model. (Sharded, each rank keeps its own shard's state:
    // fresh, or from the checkpoint every rank loaded; and its rows of the units' parameters,
    // taken from rank 0's when they are whole, at the first start or after a load.)
    void start() {
      torch::NoGradGuard no_grad;
      check_same_model();
      std::vector<torch::Tensor> tensors;
      for (auto& [name, t] : detail::module_tensors(*model_))
        if (t.numel() > 0) tensors.push_back(t);  // a sharded unit's parameters are empty on every rank
      for (auto& t : tensors) broadcast(t, "the broadcast of rank 0's weights");
      if (units_) units_->shard_whole();
      if constexpr (detail::replicas_base<Tower>::has_optimizer)
        if (!sharded_) broadcast_optimizer(this->optimizer());
      pending_vote_ = 0, vote_carried_ = false;
      (void)votes_.drain();
    }

    template <class Input>
      requires detail::steps_on<Tower, Input>
    torch::Tensor run_step(Tower& tower, Input& input) {
      const TowerContext ctx{.is_training = true, .index = env_.rank, .device = device_, .is_main = env_.rank == 0};
      // Zeroes the gradients (views into the buckets: no optimizer zero_grad); the stop vote of
      // the last boundary rides in the all-reduce.
      reducer_->begin(pending_vote_);
      vote_carried_ = false;
      try {
        if (units_) units_->begin_step();
      } catch (const detail::collective_error& e) {
        fail(e.operation, e);
      }
      const double scale = detail::loss_scale(this->scaler_);
      const auto launched_before = reducer_->launched();
      torch::Tensor cost;
      std::int64_t micro = std::int64_t{env_.rank} * this->micro_batches();  // the global index, as TokenWindows numbers them
      try {
        // The buckets' all-reduces start from the gradient hooks of the last micro-batch's
        // backward: the earlier ones only accumulate.
        cost = detail::over_micro_batches(this->micro_batches(), scale, [&](bool last) {
          const auto batch = detail::next_batch_on(input, device_);
          const detail::keyed_generators keyed(this->update_.keyed_randomness(), device_, this->step_, micro++);
          auto micro_cost = detail::run_tower(tower, ctx, model_, batch);
          if (last) early_all_reduces_ += reducer_->launched() - launched_before;
          reducer_->arm(last);
          return micro_cost;
        });
        TP_PHASE("tp::reduce");  // what backward's all-reduces have left to do
        reducer_->finish();
        if (units_) units_->end_step();
      } catch (const detail::collective_error& e) {
        fail(e.operation, e);
      } catch (const c10::Error& e) {  // a hook's failure, through the autograd engine
        fail("the gradient all-reduce during backward", e);
      }
      ++steps_;
      if (sharding_ == sharding::none || sharding_ == sharding::optimizer_state) vote_carried_ = true, votes_.post(reducer_->vote_slots());
      if (!sharded_) {
        // The reduced gradients are the same on every rank, so the loss scaler's inf check and
        // gradient processing take the same decision everywhere.
        if (!this->process_gradients(model_, scale)) return cost;
        TP_PHASE("tp::optimizer_step");
        this->optimizer().step();
        return cost;
      }
      // Sharded: the whole gradients (stage 1), or this rank's shard of them with their norms
      // summed across the ranks (stage 2), so the decision is the same everywhere.
      bool update = true;
      if (sharding_ == sharding::gradients || sharding_ == sharding::parameters) {
        auto gradients = sharded_->gradients();
        update = this->ready_for_update(gradients, scale, [this](double local) { return sum_one(local, "summing the gradients' norm across ranks"); });
      } else {
        update = this->process_gradients(model_, scale);
      }
      TP_PHASE("tp::optimizer_step");
      // The vote rides in the gather of the updated weights (stages 2 and 3), else the
      // all-reduce carried it; with every parameter in a unit nothing is gathered after the step,
      // and the ranks agree at the boundary in a collective of their own.
      const bool carry_vote = sharding_ == sharding::gradients || sharding_ == sharding::parameters;
      torch::Tensor votes;
      try {
        votes = sharded_->step_and_gather(update, carry_vote, pending_vote_);
      } catch (const detail::collective_error& e) {
        fail(e.operation, e);
      }
      if (carry_vote && votes.defined()) vote_carried_ = true, votes_.post(votes);
      return cost;
    }

    // With tp::sharding::parameters: makes every unit's parameters whole on every rank (every
    // rank calls it at once), until the next step: to read or save the model between steps (a
    // checkpoint does it), or after training. Otherwise the parameters are whole already.
    void gather_parameters() {
      if (!units_) return;
      try {
        units_->gather_whole();
      } catch (const detail::collective_error& e) {
        fail(e.operation, e);
      }
    }
    // Whether the units' parameters are sharded: empty between steps, but after gather_parameters().
    bool parameters_are_sharded() const noexcept { return units_ != nullptr; }
    // What a checkpoint holds of them (checkpoint/detail/parameter_pieces.hpp): this rank's rows, as
    // pieces, in its part; the sharded parameters' names and shapes in rank 0's file.
    c10::impl::GenericList parameter_rows() const { return units_ ? units_->saved_rows() : c10::impl::GenericList(c10::AnyType::get()); }
    c10::impl::GenericDict sharded_parameters() const { return units_ ? units_->sharded_shapes() : state_tree::new_dict(); }
    // Loads the units' parameters from a state_dict's whole tensors (sharded_parameters() names
    // them; their shapes checked by the caller): each rank takes its rows, with no collective.
    void load_sharded_parameters(const c10::impl::GenericDict& weights) {
      if (units_) units_->load_whole([&](const std::string& name) { return weights.at(name).toTensor(); });
    }
    // With tp::sharding::parameters: the bytes of this rank's rows of the units, and the most
    // bytes of whole units' parameters at once since training started (0 otherwise).
    std::int64_t parameter_shard_bytes() const { return units_ ? units_->shard_bytes() : 0; }
    // With build_sharded(): the units built sharded, and the most bytes of one held whole while
    // the model was made (0 otherwise).
    std::int64_t units_built_sharded() const noexcept { return built_units_; }
    std::int64_t largest_unit_built_bytes() const noexcept { return built_unit_bytes_; }
    std::int64_t peak_whole_unit_bytes() const noexcept { return units_ ? units_->peak_bytes() : 0; }
    // The units' all-gathers so far, and the bytes this rank sent in them.
    std::int64_t unit_gathers() const noexcept { return units_ ? units_->gathers() : 0; }
    std::int64_t unit_gather_bytes() const noexcept { return units_ ? units_->sent_bytes() : 0; }

    // Averages the gradients now in .grad across the ranks (what a step does after backward).
    void reduce_gradients() {
      if (sharded_)
        throw std::logic_error("tp::MultiProcess: reduce_gradients() with .shard(): a sharded run steps and gathers its shards in the "
                               "default step; a step function of its own must train unsharded (tp::sharding::none)");
      TP_PHASE("tp::reduce");
      try {
        reducer_->reduce_now();
      } catch (const detail::collective_error& e) {
        fail(e.operation, e);
      }
    }

    // The largest stop code of all ranks (0: none wants to stop): every rank gets the same
    // answer, so that all stop after the same step, for the same reason (see Trainer). After a
    // step (at_epoch_end false) the answer is the vote of the boundary before, which rode in
    // this step's collectives (on a GPU, the one before that: stop_vote::reader), and `mine`
    // rides in the next step's; at an epoch's end (or after a step that reduced nothing) the
    // ranks agree at once, in a collective of its own, on every vote not read yet too.
    int agree_on_stop(int mine, bool at_epoch_end) {
      if (at_epoch_end || !vote_carried_) {
        const int agreed = agree_now(std::max({mine, pending_vote_, votes_.drain()}));
        pending_vote_ = 0, vote_carried_ = false;
        return agreed;
      }
      pending_vote_ = mine, vote_carried_ = false;
      return votes_.at_boundary();
    }
    // Collectives made for the stop agreement alone (one per epoch end, none per step).
    std::int64_t stop_collectives() const noexcept { return stop_collectives_; }
    // The sharded optimizer's all-gathers of updated weights so far (one per bucket per step).
    std::int64_t shard_gathers() const noexcept { return sharded_ ? sharded_->gathers() : 0; }
    // What the model summary's optimizer line adds: whose state it is, when sharded.
    std::string state_share() const {
      if (!sharded_) return {};
      const auto owned = sharded_->plan().owned();
      std::int64_t total = 0;
      for (auto n : sharded_->plan().bucket_numel) total += n;
      // The gradients it keeps, and with sharded parameters its rows of the units and the most of
      // them whole at once in the first step.
      std::string more = "; gradients kept " + detail::human_bytes(static_cast<double>(reducer_->kept_bytes()));
      if (units_)
        more += "; parameters: its rows " + detail::human_bytes(static_cast<double>(units_->shard_bytes())) + ", units whole at most " +
                detail::human_bytes(static_cast<double>(units_->peak_bytes()));
      return " (rank " + std::to_string(env_.rank) + "'s shard: " + std::to_string(owned) + " of " + std::to_string(total) + " parameters" + more + ")";
    }

    // Whether each rank holds only its shard of the optimizer state: a checkpoint is then its
    // ranks' parts (optim/optimizer_pieces.hpp) beside rank 0's file.
    bool state_is_sharded() const noexcept { return sharded_ != nullptr; }
    // Sharded: the groups' options (rank 0 writes them), this rank's part, and the pieces rank r's
    // part holds (what a manifest lists).
    c10::IValue optimizer_options(Tower& tower) {
      if constexpr (detail::replicas_base<Tower>::has_optimizer) return sharded_->options([&] { return fresh_optimizer(tower); });
      else return c10::IValue();
    }
    c10::impl::GenericList optimizer_part() {
      if constexpr (detail::replicas_base<Tower>::has_optimizer) return sharded_->saved_pieces();
      else return c10::impl::GenericList(c10::AnyType::get());
    }
    std::vector<optim::piece> optimizer_part_pieces(int r) const {
      if constexpr (detail::replicas_base<Tower>::has_optimizer) return sharded_->pieces_of(r);
      else return {};
    }
    // Loads a checkpoint's optimizer: load(optimizer) reads a whole optimizer's state into one
    // over the whole model, and a sharded rank keeps its shard of it; or, from a sharded
    // checkpoint, the options and the parts (load_parts(optimizer), unsharded).
    template <class Load>
    void load_checkpoint_optimizer(Tower& tower, Load&& load) {
      if constexpr (detail::replicas_base<Tower>::has_optimizer) {
        if (sharded_) sharded_->load_whole([&] { return fresh_optimizer(tower); }, load);
        else load(this->optimizer());
      }
    }
    template <class Unsharded>
    void load_checkpoint_parts(Tower& tower, const c10::IValue& options, const state_parts& parts, const std::string& source,
                               Unsharded&& unsharded) {
      if constexpr (detail::replicas_base<Tower>::has_optimizer) {
        if (sharded_) sharded_->load_pieces([&] { return fresh_optimizer(tower); }, options, parts, source);
        else unsharded(this->optimizer());
      }
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
    using optimizer_type = typename detail::optimizer_or_none<Tower>::type;

    int agree_now(int mine) {
      ++stop_collectives_;
      auto code = torch::tensor({static_cast<std::int32_t>(mine)}, torch::kInt).to(device_);
      std::vector<torch::Tensor> one{code};
      run(group_->allreduce(one, c10d::AllreduceOptions{c10d::ReduceOp::MAX}), "agreeing on a stop request");
      return code.item<int>();
    }
    double sum_one(double local, const std::string& what) {
      auto t = torch::tensor({local}, torch::kDouble).to(device_);
      std::vector<torch::Tensor> one{t};
      run(group_->allreduce(one), what);
      return t.item<double>();
    }

    // Every rank must have built the same model: a hash of its parameters' names and shapes,
    // whose largest and smallest over the ranks must agree.
    void check_same_model() {
      std::uint64_t h = 1469598103934665603ull;
      auto mix = [&](std::int64_t v) { h = (h ^ static_cast<std::uint64_t>(v)) * 1099511628211ull; };
      for (const auto& item : (*model_).named_parameters()) {
        for (char c : item.key()) mix(c);
        for (auto d : item.value().sizes()) mix(d);
        mix(static_cast<std::int64_t>(item.value().scalar_type()));
      }
      const auto mine = static_cast<std::int64_t>(h >> 2);  // >= 0: its negation is in range
      auto both = torch::tensor({mine, -mine}, torch::kLong).to(device_);
      std::vector<torch::Tensor> one{both};
      run(group_->allreduce(one, c10d::AllreduceOptions{c10d::ReduceOp::MAX}), "comparing the ranks' models");
      both = both.cpu();
      if (both[0].item<std::int64_t>() != mine || -both[1].item<std::int64_t>() != mine)
        throw std::runtime_error(who() + "the ranks built different models (their parameters' names, shapes or types differ): every "
                                         "rank must build the same model (check the program and its flags on every rank)");
    }

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
        const auto why = "cannot connect the " + std::string(Backend::name) + " process group: " + first_line(e.what());
        detail::post_rendezvous_failure(*store_, env_, why);
        throw std::runtime_error(who() + why);
      }
      // No rank goes on (and perhaps ends, refusing the model) while another still connects:
      // that one would see only "Connection closed by peer".
      try {
        detail::join_ranks(*store_, env_, "tp/connected", detail::rendezvous_clock::now() + timeout_, timeout_);
      } catch (const std::invalid_argument&) {
        throw;
      } catch (const std::exception& e) {
        throw std::runtime_error(who() + e.what());
      }
    }

    // A new optimizer over the model (what a checkpoint's optimizer state is read into and
    // written from): its param groups see the sharded parameters' whole shapes.
    auto fresh_optimizer(Tower& tower) {
      if (!units_) return tower.make_optimizer(model_);
      const auto shapes = units_->whole_shaped();
      return tower.make_optimizer(model_);
    }

    // A parameter registered under two names (a module shared by two parents) is listed twice
    // by LibTorch's parameters(), so its optimizer steps it once per name; a sharded optimizer
    // keeps each name's piece apart and would step it otherwise: refused, not trained otherwise.
    void refuse_tied_parameters() const {
      std::map<const void*, std::string> seen;
      for (const auto& item : (*model_).named_parameters()) {
        const auto [at, fresh] = seen.emplace(item.value().unsafeGetTensorImpl(), item.key());
        if (!fresh)
          throw std::invalid_argument(who() + "the model registers one parameter as both " + at->second + " and " + item.key() +
                                      " (a module shared by two parents): LibTorch lists it once per name, so an optimizer steps it once "
                                      "per name, which a sharded optimizer cannot do alike. Register it once (use the shared tensor in "
                                      "forward, as the GPT example ties its embedding), or train this model unsharded");
      }
    }

    // The tower's model; built sharded (build_sharded), each unit keeps its row of rank 0's
    // values once it is built (detail::unit_builder).
    model_type make_model(Tower& tower, bool build_sharded) {
      if (!build_sharded) return tower.make_model();
      if (sharding_ != sharding::parameters)
        throw std::invalid_argument(who() + "build_sharded() builds the units of .shard(tp::sharding::parameters); this run does not shard "
                                            "parameters");
      class row_keeper final : public detail::unit_builder {
       public:
        explicit row_keeper(Replicas& r) : r_(r) {}
        torch::Tensor keep_row(const torch::Tensor& flat) override {
          const auto n = flat.numel(), k = r_.built_units_;
          try {
            // Every rank builds every unit, in the same order: the sizes must agree.
            auto sizes = torch::tensor({n, -n}, torch::kLong).to(r_.device_);
            std::vector<torch::Tensor> one{sizes};
            r_.group_->allreduce(one, c10d::AllreduceOptions{c10d::ReduceOp::MAX})->wait();
            sizes = sizes.cpu();
            if (sizes[0].item<std::int64_t>() != n || -sizes[1].item<std::int64_t>() != n)
              throw std::invalid_argument(r_.who() + "the ranks built unit number " + std::to_string(k) + " with different sizes (" +
                                          std::to_string(n) + " elements here, " + std::to_string(sizes[0].item<std::int64_t>()) +
                                          " on another rank): every rank must build the same model");
            std::vector<torch::Tensor> whole{flat.to(r_.device_)};
            r_.group_->broadcast(whole)->wait();  // rank 0's values
            const auto row = (n + r_.env_.world_size - 1) / r_.env_.world_size;
            const auto begin = std::min<std::int64_t>(n, r_.env_.rank * row), length = std::min(row, n - begin);
            auto mine = torch::zeros({row}, whole[0].options());
            if (length > 0) mine.narrow(0, 0, length).copy_(whole[0].narrow(0, begin, length));
            ++r_.built_units_;
            r_.built_unit_bytes_ = std::max<std::int64_t>(r_.built_unit_bytes_, static_cast<std::int64_t>(whole[0].nbytes()));
            return mine;
          } catch (const std::invalid_argument&) {
            throw;
          } catch (const std::exception& e) {
            throw std::runtime_error(r_.who() + "building unit number " + std::to_string(k) + " sharded failed: " + first_line(e.what()));
          }
        }

       private:
        Replicas& r_;
      } keeper(*this);
      const detail::unit_builder::scope building(&keeper);
      return tower.make_model();
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
    sharding sharding_;
    std::int64_t built_units_ = 0, built_unit_bytes_ = 0;  // build_sharded: units built, the largest's bytes
    model_type model_;
    std::unique_ptr<detail::parameter_units> units_;        // with sharding::parameters; on the heap: the units point at it
    std::unique_ptr<detail::overlapping_reducer> reducer_;  // on the heap: the hooks point at it
    std::int64_t steps_ = 0;
    std::int64_t early_all_reduces_ = 0;
    bool broken_ = false;
    std::unique_ptr<detail::sharded_optimizer<optimizer_type>> sharded_;  // with .shard(): holds pieces of optimizer()
    int pending_vote_ = 0;      // this rank's stop code, to ride in the next step's collectives
    bool vote_carried_ = false;  // whether the last step carried pending_vote_
    std::int64_t stop_collectives_ = 0;
    detail::stop_vote::reader votes_;  // what the steps' collectives agreed on, read without waiting for a device
  };


 private:
  process_environment environment_;
  std::chrono::milliseconds timeout_ = std::chrono::minutes(5);
  bool overlap_ = true;
  bool prefetch_ = true;
  bool build_sharded_ = false;
  torch::Dtype parameter_wire_ = torch::kFloat;
  torch::Dtype wire_ = torch::kFloat;
  sharding sharding_ = sharding::none;
};

}  // namespace tp
