#pragma once
// PNG encoding of [H, W, C] uint8 pixels (monitors/detail/image.hpp), with libpng's simplified API.
#include <cstddef>
#include <stdexcept>
#include <string>

#include <png.h>
#include <torch/types.h>

namespace tp::detail {

inline std::string encode_png(const torch::Tensor& pixels) {
  png_image image{};
  image.version = PNG_IMAGE_VERSION;
  image.height = static_cast<png_uint_32>(pixels.size(0));
  image.width = static_cast<png_uint_32>(pixels.size(1));
  const auto channels = pixels.size(2);
  image.format = channels == 1 ? PNG_FORMAT_GRAY : channels == 3 ? PNG_FORMAT_RGB : PNG_FORMAT_RGBA;
  png_alloc_size_t size = 0;
  const auto* data = pixels.data_ptr<std::uint8_t>();
  if (!png_image_write_to_memory(&image, nullptr, &size, 0, data, 0, nullptr))  // asks for the size
    throw std::runtime_error(std::string("tp: PNG encoding failed: ") + image.message);
  std::string out(size, '\0');
  if (!png_image_write_to_memory(&image, out.data(), &size, 0, data, 0, nullptr))
    throw std::runtime_error(std::string("tp: PNG encoding failed: ") + image.message);
  out.resize(size);
  return out;
}

}  // namespace tp::detail
