#pragma once
// The parameters of a parameter-sharded run (tp::sharding::parameters, ZeRO stage 3, FSDP): the
// model's tp::Sharded units (tp/sharded.hpp), each flattened, its elements cut into N equal rows
// (policies/distribution/detail/shard_plan.hpp's cut, one unit a bucket), rank r keeping row r.
// The row is the truth: the sharded optimizer steps it in place.
//
// A unit's whole parameters are views into one flat buffer, whose memory exists only while it
// is gathered (the storage is given back and taken again, as FSDP resizes its storage to 0, so
// that the tensors autograd saved in forward, views into it, see the values again in backward):
// - forward: before the unit runs, its all-gather is waited for (or made), and the next unit's
//   (the one that followed it in the last step) is started, so it travels while this one
//   computes; after it runs, the buffer goes and its parameters become empty tensors.
// - backward: a hook on the unit's output gathers again just before backward reaches the unit,
//   and starts the gather of the unit that came before it in forward; once the gradients of all
//   its trainable parameters are in, the buffer goes again. (The gradients themselves are the
//   reducer's: each unit is a bucket reduced to its owners, overlapping_reducer.hpp.)
// So a rank holds its rows, the parameters outside every unit (whole), and at most two units'
// whole parameters in training (the one running and the one prefetched).
//
// With a wire type (bf16, FSDP's MixedPrecisionPolicy param_dtype), training's gathers send each
// row rounded to it (half the bytes) and the whole parameters are those rounded values, in the
// parameters' own type: what a bf16-autocast step computes with anyway. The rows stay exact, as
// do the gathers between steps (what checkpoints save).
//
// A unit run twice in one forward gathers twice; a recomputed one (tp::recompute around it, or
// inside it) gathers again for the recomputation. A prefetched unit that does not run is
// released when the step ends. Between steps, gather_whole() (every rank at once) makes every unit whole
// until the next step or start: what a checkpoint reads and loads; shard_whole() takes each whole
// unit's row back from its parameters (they may have been loaded) and releases them.
#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <stdexcept>
#include <string>
#include <utility>
#include <vector>

#include <c10/core/StorageImpl.h>
#include <c10/util/accumulate.h>
#include <torch/csrc/autograd/function.h>
#include <torch/csrc/autograd/function_hook.h>
#include <torch/csrc/autograd/variable.h>
#include <torch/nn/module.h>
#include <torch/types.h>

#include <tp/checkpoint/detail/parameter_pieces.hpp>
#include <tp/checkpoint/state_tree.hpp>
#include <tp/policies/distribution/detail/collective_group.hpp>
#include <tp/policies/distribution/detail/gradient_buckets.hpp>
#include <tp/policies/distribution/detail/unit_runtime.hpp>

namespace tp::detail {

class parameter_units final : public unit_runtime {
 public:
  // Finds the units of `model` (its parameters are `model.parameters()`, in that order) and
  // flattens each; throws std::invalid_argument for a model without units or a unit inside another.
  // Without `prefetch`, a unit is gathered only when it runs (the baseline of the benchmark).
  parameter_units(torch::nn::Module& model, c10::intrusive_ptr<collective_group> group, int rank, int world, bool prefetch = true,
                  torch::Dtype wire = torch::kFloat)
      : group_(std::move(group)), rank_(rank), world_(world), prefetch_(prefetch), wire_(wire) {
    std::vector<std::pair<std::string, sharded_unit*>> found;
    for (const auto& item : model.named_modules("", /*include_self=*/true))
      if (auto* u = dynamic_cast<sharded_unit*>(item.value().get())) found.emplace_back(item.key(), u);
    if (found.empty())
      throw std::invalid_argument("tp::MultiProcess: .shard(tp::sharding::parameters) found no unit in the model: wrap each block whose "
                                  "parameters are to be sharded in tp::Sharded<Block> (tp/sharded.hpp), as FSDP's fully_shard is "
                                  "applied per block");
    for (const auto& [outer, a] : found)
      for (const auto& [inner, b] : found)
        if (a != b && (outer.empty() || inner.starts_with(outer + ".")))
          throw std::invalid_argument("tp::MultiProcess: unit '" + inner + "' is inside unit '" + label(outer) +
                                      "': a parameter is sharded by one unit only; keep tp::Sharded on one of the two");
    // Each parameter's unit: the one its name is under (a parameter registered under two names
    // is refused before this: MultiProcess's refuse_tied_parameters).
    const auto named = model.named_parameters();
    std::vector<int> under(named.size(), -1);
    for (std::size_t i = 0; i < named.size(); ++i)
      for (std::size_t u = 0; u < found.size(); ++u)
        if (found[u].first.empty() || named[i].key().starts_with(found[u].first + ".")) under[i] = static_cast<int>(u);
    unit_of_.assign(named.size(), -1);
    units_.resize(found.size());
    for (std::size_t i = 0; i < named.size(); ++i) {
      if (under[i] < 0) continue;  // outside every unit: whole
      const auto& built = found[static_cast<std::size_t>(under[i])].second->built();
      auto& u = units_[static_cast<std::size_t>(under[i])];
      const auto j = u.parameters.size();
      if (built && (j >= built->shapes.size() || named[i].value()._version() != built->versions[j]))
        throw std::invalid_argument("tp::MultiProcess: the model wrote to " + named[i].key() + " after its unit was built sharded (an "
                                    "initialisation over the whole model, or weights loaded while making it): built sharded, each "
                                    "unit keeps only its row once it is built. Initialise a block's parameters in its own constructor, "
                                    "load weights after the trainer is made (trainer.gather_parameters(), then load), or build the "
                                    "model whole (build_sharded(false))");
      u.members.parameters.push_back(i);
      u.shapes.push_back(built ? built->shapes[j] : named[i].value().sizes().vec());
      u.members.sizes.push_back(c10::multiply_integers(u.shapes.back()));
      u.parameters.push_back(named[i].value());
      u.names.push_back(named[i].key());
      unit_of_[i] = under[i];
    }
    torch::NoGradGuard no_grad;
    for (std::size_t k = 0; k < units_.size(); ++k) {
      auto& u = units_[k];
      u.name = label(found[k].first);
      const auto& built = found[k].second->built();
      if (built && u.parameters.size() != built->shapes.size())
        throw std::invalid_argument("tp::MultiProcess: unit '" + u.name + "' was built sharded with " + std::to_string(built->shapes.size()) +
                                    " parameters but has " + std::to_string(u.parameters.size()) + " now: build the model whole "
                                    "(build_sharded(false)) to change a unit after it is built");
      if (u.parameters.empty()) continue;  // nothing of its own to shard: it runs as its block
      for (const auto& p : u.parameters)
        if (p.scalar_type() != u.parameters.front().scalar_type() || p.device() != u.parameters.front().device())
          throw std::invalid_argument("tp::MultiProcess: unit '" + u.name + "' mixes parameter types or devices; a unit is one flat "
                                      "buffer: make its parameters one type on one device");
      for (auto n : u.members.sizes) u.numel += n;
      u.row = (u.numel + world_ - 1) / world_;
      const auto options = u.parameters.front().options().requires_grad(false);
      if (built) {  // its row kept when it was built (on the device and in the type the model has now); never whole since
        if (built->row.numel() != u.row)
          throw std::logic_error("tp::MultiProcess: unit '" + u.name + "' was built with a row of " + std::to_string(built->row.numel()) +
                                 " elements, not " + std::to_string(u.row));
        u.shard = built->row.to(options, /*non_blocking=*/false, /*copy=*/true);
        u.full = torch::empty({0}, options);
        u.full.unsafeGetTensorImpl()->set_sizes_contiguous({u.row * world_});  // its memory comes with its first gather
        u.now = state::released;
      } else {
        u.full = torch::zeros({u.row * world_}, options);
        u.shard = torch::zeros({u.row}, options);
        std::int64_t offset = 0;
        for (std::size_t j = 0; j < u.parameters.size(); ++j) {
          u.full.narrow(0, offset, u.members.sizes[j]).copy_(u.parameters[j].detach().reshape(-1));
          offset += u.members.sizes[j];
        }
        show(u);
        u.now = state::pinned;  // whole, and the parameters are the truth until start() shards them
        live_bytes_ += bytes(u);
        peak_bytes_ = std::max(peak_bytes_, live_bytes_);
      }
      for (std::size_t j = 0; j < u.parameters.size(); ++j) {
        auto& p = u.parameters[j];
        if (!p.requires_grad()) continue;
        ++u.trainable;
        // The accumulator takes the gradient's shape from the parameter as it is now: built
        // sharded, show it its whole shape (a zero broadcast, no memory) while it is made.
        if (built) p.set_data(torch::zeros({}, options).expand(u.shapes[j]));
        auto accumulator = torch::autograd::impl::grad_accumulator(p);
        if (built) p.set_data(torch::empty({0}, options));
        accumulator->add_post_hook(std::make_unique<arrived>(this, k));
        accumulators_.push_back(std::move(accumulator));  // kept alive, or autograd makes one without the hook
      }
      found[k].second->attach(this, k);
      attached_.push_back(found[k].second);
    }
  }
  ~parameter_units() override {
    for (auto* u : attached_) u->attach(nullptr, 0);
  }
  parameter_units(const parameter_units&) = delete;  // the units and hooks point at it
  parameter_units& operator=(const parameter_units&) = delete;

  // Each parameter's unit (-1: whole on every rank).
  const std::vector<int>& unit_of() const noexcept { return unit_of_; }
  // This rank's row of unit k (its optimizer's pieces are views into it).
  const torch::Tensor& shard(std::size_t k) const noexcept { return units_[k].shard; }

  // The buckets the gradients are reduced in, in backward's order (the model's parameters
  // reversed): each unit is one bucket, the rest are cut at `bucket_bytes` (make_buckets).
  std::vector<bucket> layout(const std::vector<torch::Tensor>& parameters, std::size_t bucket_bytes) const {
    std::vector<bucket> buckets;
    std::vector<bool> placed(units_.size(), false);
    std::size_t bytes = 0;
    bool rest_open = false;  // whether the last bucket holds parameters outside units
    for (std::size_t n = parameters.size(); n-- > 0;) {
      if (const int u = unit_of_[n]; u >= 0) {
        if (!placed[static_cast<std::size_t>(u)]) buckets.push_back(units_[static_cast<std::size_t>(u)].members), placed[static_cast<std::size_t>(u)] = true;
        rest_open = false;
        continue;
      }
      const auto size = static_cast<std::size_t>(parameters[n].numel()) * parameters[n].element_size();
      const auto& last = buckets.empty() ? parameters[n] : parameters[buckets.back().parameters.back()];
      if (!rest_open || last.scalar_type() != parameters[n].scalar_type() || bytes + size > bucket_bytes) buckets.emplace_back(), bytes = 0;
      buckets.back().parameters.push_back(n);
      buckets.back().sizes.push_back(parameters[n].numel());
      bytes += size, rest_open = true;
    }
    return buckets;
  }

  // A step begins (units made whole between steps give their rows back); its forward records
  // the order units run in, which the next step's forward prefetches by.
  void begin_step() {
    shard_whole();
    last_order_ = std::move(order_);
    order_.clear();
    in_step_ = true;
  }
  // The step's backward is done: every unit still whole (a prefetch not used, a unit with no
  // trainable parameters) is released.
  void end_step() {
    in_step_ = false;
    for (std::size_t k = 0; k < units_.size(); ++k) release(k);
  }

  // Every unit whole, until the next step or start (every rank at once).
  void gather_whole() {
    in_step_ = false;
    for (std::size_t k = 0; k < units_.size(); ++k) start_gather(k, /*exact=*/true);
    for (std::size_t k = 0; k < units_.size(); ++k) {
      finish_gather(k);
      if (!units_[k].parameters.empty()) units_[k].now = state::pinned;
    }
  }
  // Each unit made whole between steps gives its row back from its parameters (they are the
  // truth then: they may have been loaded); every unit is released.
  void shard_whole() {
    torch::NoGradGuard no_grad;
    bool pinned = false;
    for (std::size_t k = 0; k < units_.size(); ++k) {
      auto& u = units_[k];
      if (u.now == state::pinned) {
        pinned = true;
        u.shard.copy_(u.full.narrow(0, rank_ * u.row, u.row));
        u.now = state::whole;
      }
      release(k);
    }
    if (pinned) peak_bytes_ = live_bytes_;  // the peak counts from here: training's, not the whole model's
  }

  // What a checkpoint holds of the units (checkpoint/detail/parameter_pieces.hpp): this rank's row of
  // each, as pieces of the parameters it crosses (copies: the row goes on changing), and the
  // names and shapes of every sharded parameter.
  c10::impl::GenericList saved_rows() const {
    torch::NoGradGuard no_grad;
    c10::impl::GenericList pieces(c10::AnyType::get());
    for (const auto& u : units_) {
      if (u.parameters.empty()) continue;
      // Pinned, the whole parameters are the truth (they may have been loaded): the row is theirs.
      const auto row = u.now == state::pinned ? u.full.narrow(0, rank_ * u.row, u.row) : u.shard;
      const std::int64_t begin = rank_ * u.row, end = std::min(begin + u.row, u.numel);
      std::int64_t start = 0;  // of parameter j in the unit
      for (std::size_t j = 0; j < u.parameters.size(); start += u.members.sizes[j], ++j) {
        const auto from = std::max(begin, start), to = std::min(end, start + u.members.sizes[j]);
        if (from < to) pieces.push_back(parameter_piece(u.names[j], from - start, row.narrow(0, from - begin, to - from).clone()));
      }
    }
    return pieces;
  }
  // Takes every unit's values from whole tensors by name (a checkpoint's; their shapes checked
  // by the caller): this rank's row, and the parameters themselves where the unit is whole
  // between steps. No collective: each rank takes its own row, whenever it loads.
  void load_whole(const std::function<torch::Tensor(const std::string&)>& whole_of) {
    torch::NoGradGuard no_grad;
    for (auto& u : units_) {
      const std::int64_t begin = rank_ * u.row, end = std::min(begin + u.row, u.numel);
      std::int64_t start = 0;
      for (std::size_t j = 0; j < u.parameters.size(); start += u.members.sizes[j], ++j) {
        const auto whole = whole_of(u.names[j]).reshape(-1);
        if (u.now == state::pinned) u.full.narrow(0, start, u.members.sizes[j]).copy_(whole);
        const auto from = std::max(begin, start), to = std::min(end, start + u.members.sizes[j]);
        if (from < to) u.shard.narrow(0, from - begin, to - from).copy_(whole.narrow(0, from - start, to - from));
      }
    }
  }
  // While the returned object lives, every released unit's parameters have their whole shapes
  // (a zero broadcast: no memory), for what reads shapes only: an optimizer made afresh groups
  // its parameters by dimension (tp::optim::weight_decay_groups).
  auto whole_shaped() {
    struct scope {
      parameter_units* units;
      std::vector<std::size_t> shaped;
      ~scope() {
        torch::NoGradGuard no_grad;
        for (const auto k : shaped)
          for (auto& p : units->units_[k].parameters) p.set_data(torch::empty({0}, units->units_[k].full.options()));
      }
    };
    scope s{this, {}};
    torch::NoGradGuard no_grad;
    for (std::size_t k = 0; k < units_.size(); ++k) {
      auto& u = units_[k];
      if (u.now != state::released || u.parameters.empty()) continue;
      s.shaped.push_back(k);
      for (std::size_t j = 0; j < u.parameters.size(); ++j) u.parameters[j].set_data(torch::zeros({}, u.full.options()).expand(u.shapes[j]));
    }
    return s;
  }
  c10::impl::GenericDict sharded_shapes() const {
    auto shapes = state_tree::new_dict();
    for (const auto& u : units_)
      for (std::size_t j = 0; j < u.parameters.size(); ++j) {
        c10::impl::GenericList shape(c10::AnyType::get());
        for (const auto d : u.shapes[j]) shape.push_back(d);
        shapes.insert(u.names[j], shape);
      }
    return shapes;
  }

  // The most bytes of whole units' buffers there were at once since training started.
  std::int64_t peak_bytes() const noexcept { return peak_bytes_; }
  // This rank's rows, in bytes; the all-gathers made so far, and the bytes of its rows in them.
  std::int64_t shard_bytes() const {
    std::int64_t n = 0;
    for (const auto& u : units_)
      if (u.shard.defined()) n += static_cast<std::int64_t>(u.shard.nbytes());
    return n;
  }
  std::int64_t gathers() const noexcept { return gathers_; }
  std::int64_t sent_bytes() const noexcept { return sent_bytes_; }  // this rank's rows, as sent

  void before_forward(std::size_t k, bool recomputation) override {
    auto& u = units_[k];
    if (u.now == state::pinned) return;
    start_gather(k);
    finish_gather(k);
    // A recomputation in backward gathers again, but is not forward's order.
    if (!in_step_ || !torch::GradMode::is_enabled() || recomputation) return;
    order_.push_back(k);
    backward_from_ = order_.size();
    // The unit that ran next in the last step starts its gather now.
    if (prefetch_ && order_.size() < last_order_.size()) start_gather(last_order_[order_.size()]);
  }
  void after_forward(std::size_t k, torch::Tensor& output) override {
    if (units_[k].now == state::pinned) return;
    if (in_step_ && torch::GradMode::is_enabled() && output.requires_grad())
      output.register_hook([this, k](const torch::Tensor&) { before_backward(k); });
    release(k);
  }

 private:
  enum class state { released, gathering, whole, pinned };  // pinned: whole between steps
  struct unit {
    std::string name;
    bucket members;                      // its parameters (indices into the model's) and their sizes
    std::vector<torch::Tensor> parameters;
    std::vector<std::string> names;                 // theirs in the model
    std::vector<std::vector<std::int64_t>> shapes;  // theirs when whole
    std::int64_t numel = 0, row = 0;     // elements, and each rank's row of them (the last padded)
    torch::Tensor shard;                 // this rank's row: the truth
    torch::Tensor full;                  // every row: its memory exists only while it is gathered
    c10::intrusive_ptr<c10d::Work> work;  // its all-gather in flight
    torch::Tensor sent, received;         // its row and every row in the wire type, while in flight
    state now = state::released;
    std::size_t trainable = 0, pending = 0;  // gradients still to come in this backward
  };

  struct arrived : torch::autograd::FunctionPostHook {
    arrived(parameter_units* units, std::size_t k) : units(units), k(k) {}
    torch::autograd::variable_list operator()(const torch::autograd::variable_list& outputs, const torch::autograd::variable_list&) override {
      units->gradient_arrived(k);
      return outputs;
    }
    parameter_units* units;
    std::size_t k;
  };

  static std::string label(const std::string& name) { return name.empty() ? "(the model itself)" : name; }
  static std::int64_t bytes(const unit& u) { return u.full.numel() * static_cast<std::int64_t>(u.full.element_size()); }

  // Backward is about to reach unit k: whole again, and the unit before it in forward starts
  // its gather.
  void before_backward(std::size_t k) {
    auto& u = units_[k];
    start_gather(k);
    finish_gather(k);
    u.pending = u.trainable;
    auto at = std::find(std::make_reverse_iterator(order_.begin() + static_cast<std::ptrdiff_t>(backward_from_)), order_.rend(), k);
    if (at == order_.rend()) return;
    backward_from_ = static_cast<std::size_t>(order_.rend() - at) - 1;  // k's place in forward
    if (prefetch_ && backward_from_ > 0) start_gather(order_[backward_from_ - 1]);
  }
  void gradient_arrived(std::size_t k) {
    auto& u = units_[k];
    if (u.now == state::whole && u.pending > 0 && --u.pending == 0) release(k);
  }

  // The unit's memory back, and its rows gathered into it (asynchronously): through the wire
  // type unless `exact`. bf16 travels as fp16's bits (LibTorch 1.x's Gloo gathers no bf16).
  void start_gather(std::size_t k, bool exact = false) {
    auto& u = units_[k];
    if (u.now != state::released || u.parameters.empty()) return;
    auto* storage = u.full.storage().unsafeGetStorageImpl();
    const auto size = static_cast<std::size_t>(bytes(u));
    storage->set_data_ptr_noswap(storage->allocator()->allocate(size));
    storage->set_nbytes(size);
    live_bytes_ += bytes(u);
    peak_bytes_ = std::max(peak_bytes_, live_bytes_);
    torch::Tensor into = u.full, sent = u.shard;
    if (!exact && wire_ != torch::kFloat && wire_ != u.shard.scalar_type()) {  // kFloat: off
      torch::NoGradGuard no_grad;
      u.received = torch::empty({u.row * world_}, u.shard.options().dtype(wire_));
      into = u.received, sent = u.sent = u.shard.to(wire_);
      if (wire_ == torch::kBFloat16) into = into.view(torch::kHalf), sent = sent.view(torch::kHalf);  // bits moved as they are
    }
    std::vector<std::vector<torch::Tensor>> outputs(1);
    for (int r = 0; r < world_; ++r) outputs[0].push_back(into.narrow(0, r * u.row, u.row));
    std::vector<torch::Tensor> inputs{sent};
    sent_bytes_ += static_cast<std::int64_t>(sent.nbytes());
    try {
      u.work = group_->allgather(outputs, inputs);
    } catch (const std::exception& e) {
      throw collective_error("starting the all-gather of unit '" + u.name + "'s parameters", e.what());
    }
    ++gathers_;
    u.now = state::gathering;
  }
  void finish_gather(std::size_t k) {
    auto& u = units_[k];
    if (u.now != state::gathering) return;
    try {
      u.work->wait();
    } catch (const std::exception& e) {
      throw collective_error("the all-gather of unit '" + u.name + "'s parameters", e.what());
    }
    u.work.reset();
    if (u.received.defined()) {  // through the wire type: the rounded values, in the parameters' type
      torch::NoGradGuard no_grad;
      u.full.copy_(u.received);
      u.received.reset(), u.sent.reset();
    }
    show(u);
    u.now = state::whole;
  }
  // The unit's parameters as views into its buffer.
  static void show(unit& u) {
    torch::NoGradGuard no_grad;
    std::int64_t offset = 0;
    for (std::size_t j = 0; j < u.parameters.size(); ++j) {
      u.parameters[j].set_data(u.full.narrow(0, offset, u.members.sizes[j]).view(u.shapes[j]));
      offset += u.members.sizes[j];
    }
  }
  // Gives the unit's memory back; its parameters become empty tensors (views the graph saved
  // keep their shape, and see the values again when the unit is gathered for backward).
  void release(std::size_t k) {
    auto& u = units_[k];
    if (u.now == state::released || u.parameters.empty()) return;
    if (u.now == state::gathering) finish_gather(k);
    torch::NoGradGuard no_grad;
    for (auto& p : u.parameters) p.set_data(torch::empty({0}, u.full.options()));
    auto* storage = u.full.storage().unsafeGetStorageImpl();
    storage->set_data_ptr_noswap(at::DataPtr(nullptr, u.full.device()));
    storage->set_nbytes(0);
    live_bytes_ -= bytes(u);
    u.now = state::released;
  }

  c10::intrusive_ptr<collective_group> group_;
  int rank_, world_;
  bool prefetch_;
  torch::Dtype wire_;
  std::vector<unit> units_;
  std::vector<int> unit_of_;
  std::vector<sharded_unit*> attached_;
  std::vector<std::shared_ptr<torch::autograd::Node>> accumulators_;
  std::vector<std::size_t> order_, last_order_;  // the units as this step's and the last step's forward ran them
  std::size_t backward_from_ = 0;                // where in order_ backward has got to
  bool in_step_ = false;
  std::int64_t live_bytes_ = 0, peak_bytes_ = 0, gathers_ = 0, sent_bytes_ = 0;
};

}  // namespace tp::detail
