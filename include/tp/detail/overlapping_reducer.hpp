#pragma once
// Averages the gradients of every process while backward is still running (PyTorch DDP's
// reducer, Horovod's fusion): parameters are fused into buckets in reverse order (backward
// produces the last layers' gradients first); a hook on each parameter copies its gradient into
// its bucket, and a bucket whose gradients are all in is all-reduced at once, asynchronously.
// Buckets are launched strictly in order, so every process makes the same collectives in the
// same order. finish() sends what backward did not reach (zeros), waits for every bucket, and
// writes the averages into the parameters' .grad.
//
// With overlap off, the same buckets are all-reduced one after the other after backward: the
// baseline the benchmark compares against.
#include <cstddef>
#include <stdexcept>
#include <memory>
#include <string>
#include <vector>

#include <torch/csrc/distributed/c10d/ProcessGroup.hpp>
#include <torch/types.h>

#include <tp/detail/gradient_buckets.hpp>

namespace tp::detail {

// A collective that failed, and which one.
struct collective_error : std::runtime_error {
  collective_error(std::string operation, const std::string& message) : std::runtime_error(message), operation(std::move(operation)) {}
  std::string operation;
};

class overlapping_reducer {
 public:
  overlapping_reducer(std::vector<torch::Tensor> parameters, c10::intrusive_ptr<c10d::ProcessGroup> group, std::size_t bucket_bytes, bool overlap)
      : parameters_(std::move(parameters)), group_(std::move(group)), overlap_(overlap) {
    std::vector<torch::Tensor> reversed(parameters_.rbegin(), parameters_.rend());
    buckets_ = make_buckets(reversed, bucket_bytes);
    for (auto& b : buckets_)
      for (auto& i : b.parameters) i = parameters_.size() - 1 - i;  // back to indices into parameters_
    where_.resize(parameters_.size());
    for (std::size_t k = 0; k < buckets_.size(); ++k) {
      std::int64_t offset = 0;
      for (std::size_t j = 0; j < buckets_[k].parameters.size(); ++j) {
        where_[buckets_[k].parameters[j]] = {k, offset};
        offset += buckets_[k].sizes[j];
      }
      const auto& first = parameters_[buckets_[k].parameters.front()];
      flats_.push_back(torch::zeros({offset}, first.options().requires_grad(false)));
    }
    pending_.resize(buckets_.size());
    arrived_.resize(parameters_.size());
    works_.resize(buckets_.size());
  }

  // Registers the gradient hooks (once; the reducer must then stay where it is).
  void hook() {
    for (std::size_t i = 0; i < parameters_.size(); ++i)
      if (parameters_[i].requires_grad())
        parameters_[i].register_hook([this, i](const torch::Tensor& grad) { arrive(i, grad); });
  }

  // Call before backward: from here on, arriving gradients go to the buckets.
  void begin() {
    for (std::size_t k = 0; k < buckets_.size(); ++k) pending_[k] = buckets_[k].parameters.size();
    std::fill(arrived_.begin(), arrived_.end(), false);
    next_ = 0;
    armed_ = overlap_;
  }

  // Call after backward: completes the reduction and writes the averages into .grad.
  void finish() {
    if (!overlap_) return reduce_now();
    armed_ = false;
    torch::NoGradGuard no_grad;
    for (std::size_t i = 0; i < parameters_.size(); ++i)
      if (!arrived_[i]) {  // backward did not reach it: it contributes zeros
        const auto [k, offset] = where_[i];
        flats_[k].narrow(0, offset, parameters_[i].numel()).zero_();
        arrived_[i] = true;
        if (--pending_[k] == 0) launch_ready();
      }
    wait_and_write_back();
  }

  // Averages the gradients now in .grad: every bucket flattened, all-reduced in order, written
  // back (the whole reduction after backward).
  void reduce_now() {
    armed_ = false;
    torch::NoGradGuard no_grad;
    for (std::size_t k = 0; k < buckets_.size(); ++k) flats_[k].copy_(flatten_gradients(buckets_[k], parameters_));
    for (std::size_t k = 0; k < buckets_.size(); ++k) launch(k);
    wait_and_write_back();
  }

  std::size_t buckets() const noexcept { return buckets_.size(); }

 private:
  void wait_and_write_back() {
    for (std::size_t k = 0; k < buckets_.size(); ++k) {
      try {
        works_[k]->wait();
      } catch (const std::exception& e) {
        throw collective_error("the all-reduce of gradient bucket " + std::to_string(k + 1) + " of " + std::to_string(buckets_.size()), e.what());
      }
      flats_[k].div_(group_->getSize());
      unflatten_gradients(buckets_[k], flats_[k], parameters_);
    }
  }

  void arrive(std::size_t i, const torch::Tensor& grad) {
    if (!armed_ || arrived_[i]) return;
    const auto [k, offset] = where_[i];
    {
      torch::NoGradGuard no_grad;
      flats_[k].narrow(0, offset, grad.numel()).copy_(grad.reshape(-1));
    }
    arrived_[i] = true;
    if (--pending_[k] == 0) launch_ready();
  }
  // Launches, in order, every bucket whose gradients are all in.
  void launch_ready() {
    while (next_ < buckets_.size() && pending_[next_] == 0) launch(next_++);
  }
  void launch(std::size_t k) {
    std::vector<torch::Tensor> one{flats_[k]};
    try {
      works_[k] = group_->allreduce(one);
    } catch (const std::exception& e) {
      throw collective_error("starting the all-reduce of gradient bucket " + std::to_string(k + 1), e.what());
    }
  }

  struct place {
    std::size_t bucket = 0;
    std::int64_t offset = 0;
  };
  std::vector<torch::Tensor> parameters_;
  c10::intrusive_ptr<c10d::ProcessGroup> group_;
  bool overlap_;
  std::vector<bucket> buckets_;
  std::vector<place> where_;
  std::vector<torch::Tensor> flats_;
  std::vector<std::size_t> pending_;
  std::vector<bool> arrived_;
  std::vector<c10::intrusive_ptr<c10d::Work>> works_;
  std::size_t next_ = 0;
  bool armed_ = false;
};

}  // namespace tp::detail
