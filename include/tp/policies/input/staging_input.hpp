#pragma once
// StagingInput<Inner>: the next batch is already on the tower's device when the step asks for
// it (tensorpack's StagingInput). On a GPU, the batch after the one handed out is copied from
// pinned host memory on a side CUDA stream while the current step computes; the compute stream
// waits for that copy with an event, and the tensors are recorded on the compute stream so that
// the caching allocator does not reuse their memory too early. On the CPU there is nothing to
// stage and it adds nothing: next_batch() is the inner input's.
//
// - Pinned batches: for a CUDA device it asks the inner input for batches in pinned memory
//   (pin_memory(true): QueueInput makes them there on its thread, decode_images | batch(n)
//   decodes straight into pinned buffers), and pins on this thread only what still is not.
//   A host batch is kept until its copy has finished, in case its memory goes back to a pool
//   that does not know about the copy (LibTorch's pinned allocator does, decode_images' uses it).
// - Resumable when the inner input is: position() is that of the staged batch, which was taken
//   from the inner input but not yet handed out, and restore() drops it.
#include <optional>
#include <stdexcept>
#include <utility>

#include <torch/types.h>

#include <tp/batch.hpp>
#include <tp/concepts/input.hpp>
#include <tp/data/state.hpp>

#ifdef TP_WITH_CUDA
#include <ATen/cuda/CUDAEvent.h>
#include <c10/cuda/CUDACachingAllocator.h>
#include <c10/cuda/CUDAGuard.h>
#include <c10/cuda/CUDAStream.h>
#endif

namespace tp {

namespace detail {
// position() and restore() for a StagingInput whose inner input has them, and neither for one
// whose inner input has not (a member that exists only in part would break the input rules).
template <class Staging, bool resumable>
struct staging_position {};
template <class Staging>
struct staging_position<Staging, true> {
  data::position position() const { return static_cast<const Staging&>(*this).staged_position(); }
  void restore(const data::position& where) { static_cast<Staging&>(*this).restore_staged(where); }
};
}  // namespace detail

template <input_policy Inner>
class StagingInput : public detail::staging_position<StagingInput<Inner>, resumable_input<Inner>> {
 public:
  using batch_type = batch_t<Inner>;

  explicit StagingInput(Inner inner, torch::Device device = torch::kCPU) : inner_(std::move(inner)), device_(device) {
    if (device_.is_cuda()) {
#ifdef TP_WITH_CUDA
      if (!device_.has_index()) device_ = torch::Device(torch::kCUDA, 0);
      if constexpr (pinned_memory_input<Inner>) inner_.pin_memory(true);
#else
      throw std::invalid_argument("tp::StagingInput: device " + device_.str() +
                                  " was asked for, but tp was built without CUDA (this LibTorch has none)");
#endif
    }
  }

  batch_type next_batch() {
#ifdef TP_WITH_CUDA
    if (device_.is_cuda()) return next_staged();
#endif
    return inner_.next_batch();
  }

  void start() {
    if constexpr (background_input<Inner>) inner_.start();
  }
  void stop() {
    if constexpr (background_input<Inner>) inner_.stop();
  }
  torch::Device device() const noexcept { return device_; }
  Inner& inner() noexcept { return inner_; }
  // The inner input's batches in one pass, where it can tell.
  std::optional<std::int64_t> batches_per_pass() {
    if constexpr (sized_input<Inner>) return inner_.batches_per_pass();
    else return std::nullopt;
  }
  void channels_last(bool on) {
    if constexpr (channels_last_input<Inner>) inner_.channels_last(on);
  }

 private:
  friend detail::staging_position<StagingInput, resumable_input<Inner>>;

  // Where the next batch handed out comes from: the staged one's place, else the inner input's.
  data::position staged_position() const {
#ifdef TP_WITH_CUDA
    if (next_) return next_->position;
#endif
    return inner_.position();
  }
  void restore_staged(const data::position& where) {
#ifdef TP_WITH_CUDA
    if (next_) next_->copied.synchronize();  // its host memory may be reused once it is dropped
    next_.reset();
#endif
    inner_.restore(where);
  }

#ifdef TP_WITH_CUDA
  struct staged {
    batch_type batch, host;  // on the device, and the pinned batch it is copied from
    at::cuda::CUDAEvent copied;
    data::position position;  // the inner input's before this batch (when it is resumable)
  };

  void stage() {
    data::position before;
    if constexpr (resumable_input<Inner>) before = inner_.position();
    auto host = pin_batch(inner_.next_batch());
    if (!side_) side_.emplace(c10::cuda::getStreamFromPool(/*isHighPriority=*/false, device_.index()));
    c10::cuda::CUDAStreamGuard on_side(*side_);
    auto on_device = to_device(host, device_);
    next_.emplace(staged{std::move(on_device), std::move(host), at::cuda::CUDAEvent(), std::move(before)});
    next_->copied.record(*side_);
  }

  batch_type next_staged() {
    if (!next_) stage();
    const auto compute = c10::cuda::getCurrentCUDAStream(device_.index());
    next_->copied.block(compute);
    auto batch = map_tensors(std::move(next_->batch), [&](torch::Tensor t) {
      c10::cuda::CUDACachingAllocator::recordStream(t.storage().data_ptr(), compute);
      return t;
    });
    // The host batch's memory may return to a pool that does not know about the copy, and be
    // written again: only after the copy out of it has finished (issued a step ago: no wait).
    next_->copied.synchronize();
    next_.reset();
    stage();  // the following batch, copied while this one is used
    return batch;
  }

  std::optional<c10::cuda::CUDAStream> side_;
  std::optional<staged> next_;
#endif
  Inner inner_;
  torch::Device device_;
};

}  // namespace tp
