#pragma once
// transforms: decoding and augmentation of one example, with torchvision's semantics, built
// fluently and applied in the order written:
//
//   auto train = tp::data::transforms(tp::data::color::rgb)
//                    .random_resized_crop(224, 224)              // scale (0.08, 1), ratio (3/4, 4/3)
//                    .random_horizontal_flip(0.5)
//                    .normalize({0.485, 0.456, 0.406}, {0.229, 0.224, 0.225});
//   auto eval = tp::data::transforms().resize(256).center_crop(224, 224);
//   torch::Tensor image = train(bytes, path, tp::data::example_seed(7, pass, id));
//
// - Steps: random_resized_crop (torchvision's sampling: area fraction uniform in `scale`,
//   log aspect ratio uniform in log(`ratio`), 10 tries, then the centre crop of the nearest
//   allowed ratio), random_horizontal_flip(p), resize (shorter side, or height x width),
//   center_crop (padding with 0 when larger than the image, as torchvision does), normalize
//   (ToTensor's /255 first while the image is uint8, then (x - mean) / std), and then(f), the
//   user's own step: f(image [C, H, W], example_random&) -> image.
// - Output: uint8 [C, H, W] (C = 1 for grey, 3 for rgb), float once normalize (or a hook
//   returning floats) ran.
// - Every draw comes from one example_random seeded by `seed` alone (example_random.hpp).
//   Crops are drawn on the file's own size, so they do not change with the fast path below.
// - Speed: the steps are planned on the header's size before any pixel is decoded; crops,
//   flips and normalization fold into one bilinear pass (resample.hpp) from the decoded pixels
//   into the output tensor. A second resize, a padding centre crop or a hook makes the image
//   so far real first, as torchvision would. When the first resize shrinks a JPEG, it is
//   decoded at the smallest libjpeg-turbo scale of 1/8, 1/4 and 1/2 (its SIMD ones, as PIL's
//   draft) still at least the output size (decode.hpp):
//   several times faster for large photos, and a slightly smoother result than a full decode
//   and bilinear shrinking; scaled_decode(false) turns it off. Of a JPEG, only the rows and
//   columns the filter reads around the crop are decoded (the same pixels: the rows below it
//   are not decoded at all, those above only entropy-decoded).
// - operator()(bytes, path, seed, into) writes the result to the memory into(sizes, type) gives,
//   if it gives any: decode_images passes the slot of the batch being made.
// - operator() is const and thread-safe; a bad file is a bad_file naming the path. Each setter
//   checks its arguments (std::invalid_argument).
#include <array>
#include <cmath>
#include <cstdint>
#include <functional>
#include <optional>
#include <span>
#include <stdexcept>
#include <string>
#include <utility>
#include <vector>

#include <torch/torch.h>

#include <tp/data/image/bad_file.hpp>
#include <tp/data/image/decode.hpp>
#include <tp/data/image/example_random.hpp>
#include <tp/data/image/image_canvas.hpp>

namespace tp::data {

// torchvision 0.14's RandomResizedCrop.get_params on an image of height x width: the area
// fraction uniform in `scale`, the log aspect ratio uniform in log(`ratio`), 10 tries, then the
// centre crop of the nearest allowed ratio. Python's round() rounds halves to even, as nearbyint
// does in the default rounding mode.
struct crop_box {
  std::int64_t top = 0, left = 0, height = 0, width = 0;
};
// The box RandomResizedCrop takes from an image of height x width, drawn from random (see
// crop_box).
inline crop_box random_resized_crop_box(std::int64_t height, std::int64_t width, std::array<double, 2> scale,
                                        std::array<double, 2> ratio, example_random& random) {
  const double area = double(height) * double(width), log_lo = std::log(ratio[0]), log_hi = std::log(ratio[1]);
  for (int attempt = 0; attempt < 10; ++attempt) {
    const double target = area * random.uniform(scale[0], scale[1]);
    const double aspect = std::exp(random.uniform(log_lo, log_hi));
    const auto w = static_cast<std::int64_t>(std::nearbyint(std::sqrt(target * aspect)));
    const auto h = static_cast<std::int64_t>(std::nearbyint(std::sqrt(target / aspect)));
    if (0 < w && w <= width && 0 < h && h <= height) {
      const std::int64_t top = random.below(height - h + 1);  // torchvision draws the row first
      return {top, random.below(width - w + 1), h, w};
    }
  }
  const double in_ratio = double(width) / double(height);
  std::int64_t w = width, h = height;
  if (in_ratio < ratio[0]) h = static_cast<std::int64_t>(std::nearbyint(double(w) / ratio[0]));
  else if (in_ratio > ratio[1]) w = static_cast<std::int64_t>(std::nearbyint(double(h) * ratio[1]));
  return {(height - h) / 2, (width - w) / 2, h, w};
}

class transforms {
 public:
  using hook = std::function<torch::Tensor(torch::Tensor, example_random&)>;

  explicit transforms(color c = color::rgb) : color_(c) {}

  transforms& random_resized_crop(std::int64_t height, std::int64_t width, std::array<double, 2> scale = {0.08, 1.0},
                                  std::array<double, 2> ratio = {3.0 / 4.0, 4.0 / 3.0}) {
    check_size("random_resized_crop", height, width);
    if (!(scale[0] > 0 && scale[0] <= scale[1] && scale[1] <= 1))
      throw std::invalid_argument("tp::data::transforms::random_resized_crop: scale must be (min, max) with 0 < min <= max <= 1, got (" +
                                  std::to_string(scale[0]) + ", " + std::to_string(scale[1]) + ")");
    if (!(ratio[0] > 0 && ratio[0] <= ratio[1]))
      throw std::invalid_argument("tp::data::transforms::random_resized_crop: ratio must be (min, max) with 0 < min <= max, got (" +
                                  std::to_string(ratio[0]) + ", " + std::to_string(ratio[1]) + ")");
    return add(step(kind::random_resized_crop, height, width, scale[0], scale[1], ratio[0], ratio[1]));
  }
  transforms& random_resized_crop(std::int64_t size) { return random_resized_crop(size, size); }

  transforms& random_horizontal_flip(double p = 0.5) {
    if (!(p >= 0 && p <= 1))
      throw std::invalid_argument("tp::data::transforms::random_horizontal_flip: p must be in [0, 1], got " + std::to_string(p));
    return add(step(kind::flip, 0, 0, p));
  }

  // The shorter side becomes `shorter`, the longer one int(shorter * long / short).
  transforms& resize(std::int64_t shorter) {
    check_size("resize", shorter, shorter);
    return add(step(kind::resize_shorter, shorter, shorter));
  }
  transforms& resize(std::int64_t height, std::int64_t width) {
    check_size("resize", height, width);
    return add(step(kind::resize, height, width));
  }

  transforms& center_crop(std::int64_t height, std::int64_t width) {
    check_size("center_crop", height, width);
    return add(step(kind::center_crop, height, width));
  }
  transforms& center_crop(std::int64_t size) { return center_crop(size, size); }

  // One mean and std per channel, or one for all channels.
  transforms& normalize(std::vector<double> mean, std::vector<double> std) {
    if (mean.empty() || mean.size() != std.size())
      throw std::invalid_argument("tp::data::transforms::normalize: mean and std need the same number of values (one per channel, "
                                  "or one for all), got " + std::to_string(mean.size()) + " and " + std::to_string(std.size()));
    for (double s : std)
      if (!(s > 0) || !std::isfinite(s))
        throw std::invalid_argument("tp::data::transforms::normalize: every std must be > 0, got " + std::to_string(s));
    const std::size_t channels = color_ == color::rgb ? 3 : 1;
    bool hooked = false;  // a hook may change the channels: then it is checked per image
    for (const auto& s : steps_) hooked = hooked || s.what == kind::user;
    if (!hooked && mean.size() != 1 && mean.size() != channels)
      throw std::invalid_argument("tp::data::transforms::normalize: " + std::to_string(mean.size()) + " means and stds for " +
                                  (color_ == color::rgb ? "RGB (3 channels)" : "grey (1 channel)") + " images; give one per channel, or one");
    step s(kind::normalize);
    s.mean = std::move(mean);
    s.std = std::move(std);
    return add(std::move(s));
  }

  transforms& then(hook f) {
    if (!f) throw std::invalid_argument("tp::data::transforms::then: the function is empty");
    step s(kind::user);
    s.user = std::move(f);
    return add(std::move(s));
  }

  // The fast path for shrinking JPEGs (on by default); off, every JPEG is decoded at full size.
  transforms& scaled_decode(bool on) {
    scaled_decode_ = on;
    return *this;
  }

  color colors() const noexcept { return color_; }

  torch::Tensor operator()(std::span<const std::uint8_t> bytes, const std::string& path, std::uint64_t seed) const {
    return (*this)(bytes, path, seed, nullptr);
  }

  // The same, written to into(sizes, type) when that gives memory (for a contiguous image of
  // those sizes and type: decode_images passes a slot of the batch being made, so that batching
  // it copies nothing), and then it returns no tensor; into a tensor of its own, returned, when
  // into gives nullptr.
  using output = std::function<void*(torch::IntArrayRef sizes, torch::ScalarType type)>;
  torch::Tensor operator()(std::span<const std::uint8_t> bytes, const std::string& path, std::uint64_t seed, const output& into) const {
    example_random random(seed);
    detail::image_canvas image(bytes, path, color_, scaled_decode_);
    for (const auto& s : steps_) {
      switch (s.what) {
        case kind::random_resized_crop: {
          const auto box = random_resized_crop_box(image.height(), image.width(), {s.a, s.b}, {s.c, s.d}, random);
          image.crop(box.top, box.left, box.height, box.width);
          image.resize(s.height, s.width);
          break;
        }
        case kind::flip:
          if (random.uniform(0, 1) < s.a) image.flip();
          break;
        case kind::resize_shorter: {
          const std::int64_t h = image.height(), w = image.width(), shorter = std::min(h, w), longer = std::max(h, w);
          const auto other = static_cast<std::int64_t>(double(s.height) * double(longer) / double(shorter));
          if (w <= h) image.resize(other, s.height);
          else image.resize(s.height, other);
          break;
        }
        case kind::resize: image.resize(s.height, s.width); break;
        case kind::center_crop: image.center_crop(s.height, s.width); break;
        case kind::normalize: image.normalize(s.mean, s.std); break;
        case kind::user: image.replace(s.user(image.materialize(), random)); break;
      }
    }
    if (into)
      if (void* memory = into(image.sizes(), image.type())) {
        image.write(memory);
        return {};
      }
    return image.materialize();
  }

 private:
  enum class kind { random_resized_crop, flip, resize_shorter, resize, center_crop, normalize, user };
  struct step {
    explicit step(kind k, std::int64_t h = 0, std::int64_t w = 0, double a = 0, double b = 0, double c = 0, double d = 0)
        : what(k), height(h), width(w), a(a), b(b), c(c), d(d) {}
    kind what;
    std::int64_t height = 0, width = 0;
    double a = 0, b = 0, c = 0, d = 0;
    std::vector<double> mean, std;
    hook user;
  };

  transforms& add(step s) {
    steps_.push_back(std::move(s));
    return *this;
  }
  static void check_size(const char* what, std::int64_t h, std::int64_t w) {
    if (h <= 0 || w <= 0)
      throw std::invalid_argument(std::string("tp::data::transforms::") + what + ": sizes must be > 0, got " + std::to_string(h) +
                                  " x " + std::to_string(w));
  }

  color color_;
  bool scaled_decode_ = true;
  std::vector<step> steps_;
};

}  // namespace tp::data
