#pragma once
// The c10d type tp's collectives go through: ProcessGroup in LibTorch 1.x, Backend from 2.0
// on (where ProcessGroupGloo and ProcessGroupNCCL became backends of a ProcessGroup). Both have
// the same broadcast and allreduce.
#include <stdexcept>
#include <string>
#include <utility>

#include <torch/version.h>

#if TORCH_VERSION_MAJOR >= 2
#include <torch/csrc/distributed/c10d/Backend.hpp>
namespace tp::detail {
using collective_group = c10d::Backend;
}
#else
#include <torch/csrc/distributed/c10d/ProcessGroup.hpp>
namespace tp::detail {
using collective_group = c10d::ProcessGroup;
}
#endif

namespace tp::detail {

// A collective that failed, and which one (the policy adds which ranks did not answer).
struct collective_error : std::runtime_error {
  collective_error(std::string operation, const std::string& message) : std::runtime_error(message), operation(std::move(operation)) {}
  std::string operation;
};

}  // namespace tp::detail
