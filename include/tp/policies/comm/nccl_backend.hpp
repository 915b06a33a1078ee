#pragma once
// The NCCL backend of MultiProcess: LibTorch's c10d ProcessGroupNCCL, one GPU per process (the
// process's LOCAL_RANK picks it). NCCL's unique id goes through the rendezvous store. Only with
// CUDA (TP_WITH_CUDA); one GPU cannot hold two NCCL ranks.
#ifdef TP_WITH_CUDA
#ifndef USE_C10D_NCCL
#define USE_C10D_NCCL  // c10d declares ProcessGroupNCCL only with it
#endif
#include <chrono>
#include <stdexcept>
#include <string>

#include <c10/cuda/CUDAFunctions.h>
#include <torch/csrc/distributed/c10d/ProcessGroupNCCL.hpp>
#include <torch/cuda.h>
#include <torch/types.h>

#include <tp/policies/distribution/detail/collective_group.hpp>
#include <tp/distributed/environment.hpp>

namespace tp::backend {

// The NCCL backend of MultiProcess<Backend>: each process's GPU is its LOCAL_RANK's, and its
// collectives are c10d's ProcessGroupNCCL.
struct NCCL {
  static constexpr const char* name = "nccl";

  static torch::Device device(const process_environment& pe) {
    const auto gpus = static_cast<int>(torch::cuda::device_count());
    if (pe.local_rank >= gpus)
      throw std::invalid_argument("tp::backend::NCCL: this process has LOCAL_RANK " + std::to_string(pe.local_rank) + " but the machine has " +
                                  std::to_string(gpus) + " GPU(s); start at most one process per GPU, or use tp::backend::Gloo");
    c10::cuda::set_device(static_cast<c10::DeviceIndex>(pe.local_rank));
    return torch::Device(torch::kCUDA, static_cast<c10::DeviceIndex>(pe.local_rank));
  }

  static c10::intrusive_ptr<detail::collective_group> connect(const c10::intrusive_ptr<c10d::Store>& store, const process_environment& pe,
                                                              std::chrono::milliseconds timeout) {
    auto options = c10d::ProcessGroupNCCL::Options::create();
    options->timeout = timeout;
    return c10::make_intrusive<c10d::ProcessGroupNCCL>(store, pe.rank, pe.world_size, options);
  }
};

}  // namespace tp::backend
#endif  // TP_WITH_CUDA
