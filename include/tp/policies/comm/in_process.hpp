#pragma once
// InProcess: the reduction of CPU towers in one process. The mean of the towers' flat buckets,
// computed once and shared by every tower.
#include <cstddef>
#include <stdexcept>
#include <vector>

#include <torch/types.h>

namespace tp {

namespace detail {
// The mean of tensors of one shape, on the first one's device.
inline torch::Tensor mean_of(const std::vector<torch::Tensor>& tensors) {
  torch::NoGradGuard no_grad;
  auto mean = tensors[0].clone();
  for (std::size_t i = 1; i < tensors.size(); ++i) mean.add_(tensors[i].to(mean.device()));
  return mean.div_(static_cast<double>(tensors.size()));
}
}  // namespace detail

class InProcess {
 public:
  explicit InProcess(const std::vector<torch::Device>& devices) { check_devices(devices); }

  static void check_devices(const std::vector<torch::Device>& devices) {
    for (const auto& d : devices)
      if (!d.is_cpu())
        throw std::invalid_argument("tp::InProcess reduces CPU towers, but a tower is on " + d.str() +
                                    "; GPU towers are reduced with tp::NCCL");
  }

  // Replaces every tower's flat bucket by the mean of all of them (one shared tensor).
  void all_reduce_mean(std::vector<torch::Tensor>& flats) {
    const auto mean = detail::mean_of(flats);
    for (auto& f : flats) f = mean;
  }
};

}  // namespace tp
