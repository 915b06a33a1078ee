#pragma once
// The optimizer of one rank of a sharded run (tp::sharding, ZeRO stages 1 and 2): the user's
// optimizer, of the user's type, whose parameter groups hold only the pieces of the parameters
// this rank owns (detail/shard_plan.hpp), as flat views into the parameters. Its state is made
// at the first step for those pieces only: about 1/N of the unsharded state. Each piece's
// gradient is a view into the reducer's averaged shard, so after the reduction the optimizer
// steps the shard in place, as an elementwise optimizer would step the whole tensor.
//
// - step_and_gather(): the optimizer's step, then one all-gather per bucket brings every rank's
//   updated shard to every rank (the stop vote rides in it, detail/stop_vote.hpp, when the
//   gradients do not carry it); two are in flight at once, packed and unpacked around them.
// - consolidate(): every rank sends its pieces' state to rank 0, which builds an optimizer over
//   the whole model holding the whole state (ZeroRedundancyOptimizer.consolidate_state_dict):
//   what a checkpoint saves, so that it resumes unsharded, on other ranks, or sharded otherwise.
// - load_whole(): the reverse, with no collective (every rank reads the same checkpoint): an
//   optimizer over the whole model is loaded, and this rank keeps its pieces' state.
//
// The state is handled through OptimizerParamState's own serialize(), so any optimizer whose
// state is elementwise works: a state tensor shaped as its parameter is cut (or joined) with
// it, any other value (a step count) is kept. LBFGS, whose step is not elementwise, is refused.
// A failed collective throws collective_error.
#include <algorithm>
#include <cstdint>
#include <cstring>
#include <deque>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <sstream>
#include <stdexcept>
#include <string>
#include <utility>
#include <vector>

#include <torch/optim/lbfgs.h>
#include <torch/optim/optimizer.h>
#include <torch/serialize/input-archive.h>
#include <torch/serialize/output-archive.h>
#include <torch/types.h>

#include <tp/checkpoint_error.hpp>
#include <tp/detail/collective_group.hpp>
#include <tp/detail/shard_plan.hpp>
#include <tp/detail/stop_vote.hpp>
#include <tp/optim/any_optimizer.hpp>
#include <tp/optim/checks.hpp>
#include <tp/optim/lamb.hpp>
#include <tp/optim/lars.hpp>

namespace tp::detail {

// One parameter state's values by name (OptimizerParamState::serialize's keys).
struct state_values {
  std::map<std::string, c10::IValue> values;

  static state_values of(const torch::optim::OptimizerParamState& state) {
    torch::serialize::OutputArchive out;
    state.serialize(out);
    std::ostringstream bytes;
    out.save_to(bytes);
    const auto text = bytes.str();
    torch::serialize::InputArchive in;
    in.load_from(text.data(), text.size());
    state_values result;
    for (const auto& key : in.keys()) {
      if (key == "training") continue;  // the archive's module's own attribute
      c10::IValue v;
      if (in.try_read(key, v)) result.values[key] = v;
    }
    return result;
  }
  // A state of `like`'s type holding these values.
  std::unique_ptr<torch::optim::OptimizerParamState> make_like(const torch::optim::OptimizerParamState& like) const {
    torch::serialize::OutputArchive out;
    for (const auto& [key, v] : values) {
      if (v.isTensor()) out.write(key, v.toTensor(), /*is_buffer=*/true);
      else out.write(key, v);
    }
    std::ostringstream bytes;
    out.save_to(bytes);
    const auto text = bytes.str();
    torch::serialize::InputArchive in;
    in.load_from(text.data(), text.size());
    auto state = like.clone();
    state->serialize(in);
    return state;
  }
};

// The bytes of an optimizer's state tensors (what sharding divides; a serialized state adds a
// fixed overhead).
template <class Optimizer>
std::int64_t state_tensor_bytes(Optimizer& optimizer) {
  std::int64_t bytes = 0;
  for (const auto& [key, state] : torch_optimizer_of(optimizer)->state())
    for (const auto& [name, v] : state_values::of(*state).values)
      if (v.isTensor()) bytes += static_cast<std::int64_t>(v.toTensor().nbytes());
  return bytes;
}

template <class Optimizer>
class sharded_optimizer {
 public:
  // `optimizer`: the user's, over the whole model (no state yet), which it then holds the pieces
  // of (it must outlive this); `parameters`: the model's, in the order the plan indexes them;
  // `gradient(k)`: this rank's shard of bucket k's averaged gradients, flat.
  sharded_optimizer(Optimizer& optimizer, std::vector<torch::Tensor> parameters, shard_plan plan, std::vector<bucket> layout,
                    const std::function<torch::Tensor(std::size_t)>& gradient, c10::intrusive_ptr<collective_group> group)
      : optimizer_(optimizer),
        parameters_(std::move(parameters)),
        plan_(std::move(plan)),
        layout_(std::move(layout)),
        group_(std::move(group)) {
    auto& base = torch_base(optimizer_, "");
    if (dynamic_cast<torch::optim::LBFGS*>(&base))
      throw std::invalid_argument("tp::MultiProcess: .shard() cannot shard LBFGS: its step searches along the whole model's direction, "
                                  "which no rank holds alone; train it unsharded (tp::sharding::none)");
    if (!base.state().empty())
      throw std::invalid_argument("tp::MultiProcess: .shard(): the tower's optimizer already has state when it is made; a sharded "
                                  "optimizer must start empty (load state through a checkpoint instead)");
    // Each parameter's group, then the groups hold this rank's pieces instead of parameters.
    std::map<const void*, std::size_t> group_of;
    for (std::size_t g = 0; g < base.param_groups().size(); ++g)
      for (const auto& p : base.param_groups()[g].params()) group_of[p.unsafeGetTensorImpl()] = g;
    for (auto& group : base.param_groups()) group.params().clear();
    torch::NoGradGuard no_grad;
    for (const auto& piece : plan_.pieces) {
      const auto& p = parameters_[piece.parameter];
      const auto found = group_of.find(p.unsafeGetTensorImpl());
      auto view = p.detach().view(-1).narrow(0, piece.in_parameter, piece.length);
      const auto shard_begin = plan_.range(piece.bucket, plan_.rank).first;
      view.mutable_grad() = gradient(piece.bucket).narrow(0, piece.in_bucket - shard_begin, piece.length);
      pieces_.push_back(view);
      if (found != group_of.end()) base.param_groups()[found->second].params().push_back(view);  // else frozen: never stepped
    }
    // LARS and LAMB scale each tensor's step by its whole norms: summed over the ranks' pieces.
    if (auto* lamb = dynamic_cast<optim::LAMB*>(&base)) lamb->shard(layers());
    if (auto* lars = dynamic_cast<optim::LARS*>(&base)) lars->shard(layers());
  }

  Optimizer& optimizer() noexcept { return optimizer_; }
  const shard_plan& plan() const noexcept { return plan_; }

  // The pieces' gradients: what gradient processing sees when gradients are sharded.
  std::vector<torch::Tensor> gradients() const {
    std::vector<torch::Tensor> out;
    for (const auto& p : pieces_) out.push_back(p.grad());
    return out;
  }

  // Steps this rank's shard, then gathers every rank's into every parameter. With carry_vote
  // (when the gradients' reduction did not carry it), `vote` (a stop code) rides in the last
  // bucket's all-gather, whose vote slots of all ranks are returned (stop_vote::decode).
  torch::Tensor step_and_gather(bool step, bool carry_vote, int vote) {
    whole_.reset();  // a consolidated state is only good until the next step
    if (step) optimizer_.step();
    torch::NoGradGuard no_grad;
    // Every bucket's all-gather is started as soon as its row is packed, and unpacked in order
    // while the later ones travel; at most two are in flight (their buffers are a bucket each).
    const std::size_t buckets = layout_.size();
    std::deque<gather> in_flight;
    torch::Tensor votes;
    auto finish_oldest = [&] {
      if (auto v = finish_gather(in_flight.front()); v.defined()) votes = v;
      in_flight.pop_front();
    };
    for (std::size_t k = 0; k < buckets; ++k) {
      in_flight.push_back(start_gather(k, carry_vote && k + 1 == buckets, vote));
      if (in_flight.size() > 2) finish_oldest();
    }
    while (!in_flight.empty()) finish_oldest();
    return votes;
  }
  std::int64_t gathers() const noexcept { return gathers_; }

  // Every rank: sends its pieces' state to rank 0, which keeps an optimizer over the whole
  // model with the whole state (whole()) until the next step.
  // `make_whole()` makes an optimizer over the whole model, as the tower does.
  template <class MakeWhole>
  void consolidate(MakeWhole&& make_whole) {
    const auto bytes = pieces_state_bytes();
    // Through the backend's device (NCCL moves only GPU tensors): the sizes first (gather wants
    // equal tensors), then every rank's bytes, padded.
    const auto device = parameters_.front().device();
    auto size = torch::tensor({static_cast<std::int64_t>(bytes.size())}, torch::kLong).to(device);
    auto sizes = torch::empty({plan_.world}, torch::TensorOptions(torch::kLong).device(device));
    std::vector<std::vector<torch::Tensor>> size_out(1);
    for (int r = 0; r < plan_.world; ++r) size_out[0].push_back(sizes.narrow(0, r, 1));
    std::vector<torch::Tensor> size_in{size};
    run([&] { group_->allgather(size_out, size_in)->wait(); }, "gathering the optimizer shards' sizes");
    sizes = sizes.cpu();
    const auto largest = sizes.max().item<std::int64_t>();
    auto mine = torch::zeros({largest}, torch::kUInt8);
    std::memcpy(mine.data_ptr(), bytes.data(), bytes.size());
    mine = mine.to(device);
    std::vector<std::vector<torch::Tensor>> all;  // rank 0's receive buffers (none elsewhere: Gloo wants none)
    if (plan_.rank == 0) {
      all.resize(1);
      for (int r = 0; r < plan_.world; ++r) all[0].push_back(torch::empty({largest}, torch::TensorOptions(torch::kUInt8).device(device)));
    }
    std::vector<torch::Tensor> in{mine};
    c10d::GatherOptions options;
    options.rootRank = 0;
    run([&] { group_->gather(all, in, options)->wait(); }, "gathering the optimizer shards onto rank 0 for a checkpoint");
    if (plan_.rank != 0) return;
    std::vector<std::string> per_rank;
    for (int r = 0; r < plan_.world; ++r) {
      const auto received = all[0][r].cpu();
      per_rank.emplace_back(static_cast<const char*>(received.data_ptr()), static_cast<std::size_t>(sizes[r].item<std::int64_t>()));
    }
    whole_.emplace(assemble(make_whole(), per_rank));
  }

  // The optimizer over the whole model with the whole state, after consolidate(), on rank 0.
  Optimizer& whole() {
    if (!whole_)
      throw checkpoint_error("a sharded run's checkpoint needs every rank's optimizer shard: call trainer.consolidate_state() on every "
                             "rank before rank 0 saves (ModelSaver, MinSaver and MaxSaver do)");
    return *whole_;
  }

  // Loads through an optimizer over the whole model (load(whole) reads a checkpoint into it),
  // then keeps this rank's pieces' state and the groups' options.
  template <class MakeWhole, class Load>
  void load_whole(MakeWhole&& make_whole, Load&& load) {
    auto whole = make_whole();
    load(whole);
    auto& from = torch_base(whole, "the checkpoint's optimizer");
    auto& to = torch_base(optimizer_, "");
    if (from.param_groups().size() != to.param_groups().size())
      throw checkpoint_error("the checkpoint's optimizer has " + std::to_string(from.param_groups().size()) + " parameter groups, this one " +
                             std::to_string(to.param_groups().size()));
    for (std::size_t g = 0; g < to.param_groups().size(); ++g) to.param_groups()[g].set_options(from.param_groups()[g].options().clone());
    std::map<const void*, torch::Tensor> whole_param;  // this model's parameter -> the whole optimizer's same tensor
    for (auto& group : from.param_groups())
      for (auto& p : group.params()) whole_param[p.unsafeGetTensorImpl()] = p;
    std::vector<std::pair<torch::Tensor, std::unique_ptr<torch::optim::OptimizerParamState>>> kept;
    for (std::size_t i = 0; i < plan_.pieces.size(); ++i) {
      const auto& piece = plan_.pieces[i];
      const auto& p = parameters_[piece.parameter];
      const auto found = from.state().find(optim::detail::param_state_key(from.state(), p));
      if (found == from.state().end()) continue;
      auto values = state_values::of(*found->second);
      for (auto& [key, v] : values.values)
        if (v.isTensor() && v.toTensor().sizes() == p.sizes()) v = v.toTensor().reshape(-1).narrow(0, piece.in_parameter, piece.length).clone();
      kept.emplace_back(pieces_[i], values.make_like(*found->second));
    }
    to.state().clear();
    for (auto& [piece, state] : kept) to.state()[optim::detail::param_state_key(to.state(), piece)] = std::move(state);
  }

 private:
  template <class O>
  static torch::optim::Optimizer& torch_base(O& optimizer, const std::string&) {
    auto* base = torch_optimizer_of(optimizer);
    if (!base) throw std::invalid_argument("tp::MultiProcess: .shard() needs a torch::optim::Optimizer (or tp::optim::AnyOptimizer)");
    return *base;
  }

  // A collective; its failure throws collective_error, naming it (the policy says which ranks
  // did not answer).
  template <class F>
  static void run(F&& f, const std::string& what) {
    try {
      f();
    } catch (const std::exception& e) {
      throw collective_error(what, e.what());
    }
  }

  // One bucket's all-gather of updated shards: each rank's row is its shard (and, in the last
  // bucket when the gradients did not carry it, the stop vote's slots after it).
  struct gather {
    std::size_t bucket;
    bool votes;
    std::int64_t row;
    torch::Tensor send, received;
    c10::intrusive_ptr<c10d::Work> work;
  };
  gather start_gather(std::size_t k, bool votes, int vote) {
    const auto shard = plan_.shard_numel(k);
    gather g{k, votes, shard + (votes ? stop_vote::slots : 0), {}, {}, {}};
    const auto& any = parameters_[layout_[k].parameters.front()];
    g.send = torch::zeros({g.row}, any.options().requires_grad(false));
    const auto mine = plan_.range(k, plan_.rank).first;
    for (std::size_t i = 0; i < plan_.pieces.size(); ++i)
      if (plan_.pieces[i].bucket == k) g.send.narrow(0, plan_.pieces[i].in_bucket - mine, plan_.pieces[i].length).copy_(pieces_[i]);
    if (votes && vote != 0) g.send[shard + stop_vote::slot_of(vote)] = 1;
    g.received = torch::empty({plan_.world * g.row}, g.send.options());
    std::vector<std::vector<torch::Tensor>> outputs(1);
    for (int r = 0; r < plan_.world; ++r) outputs[0].push_back(g.received.narrow(0, r * g.row, g.row));
    std::vector<torch::Tensor> inputs{g.send};
    run([&] { g.work = group_->allgather(outputs, inputs); }, "starting the all-gather of the updated parameters of bucket " + std::to_string(k + 1));
    ++gathers_;
    return g;
  }
  // Waits for it and copies every rank's shard into the parameters; returns the ranks' vote
  // slots (none when it carried no vote).
  torch::Tensor finish_gather(gather& g) {
    const auto k = g.bucket;
    run([&] { g.work->wait(); }, "the all-gather of the updated parameters of bucket " + std::to_string(k + 1) + " of " + std::to_string(layout_.size()));
    // Bucket offset x is in rank x / shard's row, at x % shard.
    std::int64_t offset = 0;
    for (std::size_t j = 0; j < layout_[k].parameters.size(); ++j) {
      auto flat = parameters_[layout_[k].parameters[j]].detach().view(-1);
      const auto n = layout_[k].sizes[j];
      for (int r = 0; r < plan_.world; ++r) {
        const auto [begin, len] = plan_.range(k, r);
        const auto lo = std::max(begin, offset), hi = std::min(begin + len, offset + n);
        if (lo < hi) flat.narrow(0, lo - offset, hi - lo).copy_(g.received.narrow(0, r * g.row + (lo - begin), hi - lo));
      }
      offset += n;
    }
    if (!g.votes) return {};
    return g.received.view({plan_.world, g.row}).narrow(1, plan_.shard_numel(k), stop_vote::slots);
  }

  // Every piece's layer (its parameter), for LARS and LAMB.
  optim::detail::layer_shards layers() {
    optim::detail::layer_shards shards;
    shards.layers = static_cast<std::int64_t>(parameters_.size());
    shards.device = parameters_.front().device();
    for (std::size_t i = 0; i < pieces_.size(); ++i) {
      const auto index = plan_.pieces[i].parameter;
      shards.of[pieces_[i].unsafeGetTensorImpl()] = {static_cast<std::int64_t>(index), parameters_[index].dim()};
    }
    shards.sum = [this](torch::Tensor& t) {
      std::vector<torch::Tensor> one{t};
      run([&] { group_->allreduce(one)->wait(); }, "summing LARS's or LAMB's layer norms across the ranks");
    };
    return shards;
  }

  // This rank's pieces' states, piece by piece ("piece/I/..."), as archive bytes.
  std::string pieces_state_bytes() {
    auto& base = torch_base(optimizer_, "");
    torch::serialize::OutputArchive out;
    for (std::size_t i = 0; i < pieces_.size(); ++i) {
      const auto found = base.state().find(optim::detail::param_state_key(base.state(), pieces_[i]));
      if (found == base.state().end()) continue;
      torch::serialize::OutputArchive one;
      found->second->serialize(one);
      out.write("piece/" + std::to_string(i), one);
    }
    out.write("groups", c10::IValue(static_cast<std::int64_t>(base.param_groups().size())));
    std::ostringstream text;
    out.save_to(text);
    return text.str();
  }

  // Rank 0: the whole optimizer from every rank's pieces.
  Optimizer assemble(Optimizer whole, const std::vector<std::string>& per_rank) {
    auto& to = torch_base(whole, "");
    auto& mine = torch_base(optimizer_, "");
    for (std::size_t g = 0; g < to.param_groups().size() && g < mine.param_groups().size(); ++g)
      to.param_groups()[g].set_options(mine.param_groups()[g].options().clone());  // a schedule's learning rate
    // A template state of the optimizer's type: any state this rank holds (ranks hold the same type).
    struct joined {
      state_values values;
      std::unique_ptr<torch::optim::OptimizerParamState> like;
    };
    std::map<std::size_t, joined> states;  // by parameter index
    for (int r = 0; r < plan_.world; ++r) {
      torch::serialize::InputArchive in;
      in.load_from(per_rank[r].data(), per_rank[r].size());
      const auto plan = make_shard_plan(layout_, r, plan_.world);
      for (std::size_t i = 0; i < plan.pieces.size(); ++i) {
        torch::serialize::InputArchive one;
        if (!in.try_read("piece/" + std::to_string(i), one)) continue;
        const auto& piece = plan.pieces[i];
        const auto& p = parameters_[piece.parameter];
        auto& j = states[piece.parameter];
        if (!j.like) {
          j.like = template_state();
          if (!j.like) return whole;  // no rank has stepped: no state anywhere
        }
        auto piece_state = j.like->clone();
        piece_state->serialize(one);
        for (auto& [key, v] : state_values::of(*piece_state).values) {
          if (v.isTensor() && v.toTensor().dim() == 1 && v.toTensor().numel() == piece.length) {
            auto& full = j.values.values[key];
            if (!full.isTensor()) full = torch::zeros({p.numel()}, v.toTensor().options());
            full.toTensor().narrow(0, piece.in_parameter, piece.length).copy_(v.toTensor());
          } else {
            j.values.values[key] = v;
          }
        }
      }
    }
    for (auto& [index, j] : states) {
      const auto& p = parameters_[index];
      for (auto& [key, v] : j.values.values)
        if (v.isTensor() && v.toTensor().dim() == 1 && v.toTensor().numel() == p.numel()) v = v.toTensor().view(p.sizes());
      to.state()[optim::detail::param_state_key(to.state(), p)] = j.values.make_like(*j.like);
    }
    return whole;
  }

  // A state object of the optimizer's type, to deserialize pieces into: this rank's first, or
  // (for a rank that owns nothing) none.
  std::unique_ptr<torch::optim::OptimizerParamState> template_state() {
    auto& base = torch_base(optimizer_, "");
    if (base.state().empty()) return nullptr;
    return base.state().begin()->second->clone();
  }

  Optimizer& optimizer_;
  std::vector<torch::Tensor> parameters_;
  shard_plan plan_;
  std::vector<bucket> layout_;
  c10::intrusive_ptr<collective_group> group_;
  std::vector<torch::Tensor> pieces_;  // flat views into the parameters, one per plan piece
  std::optional<Optimizer> whole_;
  std::int64_t gathers_ = 0;
};

}  // namespace tp::detail
