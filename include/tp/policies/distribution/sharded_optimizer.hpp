#pragma once
// The optimizer of one rank of a sharded run (tp::sharding, ZeRO stages 1 and 2): the user's
// optimizer, of the user's type, whose parameter groups hold only the pieces of the parameters
// this rank owns (policies/distribution/detail/shard_plan.hpp), as flat views into the parameters. Its state is made
// at the first step for those pieces only: about 1/N of the unsharded state. Each piece's
// gradient is a view into the reducer's averaged shard, so after the reduction the optimizer
// steps the shard in place, as an elementwise optimizer would step the whole tensor.
//
// - step_and_gather(): the optimizer's step, then one all-gather per bucket brings every rank's
//   updated shard to every rank (the stop vote rides in it, policies/distribution/detail/stop_vote.hpp, when the
//   gradients do not carry it); two are in flight at once, packed and unpacked around them.
// - saved_pieces(): this rank's pieces' state, as the part of a checkpoint it writes itself
//   (optim/optimizer_pieces.hpp); options() the groups' options, which rank 0 writes.
// - load_pieces(): this rank's pieces' state from the parts of a checkpoint of any layout, read
//   a part at a time (only those that hold some of its pieces); load_whole() from a checkpoint
//   of an unsharded run: an optimizer over the whole model is loaded, and this rank keeps its
//   pieces' state. Neither makes a collective: every rank reads the same checkpoint.
//
// Any optimizer whose state is elementwise works: a state tensor with as many elements as its
// parameter is cut (or joined) with it, any other value (a step count) is kept. LBFGS, whose
// step is not elementwise, is refused. A failed collective throws collective_error.
#include <algorithm>
#include <cstdint>
#include <deque>
#include <functional>
#include <map>
#include <memory>
#include <stdexcept>
#include <string>
#include <utility>
#include <vector>

#include <torch/optim/lbfgs.h>
#include <torch/optim/optimizer.h>
#include <torch/types.h>

#include <tp/checkpoint/checkpoint_error.hpp>
#include <tp/policies/distribution/detail/collective_group.hpp>
#include <tp/policies/distribution/detail/shard_plan.hpp>
#include <tp/policies/distribution/detail/stop_vote.hpp>
#include <tp/optim/any_optimizer.hpp>
#include <tp/optim/checks.hpp>
#include <tp/optim/lamb.hpp>
#include <tp/optim/lars.hpp>
#include <tp/optim/optimizer_pieces.hpp>
#include <tp/optim/optimizer_state.hpp>

namespace tp::detail {

// The bytes of an optimizer's state tensors (what sharding divides; step counts and the
// serialized form add a fixed overhead).
template <class Optimizer>
std::int64_t state_tensor_bytes(Optimizer& optimizer) {
  std::int64_t bytes = 0;
  for (const auto& state : optim::position_states(optim::state_of(optimizer), "the optimizer's state")) {
    if (state.isNone()) continue;
    for (const auto& entry : state.toGenericDict())
      if (entry.value().isTensor() && entry.value().toTensor().dim() >= 1) bytes += static_cast<std::int64_t>(entry.value().toTensor().nbytes());
  }
  return bytes;
}

template <class Optimizer>
class sharded_optimizer {
 public:
  // `optimizer`: the user's, over the whole model (no state yet), which it then holds the pieces
  // of (it must outlive this); `parameters`: the model's, in the order the plan indexes them;
  // `gradient(k)`: this rank's shard of bucket k's averaged gradients, flat. `row(k)`, where a
  // bucket's parameters are sharded too (tp::sharding::parameters): this rank's row of bucket k,
  // which its pieces are views into and which is not gathered after the step (an undefined
  // tensor: the bucket's parameters are whole, and are).
  sharded_optimizer(Optimizer& optimizer, std::vector<torch::Tensor> parameters, std::vector<std::string> names, shard_plan plan,
                    std::vector<bucket> layout, const std::function<torch::Tensor(std::size_t)>& gradient,
                    c10::intrusive_ptr<collective_group> group, const std::function<torch::Tensor(std::size_t)>& row = {})
      : optimizer_(optimizer),
        parameters_(std::move(parameters)),
        names_(std::move(names)),
        plan_(std::move(plan)),
        layout_(std::move(layout)),
        group_(std::move(group)) {
    for (std::size_t k = 0; k < layout_.size(); ++k) gathered_.push_back(!row || !row(k).defined());
    auto& base = torch_base(optimizer_, "");
    if (dynamic_cast<torch::optim::LBFGS*>(&base))
      throw std::invalid_argument("tp::MultiProcess: .shard() cannot shard LBFGS: its step searches along the whole model's direction, "
                                  "which no rank holds alone; train it unsharded (tp::sharding::none)");
    if (!base.state().empty())
      throw std::invalid_argument("tp::MultiProcess: .shard(): the tower's optimizer already has state when it is made; a sharded "
                                  "optimizer must start empty (load state through a checkpoint instead)");
    // Each parameter's group, then the groups hold this rank's pieces instead of parameters.
    // Each parameter's group, and its number in the whole optimizer (-1: frozen, in none).
    std::map<const void*, std::size_t> group_of;
    std::map<const void*, std::int64_t> number_of;
    for (std::size_t g = 0; g < base.param_groups().size(); ++g)
      for (const auto& p : base.param_groups()[g].params()) {
        group_of[p.unsafeGetTensorImpl()] = g;
        number_of.emplace(p.unsafeGetTensorImpl(), static_cast<std::int64_t>(number_of.size()));
      }
    for (const auto& p : parameters_) {
      const auto found = number_of.find(p.unsafeGetTensorImpl());
      number_.push_back(found == number_of.end() ? -1 : found->second);
    }
    for (auto& group : base.param_groups()) group.params().clear();
    torch::NoGradGuard no_grad;
    for (const auto& piece : plan_.pieces) {
      const auto& p = parameters_[piece.parameter];
      const auto found = group_of.find(p.unsafeGetTensorImpl());
      const auto shard_begin = plan_.range(piece.bucket, plan_.rank).first;
      auto view = gathered_[piece.bucket] ? p.detach().view(-1).narrow(0, piece.in_parameter, piece.length)
                                          : row(piece.bucket).narrow(0, piece.in_bucket - shard_begin, piece.length);
      view.mutable_grad() = gradient(piece.bucket).narrow(0, piece.in_bucket - shard_begin, piece.length);
      pieces_.push_back(view);
      if (found != group_of.end()) base.param_groups()[found->second].params().push_back(view);  // else frozen: never stepped
    }
    for (const auto& group : base.param_groups())  // the pieces in the order the groups list them
      for (const auto& view : group.params())
        for (std::size_t i = 0; i < pieces_.size(); ++i)
          if (pieces_[i].unsafeGetTensorImpl() == view.unsafeGetTensorImpl()) listed_.push_back(i);
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

  // Steps this rank's shard, then gathers every rank's into every parameter (of the buckets
  // whose parameters are whole). With carry_vote (when the gradients' reduction did not carry
  // it), `vote` (a stop code) rides in the last gathered bucket's all-gather, whose vote slots
  // of all ranks are returned (stop_vote::decode); undefined when no bucket is gathered.
  torch::Tensor step_and_gather(bool step, bool carry_vote, int vote) {
    if (step) optimizer_.step();
    torch::NoGradGuard no_grad;
    // Every bucket's all-gather is started as soon as its row is packed, and unpacked in order
    // while the later ones travel; at most two are in flight (their buffers are a bucket each).
    const std::size_t buckets = layout_.size();
    const auto last = static_cast<std::size_t>(std::find(gathered_.rbegin(), gathered_.rend(), true) - gathered_.rbegin());
    std::deque<gather> in_flight;
    torch::Tensor votes;
    auto finish_oldest = [&] {
      if (auto v = finish_gather(in_flight.front()); v.defined()) votes = v;
      in_flight.pop_front();
    };
    for (std::size_t k = 0; k < buckets; ++k) {
      if (!gathered_[k]) continue;
      in_flight.push_back(start_gather(k, carry_vote && k + 1 + last == buckets, vote));
      if (in_flight.size() > 2) finish_oldest();
    }
    while (!in_flight.empty()) finish_oldest();
    return votes;
  }
  std::int64_t gathers() const noexcept { return gathers_; }

  // Rank r's pieces (any rank's: every rank computes every plan), by their parameter's number
  // in the whole optimizer; frozen parameters, which have no state, are left out.
  std::vector<optim::piece> pieces_of(int r) const {
    std::vector<optim::piece> out;
    for (const auto& p : make_shard_plan(layout_, r, plan_.world).pieces)
      if (number_[p.parameter] >= 0) out.push_back({number_[p.parameter], p.in_parameter, p.length});
    return out;
  }

  // This rank's pieces' state (optim::saved_pieces' list): its part of a checkpoint.
  c10::impl::GenericList saved_pieces() {
    std::vector<std::string> names;
    for (const auto i : listed_) names.push_back(names_[plan_.pieces[i].parameter]);
    return optim::saved_pieces(optim::position_states(optim::state_of(optimizer_), "the sharded optimizer's state"), listed_pieces(), names);
  }

  // The groups' options as an optimizer over the whole model holds them, without any state
  // (optim::state_of's tree): what rank 0 writes beside the parts.
  template <class MakeWhole>
  c10::IValue options(MakeWhole&& make_whole) {
    auto whole = make_whole();
    auto& to = torch_base(whole, "");
    auto& mine = torch_base(optimizer_, "");
    for (std::size_t g = 0; g < to.param_groups().size() && g < mine.param_groups().size(); ++g)
      to.param_groups()[g].set_options(mine.param_groups()[g].options().clone());  // a schedule's learning rate
    return optim::state_of(whole);
  }

  // Loads the options (options()' tree, through an optimizer over the whole model), then this
  // rank's pieces' state from the parts that hold some of it.
  template <class MakeWhole>
  void load_pieces(MakeWhole&& make_whole, const c10::IValue& options, const state_parts& parts, const std::string& source) {
    auto whole = make_whole();
    optim::load_state(whole, options, source + "/optimizer_states/0");
    copy_options(whole);
    optim::load_joined(optimizer_, listed_pieces(), {}, parts, source);
  }

  // Loads through an optimizer over the whole model (load(whole) reads a checkpoint into it),
  // then keeps this rank's pieces' state and the groups' options.
  template <class MakeWhole, class Load>
  void load_whole(MakeWhole&& make_whole, Load&& load) {
    auto whole = make_whole();
    load(whole);
    copy_options(whole);
    const std::string source = "the checkpoint's optimizer";
    const auto [pieces, shapes] = optim::whole_pieces(torch_base(whole, source));
    auto part = state_tree::new_dict();
    part.insert("pieces", optim::saved_pieces(optim::position_states(optim::state_of(whole), source), pieces,
                                              std::vector<std::string>(pieces.size())));
    state_parts one{{pieces}, [&](std::size_t) { return state_tree(part, source); }};
    optim::load_joined(optimizer_, listed_pieces(), {}, one, source);
  }

 private:
  template <class O>
  static torch::optim::Optimizer& torch_base(O& optimizer, const std::string&) {
    auto* base = torch_optimizer_of(optimizer);
    if (!base) throw std::invalid_argument("tp::MultiProcess: .shard() needs a torch::optim::Optimizer (or tp::optim::AnyOptimizer)");
    return *base;
  }

  // The pieces the groups hold, in their order, by their parameter's number in the whole optimizer.
  std::vector<optim::piece> listed_pieces() const {
    std::vector<optim::piece> out;
    for (const auto i : listed_) out.push_back({number_[plan_.pieces[i].parameter], plan_.pieces[i].in_parameter, plan_.pieces[i].length});
    return out;
  }

  // The whole optimizer's groups' options, into this one's.
  template <class Whole>
  void copy_options(Whole& whole) {
    auto& from = torch_base(whole, "the checkpoint's optimizer");
    auto& to = torch_base(optimizer_, "");
    if (from.param_groups().size() != to.param_groups().size())
      throw checkpoint_error("the checkpoint's optimizer has " + std::to_string(from.param_groups().size()) + " parameter groups, this one " +
                             std::to_string(to.param_groups().size()));
    for (std::size_t g = 0; g < to.param_groups().size(); ++g) to.param_groups()[g].set_options(from.param_groups()[g].options().clone());
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

  Optimizer& optimizer_;
  std::vector<torch::Tensor> parameters_;
  std::vector<std::string> names_;  // the parameters'
  std::vector<std::int64_t> number_;  // each parameter's number in the whole optimizer (-1: frozen)
  shard_plan plan_;
  std::vector<bucket> layout_;
  c10::intrusive_ptr<collective_group> group_;
  std::vector<bool> gathered_;         // each bucket's: whether its parameters are whole (gathered after a step)
  std::vector<torch::Tensor> pieces_;  // flat views into the parameters (or rows), one per plan piece
  std::vector<std::size_t> listed_;    // the pieces the groups hold, in the groups' order
  std::int64_t gathers_ = 0;
};

}  // namespace tp::detail
