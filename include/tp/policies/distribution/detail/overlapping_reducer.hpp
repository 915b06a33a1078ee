#pragma once
// Averages the gradients of every process while backward is still running (PyTorch DDP's
// reducer, Horovod's fusion).
//
// Parameters are fused into buckets in reverse order (backward produces the last layers'
// gradients first), and each parameter's .grad is a view into its bucket (DDP's
// gradient_as_bucket_view): autograd accumulates straight into the bucket, so nothing is copied
// in or out. A hook that runs after a parameter's gradient has been accumulated counts it in,
// and a bucket whose gradients are all in is all-reduced at once, asynchronously. Buckets are
// launched strictly in order, so every process makes the same collectives in the same order.
// finish() sends what backward did not reach (zeros), waits for every bucket and divides by the
// number of processes.
//
// With overlap off, the buckets are all-reduced one after the other after backward: the
// baseline the benchmark compares against. With a wire type (fp16 or bf16: DDP's
// fp16_compress_hook), a bucket is divided by the number of processes in fp32, sent and summed
// in that type (half the bytes), and copied back into the fp32 bucket. Either way, begin() zeroes the gradients (the
// optimizer's zero_grad must not be used: it would detach the views).
//
// With reduce_to_owners (tp::sharding::gradients, ZeRO stage 2), no bucket is kept whole. The
// parameters' .grad are autograd's own; the hook moves each one into its bucket's staging buffer
// (a copy, or the gradient itself when it is the bucket's only one) and releases it. A full
// bucket's shards (policies/distribution/detail/shard_plan.hpp) are summed each onto its owner (one reduce per owner:
// LibTorch 1.13's Gloo has no reduce_scatter); once done, the owner keeps its shard's average
// (owned(k): what its optimizer's pieces step) and the staging buffer goes back to a pool. The
// buckets in flight are bounded (64 MiB, or two buckets: DeepSpeed's double-buffered bucket);
// past it, backward waits for the oldest. So a rank holds 1/N of the gradients plus what is
// in flight, not all of them.
//
// The step's stop vote (policies/distribution/detail/stop_vote.hpp) rides in the last bucket's all-reduce, in a few
// elements after its gradients: no collective of its own.
#include <algorithm>
#include <cstddef>
#include <deque>
#include <memory>
#include <stdexcept>
#include <string>
#include <vector>

#include <torch/csrc/autograd/function.h>
#include <torch/csrc/autograd/function_hook.h>
#include <torch/csrc/autograd/variable.h>
#include <tp/policies/distribution/detail/collective_group.hpp>
#include <torch/types.h>

#include <tp/policies/distribution/detail/gradient_buckets.hpp>
#include <tp/policies/distribution/detail/shard_plan.hpp>
#include <tp/policies/distribution/detail/stop_vote.hpp>

namespace tp::detail {

class overlapping_reducer {
 public:
  // `layout`: the buckets, when the caller makes them (a parameter-sharded run's units); by
  // default, the parameters reversed, cut at `bucket_bytes`.
  overlapping_reducer(std::vector<torch::Tensor> parameters, c10::intrusive_ptr<collective_group> group, std::size_t bucket_bytes, bool overlap,
                      torch::Dtype wire = torch::kFloat, bool reduce_to_owners = false, std::vector<bucket> layout = {})
      : parameters_(std::move(parameters)), group_(std::move(group)), overlap_(overlap), buckets_(std::move(layout)), wire_(wire),
        to_owners_(reduce_to_owners) {
    if (buckets_.empty()) {
      std::vector<torch::Tensor> reversed(parameters_.rbegin(), parameters_.rend());
      buckets_ = make_buckets(reversed, bucket_bytes);
      for (auto& b : buckets_)
        for (auto& i : b.parameters) i = parameters_.size() - 1 - i;  // back to indices into parameters_
    }
    where_.resize(parameters_.size());
    for (std::size_t k = 0; k < buckets_.size(); ++k) {
      std::int64_t offset = 0;
      for (std::size_t j = 0; j < buckets_[k].parameters.size(); ++j) {
        where_[buckets_[k].parameters[j]] = {k, offset, buckets_[k].sizes[j]};
        offset += buckets_[k].sizes[j];
      }
      if (to_owners_) {
        if (buckets_[k].parameters.size() > 1) pool_numel_ = std::max(pool_numel_, offset);  // a copy: staged in the pool
        continue;
      }
      // The last bucket (launched last) carries the stop vote after its gradients.
      const std::int64_t extra = k + 1 == buckets_.size() ? stop_vote::slots : 0;
      flats_.push_back(torch::zeros({offset + extra}, options(k)));
    }
    pending_.resize(buckets_.size());
    arrived_.resize(parameters_.size());
    works_.resize(buckets_.size());
    wires_.resize(buckets_.size());
    staging_.resize(buckets_.size());
    pooled_.resize(buckets_.size());
    if (!to_owners_) attach_gradients();
  }
  overlapping_reducer(const overlapping_reducer&) = delete;  // the hooks point at it
  overlapping_reducer& operator=(const overlapping_reducer&) = delete;

  // Registers the hooks that count gradients in (once).
  void hook() {
    for (std::size_t i = 0; i < parameters_.size(); ++i) {
      if (!parameters_[i].requires_grad()) continue;
      auto accumulator = torch::autograd::impl::grad_accumulator(parameters_[i]);
      accumulator->add_post_hook(std::make_unique<accumulated>(this, i));
      accumulators_.push_back(std::move(accumulator));  // kept alive, or autograd makes a new one without the hook
    }
  }

  // Call before backward: zeroes the gradients; from here on, accumulated gradients count in.
  // `vote` (a stop code, 0 for none) rides in this step's reduction (not with reduce_to_owners).
  void begin(int vote = 0) {
    if (to_owners_) {
      for (auto& p : parameters_) p.mutable_grad().reset();  // autograd makes them afresh
    } else {
      attach_gradients();
      for (auto& flat : flats_) flat.zero_();
      if (vote != 0) flats_.back()[gradient_numel(buckets_.size() - 1) + stop_vote::slot_of(vote)] = 1;
    }
    for (std::size_t k = 0; k < buckets_.size(); ++k) pending_[k] = buckets_[k].parameters.size();
    std::fill(arrived_.begin(), arrived_.end(), false);
    next_ = 0;
    armed_ = overlap_;
  }

  // With gradient accumulation, before each micro-batch's backward: only the last one's
  // accumulated gradients count in (and launch all-reduces); the others only accumulate.
  void arm(bool last_micro_batch) noexcept { armed_ = overlap_ && last_micro_batch; }

  // All-reduces launched so far (the accumulation test counts them).
  std::int64_t launched() const noexcept { return launched_; }

  // Call after backward: completes the reduction; the parameters' .grad hold the averages.
  void finish() {
    if (!overlap_) return reduce_now();
    armed_ = false;
    for (std::size_t i = 0; i < parameters_.size(); ++i)
      if (!arrived_[i]) {  // backward did not reach it: its slice holds zeros (or earlier micro-batches' sum)
        arrived_[i] = true;
        if (to_owners_) stage(i);
        if (--pending_[where_[i].bucket] == 0) launch_ready();
      }
    wait_all();
  }

  // Averages the gradients now in .grad: every bucket all-reduced in order (the whole reduction
  // after backward).
  void reduce_now() {
    armed_ = false;
    if (to_owners_) {
      for (std::size_t i = 0; i < parameters_.size(); ++i)
        if (!arrived_[i]) arrived_[i] = true, stage(i);
    } else {
      attach_gradients();
    }
    for (std::size_t k = 0; k < buckets_.size(); ++k) launch(k);
    wait_all();
  }

  std::size_t buckets() const noexcept { return buckets_.size(); }
  // The buckets' parameters (indices into the parameter list) and, after finish(), their
  // averaged gradients, flat (what the sharded optimizer's pieces are views into).
  const std::vector<bucket>& layout() const noexcept { return buckets_; }
  const torch::Tensor& flat(std::size_t k) const noexcept { return flats_[k]; }  // not with reduce_to_owners
  // With reduce_to_owners, after finish(): this rank's shard of bucket k, averaged.
  const torch::Tensor& owned(std::size_t k) const noexcept { return owned_[k]; }
  std::int64_t gradient_numel(std::size_t k) const noexcept { return where_[buckets_[k].parameters.back()].offset + buckets_[k].sizes.back(); }
  // The stop vote's slots as the last reduction summed them (stop_vote::decode); not with
  // reduce_to_owners.
  torch::Tensor vote_slots() const { return flats_.back().narrow(0, gradient_numel(buckets_.size() - 1), stop_vote::slots); }
  // With reduce_to_owners: this rank's shards, once the owners are known.
  void own(shard_plan plan) {
    plan_ = std::move(plan);
    owned_.clear();
    for (std::size_t k = 0; k < buckets_.size(); ++k) owned_.push_back(torch::zeros({plan_.range(k, plan_.rank).second}, options(k)));
  }
  // The gradient bytes kept between steps: the whole buckets (all-reduce), or this rank's
  // shards, the pool's spare buffers and any .grad left whole (reduce_to_owners).
  std::int64_t kept_bytes() const {
    std::int64_t bytes = 0;
    if (!to_owners_) {
      for (std::size_t k = 0; k < flats_.size(); ++k) bytes += gradient_numel(k) * static_cast<std::int64_t>(flats_[k].element_size());
      return bytes;
    }
    for (const auto* kept : {&owned_, &spare_})
      for (const auto& t : *kept) bytes += static_cast<std::int64_t>(t.nbytes());
    for (const auto& p : parameters_)
      if (p.grad().defined()) bytes += static_cast<std::int64_t>(p.grad().nbytes());
    return bytes;
  }

 private:
  struct accumulated : torch::autograd::FunctionPostHook {
    accumulated(overlapping_reducer* r, std::size_t i) : reducer(r), index(i) {}
    torch::autograd::variable_list operator()(const torch::autograd::variable_list& outputs, const torch::autograd::variable_list&) override {
      reducer->arrive(index);
      return outputs;
    }
    overlapping_reducer* reducer;
    std::size_t index;
  };

  // Makes every .grad the view of its slice again (if something replaced one, its value is
  // kept: copied into the slice).
  void attach_gradients() {
    torch::NoGradGuard no_grad;
    for (std::size_t i = 0; i < parameters_.size(); ++i) {
      auto& p = parameters_[i];
      const auto [k, offset, numel] = where_[i];
      auto slice = flats_[k].narrow(0, offset, numel);
      const auto& g = p.grad();
      if (g.defined() && g.data_ptr() == slice.data_ptr() && g.is_contiguous()) continue;
      if (g.defined()) slice.copy_(g.reshape(-1));
      else slice.zero_();
      p.mutable_grad() = slice.view_as(p);
    }
  }

  void arrive(std::size_t i) {
    if (!armed_ || arrived_[i]) return;
    arrived_[i] = true;
    if (to_owners_) stage(i);
    if (--pending_[where_[i].bucket] == 0) launch_ready();
  }

  torch::TensorOptions options(std::size_t k) const { return parameters_[buckets_[k].parameters.front()].options().requires_grad(false); }

  // reduce_to_owners: moves parameter i's gradient into its bucket's staging buffer (zeros when
  // it has none) and releases it. A bucket of one contiguous gradient is staged as that gradient
  // itself: no copy, and no second buffer as large as the largest tensor.
  void stage(std::size_t i) {
    torch::NoGradGuard no_grad;
    auto& grad = parameters_[i].mutable_grad();
    const auto [k, offset, numel] = where_[i];
    if (buckets_[k].parameters.size() == 1 && grad.defined() && grad.is_contiguous()) {
      staging_[k] = grad.view(-1);
    } else {
      if (!staging_[k].defined()) staging_[k] = take_staging(k);
      auto slice = staging_[k].narrow(0, offset, numel);  // not the parameter's numel(): it may be released (tp::sharding::parameters)
      if (grad.defined()) slice.copy_(grad.reshape(-1));
      else slice.zero_();
    }
    grad.reset();
  }
  torch::Tensor take_staging(std::size_t k) {
    const auto numel = gradient_numel(k);
    if (numel > pool_numel_) return torch::empty({numel}, options(k));
    if (spare_.empty()) spare_.push_back(torch::empty({pool_numel_}, options(k)));
    pooled_[k] = std::move(spare_.back());
    spare_.pop_back();
    return pooled_[k].narrow(0, 0, numel);
  }
  // Bucket k's reduce is done: the owner keeps its average, and the staging goes back.
  void complete_owned(std::size_t k) {
    torch::NoGradGuard no_grad;
    const auto [begin, length] = plan_.range(k, plan_.rank);
    owned_[k].copy_((compressed(k) ? wires_[k] : staging_[k]).narrow(0, begin, length));
    if (!compressed(k)) owned_[k].div_(group_->getSize());
    wires_[k].reset();
    release_staging(k);
  }
  void release_staging(std::size_t k) {
    staging_[k].reset();
    if (pooled_[k].defined()) spare_.push_back(std::move(pooled_[k])), pooled_[k].reset();
  }
  // Launches, in order, every bucket whose gradients are all in.
  void launch_ready() {
    while (next_ < buckets_.size() && pending_[next_] == 0) launch(next_++);
  }
  bool compressed(std::size_t k) const { return wire_ != parameters_[buckets_[k].parameters.front()].scalar_type(); }
  void launch(std::size_t k) {
    torch::Tensor sent = to_owners_ ? staging_[k] : flats_[k];
    if (compressed(k)) {
      torch::NoGradGuard no_grad;
      wires_[k] = sent.div(group_->getSize()).to(wire_);  // divided first: the sum stays in range
      sent = wires_[k];
      if (to_owners_) release_staging(k);  // what is sent is the wire's copy
    }
    ++launched_;
    works_[k].clear();
    try {
      if (!to_owners_) {
        std::vector<torch::Tensor> one{sent};
        works_[k].push_back(group_->allreduce(one));
        return;
      }
      for (int r = 0; r < plan_.world; ++r) {
        const auto [begin, length] = plan_.range(k, r);
        if (length == 0) continue;  // the same on every rank: no collective is skipped by one alone
        std::vector<torch::Tensor> one{sent.narrow(0, begin, length)};
        c10d::ReduceOptions options;
        options.rootRank = r;
        works_[k].push_back(group_->reduce(one, options));
      }
    } catch (const std::exception& e) {
      throw collective_error("starting the " + what() + " of gradient bucket " + std::to_string(k + 1), e.what());
    }
    // The buckets done are reaped; past the bound, the oldest is waited for.
    in_flight_.push_back(k);
    in_flight_bytes_ += bucket_bytes(k);
    while (!in_flight_.empty() && (too_much_in_flight() || done(in_flight_.front()))) retire_oldest();
  }
  // reduce_to_owners: waits for the oldest bucket in flight and keeps this rank's shard of it.
  void retire_oldest() {
    const auto k = in_flight_.front();
    wait(k);
    complete_owned(k);
    in_flight_bytes_ -= bucket_bytes(k);
    in_flight_.pop_front();
  }
  std::int64_t bucket_bytes(std::size_t k) const {
    return gradient_numel(k) * static_cast<std::int64_t>(parameters_[buckets_[k].parameters.front()].element_size());
  }
  // Staged buckets in flight: up to 64 MiB, or two buckets when they are larger. Waiting for a
  // reduction stalls backward (a third of a 1 MB-bucket step, bench_multi_process), so the
  // bound is a budget of memory rather than a count of buckets.
  bool too_much_in_flight() const { return in_flight_.size() > 2 && in_flight_bytes_ > (std::int64_t{64} << 20); }
  bool done(std::size_t k) const {
    return std::all_of(works_[k].begin(), works_[k].end(), [](const auto& work) { return work->isCompleted(); });
  }
  void wait(std::size_t k) {
    try {
      for (auto& work : works_[k]) work->wait();
    } catch (const std::exception& e) {
      throw collective_error("the " + what() + " of gradient bucket " + std::to_string(k + 1) + " of " + std::to_string(buckets_.size()), e.what());
    }
    works_[k].clear();  // a finished work still holds its tensors: staging would outlive the step
  }
  void wait_all() {
    torch::NoGradGuard no_grad;
    if (to_owners_) {
      while (!in_flight_.empty()) retire_oldest();
      return;
    }
    for (std::size_t k = 0; k < buckets_.size(); ++k) {
      wait(k);
      if (compressed(k)) flats_[k].copy_(wires_[k]);
      else flats_[k].div_(group_->getSize());
    }
  }
  std::string what() const { return to_owners_ ? "reduce to its owners" : "all-reduce"; }

  struct place {
    std::size_t bucket = 0;
    std::int64_t offset = 0, numel = 0;
  };
  std::vector<torch::Tensor> parameters_;
  c10::intrusive_ptr<collective_group> group_;
  bool overlap_;
  std::vector<bucket> buckets_;
  std::vector<place> where_;
  torch::Dtype wire_;
  std::vector<torch::Tensor> flats_;  // the buckets: the parameters' .grad are views into them (all-reduce)
  std::vector<torch::Tensor> wires_;  // a bucket as sent, when compressed
  // reduce_to_owners: each bucket's staged gradients while it fills and is reduced, the pool
  // buffer it borrowed (if any), spare pool buffers, the buckets in flight, this rank's shards.
  std::vector<torch::Tensor> staging_, pooled_, spare_, owned_;
  std::int64_t pool_numel_ = 0;
  std::deque<std::size_t> in_flight_;
  std::int64_t in_flight_bytes_ = 0;
  std::vector<std::size_t> pending_;
  std::vector<bool> arrived_;
  std::vector<std::vector<c10::intrusive_ptr<c10d::Work>>> works_;  // a bucket's collectives (one, or one per owner)
  bool to_owners_;
  shard_plan plan_;
  std::vector<std::shared_ptr<torch::autograd::Node>> accumulators_;
  std::size_t next_ = 0;
  bool armed_ = false;
  std::int64_t launched_ = 0;
};

}  // namespace tp::detail
