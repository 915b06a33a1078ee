#pragma once
// The Gloo backend of MultiProcess: LibTorch's c10d ProcessGroupGloo, for CPU tensors. Its
// network device is the interface named by GLOO_SOCKET_IFNAME if set (as in PyTorch), else the
// address this host's name resolves to.
#ifndef USE_C10D_GLOO
#define USE_C10D_GLOO  // c10d declares ProcessGroupGloo only with it
#endif
#include <chrono>
#include <cstdlib>
#include <string>

#include <torch/csrc/distributed/c10d/ProcessGroupGloo.hpp>
#include <torch/types.h>

#include <tp/policies/distribution/detail/collective_group.hpp>
#include <tp/distributed/environment.hpp>

// The backends of MultiProcess<Backend>, how the processes of a run reach each other: Gloo (CPU
// tensors) or NCCL (one GPU per process).
namespace tp::backend {

struct Gloo {
  static constexpr const char* name = "gloo";

  static torch::Device device(const process_environment&) { return torch::kCPU; }

  static c10::intrusive_ptr<detail::collective_group> connect(const c10::intrusive_ptr<c10d::Store>& store, const process_environment& pe,
                                                        std::chrono::milliseconds timeout) {
    auto options = c10d::ProcessGroupGloo::Options::create(timeout);
    if (const char* ifname = std::getenv("GLOO_SOCKET_IFNAME"); ifname && *ifname)
      options->devices.push_back(c10d::ProcessGroupGloo::createDeviceForInterface(ifname));
    else
      options->devices.push_back(c10d::ProcessGroupGloo::createDefaultDevice());
    return c10::make_intrusive<c10d::ProcessGroupGloo>(store, pe.rank, pe.world_size, options);
  }
};

}  // namespace tp::backend
