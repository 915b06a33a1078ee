#pragma once
// The images a trainer's put_image takes, checked and brought to one layout: uint8 pixels on
// the CPU, [H, W, C] with C = 1 (grey), 3 (RGB) or 4 (RGBA), contiguous.
#include <sstream>
#include <stdexcept>
#include <string>
#include <string_view>

#include <torch/types.h>

namespace tp::detail {

inline torch::Tensor image_pixels(const torch::Tensor& image, std::string_view name) {
  const auto fail = [&](const std::string& what) {
    std::ostringstream shape;
    if (image.defined()) shape << image.sizes() << " " << image.scalar_type();
    throw std::invalid_argument("tp: put_image(\"" + std::string(name) + "\"): " + what + (image.defined() ? ", got " + shape.str() : "") +
                                "; pass [H, W], [C, H, W] or [H, W, C] with C = 1, 3 or 4, uint8 or floating point in [0, 1]");
  };
  if (!image.defined()) fail("the image is an undefined tensor");
  const auto channels = [](std::int64_t c) { return c == 1 || c == 3 || c == 4; };
  torch::Tensor hwc;
  if (image.dim() == 2) hwc = image.unsqueeze(2);
  else if (image.dim() == 3 && channels(image.size(0)) && !channels(image.size(2))) hwc = image.permute({1, 2, 0});
  else if (image.dim() == 3 && channels(image.size(2))) hwc = image;
  else if (image.dim() == 3 && channels(image.size(0))) hwc = image.permute({1, 2, 0});
  else fail("the image must have 2 dimensions, or 3 with 1, 3 or 4 channels first or last");
  if (hwc.size(0) == 0 || hwc.size(1) == 0) fail("the image is empty");
  if (hwc.scalar_type() == torch::kUInt8) return hwc.to(torch::kCPU).contiguous();
  if (!hwc.is_floating_point()) fail("the pixels must be uint8 or floating point");
  const auto scaled = hwc.detach().to(torch::kCPU, torch::kFloat).nan_to_num(0).clamp(0, 1).mul(255).round();
  return scaled.to(torch::kUInt8).contiguous();
}

}  // namespace tp::detail
