#pragma once
// StagingInput<Inner>: the next batch is already on the tower's device when the step asks for
// it (tensorpack's StagingInput). On a GPU, the batch after the one handed out is copied from
// pinned host memory on a side CUDA stream while the current step computes; the compute stream
// waits for that copy with an event, and the tensors are recorded on the compute stream so that
// the caching allocator does not reuse their memory too early. On the CPU there is nothing to
// stage and it adds nothing: next_batch() is the inner input's.
#include <optional>
#include <stdexcept>
#include <utility>

#include <torch/types.h>

#include <tp/batch.hpp>
#include <tp/concepts/input.hpp>

#ifdef TP_WITH_CUDA
#include <ATen/cuda/CUDAEvent.h>
#include <c10/cuda/CUDACachingAllocator.h>
#include <c10/cuda/CUDAGuard.h>
#include <c10/cuda/CUDAStream.h>
#endif

namespace tp {

template <input_policy Inner>
class StagingInput {
 public:
  using batch_type = batch_t<Inner>;

  explicit StagingInput(Inner inner, torch::Device device = torch::kCPU) : inner_(std::move(inner)), device_(device) {
    if (device_.is_cuda()) {
#ifdef TP_WITH_CUDA
      if (!device_.has_index()) device_ = torch::Device(torch::kCUDA, 0);
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
#ifdef TP_WITH_CUDA
  struct staged {
    batch_type batch;
    at::cuda::CUDAEvent copied;
  };

  void stage() {
    auto host = map_tensors(inner_.next_batch(), [](torch::Tensor t) { return t.is_cuda() || t.is_pinned() ? t : t.pin_memory(); });
    if (!side_) side_.emplace(c10::cuda::getStreamFromPool(/*isHighPriority=*/false, device_.index()));
    c10::cuda::CUDAStreamGuard on_side(*side_);
    next_.emplace(staged{to_device(std::move(host), device_), at::cuda::CUDAEvent()});
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
