#pragma once
// image_canvas: the image of transforms.hpp while its steps run, kept as "this box of these
// source pixels, resampled to this size, maybe mirrored, with this per-channel affine map" and
// made real (one resample.hpp pass into a new tensor) only when a step needs pixels or the
// steps end. Before that, the source is the file's header: crops are planned on the file's own
// size, and the first real pixels are decoded at the smallest JPEG scale the plan allows, and
// only as far as the filter reaches around the box (a crop of a JPEG decodes about its part).
//
// Exactness: a crop (of integer pixels of the current image) composes with a pending resize
// exactly, since the filter then samples the same positions with the same support; a second
// resize does not, so it first makes the image real, as torchvision's two interpolations do.
#include <algorithm>
#include <array>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <optional>
#include <span>
#include <stdexcept>
#include <string>
#include <vector>

#include <torch/torch.h>

#include <tp/data/image/bad_file.hpp>
#include <tp/data/image/decode.hpp>
#include <tp/data/image/resample.hpp>

namespace tp::data::detail {

class image_canvas {
 public:
  static constexpr std::int64_t max_channels = 64;

  image_canvas(std::span<const std::uint8_t> bytes, const std::string& path, color c, bool scaled_decode)
      : bytes_(bytes), path_(path), color_(c), scaled_decode_(scaled_decode) {
    channels_ = c == color::rgb ? 3 : 1;
    if (is_jpeg(bytes)) {  // kept, so that the decoder does not parse the header again
      jpeg_ = jpeg_header(bytes, path);
      set_source(jpeg_->height, jpeg_->width);
    } else {
      const auto header = read_header(bytes, path);
      set_source(header.height, header.width);
    }
  }

  std::int64_t height() const noexcept { return out_h_; }
  std::int64_t width() const noexcept { return out_w_; }

  // Keeps rows [top, top + h) and columns [left, left + w) of the current image.
  void crop(std::int64_t top, std::int64_t left, std::int64_t h, std::int64_t w) {
    if (flip_) left = out_w_ - w - left;  // the box is kept unmirrored
    const double sx = box_w_ / double(out_w_), sy = box_h_ / double(out_h_);
    box_x_ += double(left) * sx;
    box_y_ += double(top) * sy;
    box_w_ = double(w) * sx;
    box_h_ = double(h) * sy;
    out_w_ = w;
    out_h_ = h;
  }

  void resize(std::int64_t h, std::int64_t w) {
    if (resampling()) materialize();
    out_h_ = h;
    out_w_ = w;
  }

  void flip() noexcept { flip_ = !flip_; }

  // torchvision's center_crop: pads with 0 (after what came before) when the crop is larger.
  void center_crop(std::int64_t h, std::int64_t w) {
    if (h > out_h_ || w > out_w_) {
      auto image = materialize();
      const std::int64_t top = h > out_h_ ? (h - out_h_) / 2 : 0, left = w > out_w_ ? (w - out_w_) / 2 : 0;
      auto padded = torch::zeros({channels_, std::max(h, out_h_), std::max(w, out_w_)}, image.options());
      padded.narrow(1, top, out_h_).narrow(2, left, out_w_).copy_(image);
      rebase(padded);
    }
    crop(static_cast<std::int64_t>(std::nearbyint(double(out_h_ - h) / 2.0)),
         static_cast<std::int64_t>(std::nearbyint(double(out_w_ - w) / 2.0)), h, w);
  }

  void normalize(const std::vector<double>& mean, const std::vector<double>& std) {
    if (mean.size() != 1 && std::int64_t(mean.size()) != channels_)
      throw std::invalid_argument("tp::data::transforms::normalize: " + std::to_string(mean.size()) + " means and stds for an image of " +
                                  std::to_string(channels_) + " channels (" + path_ + ")");
    if (!floats_) {  // ToTensor: [0, 255] to [0, 1]
      for (auto& s : scale_) s /= 255.0;
      floats_ = true;
    }
    for (std::int64_t c = 0; c < channels_; ++c) {
      const std::size_t i = mean.size() == 1 ? 0 : std::size_t(c);
      scale_[c] /= std[i];
      offset_[c] = (offset_[c] - mean[i]) / std[i];
    }
  }

  // What materialize() makes: [C, H, W] of this type.
  std::array<std::int64_t, 3> sizes() const noexcept { return {channels_, out_h_, out_w_}; }
  torch::ScalarType type() const noexcept { return floats_ ? torch::kFloat : torch::kUInt8; }

  // The image as it stands: uint8 or float [C, H, W]. Later steps continue from it.
  torch::Tensor materialize() {
    if (!source_u8_ && !source_f32_) decode();
    if (unchanged()) return tensor_;
    auto out = torch::empty({channels_, out_h_, out_w_}, type());
    render(out.data_ptr());
    rebase(out);
    return out;
  }
  // The same, written to `memory`, of a contiguous [C, H, W] image of sizes() and type(): the
  // last step (a slot of a batch being made).
  void write(void* memory) {
    if (!source_u8_ && !source_f32_) decode();
    if (unchanged()) std::memcpy(memory, tensor_.data_ptr(), tensor_.nbytes());
    else render(memory);
  }

  // The result of the user's step.
  void replace(torch::Tensor image) {
    if (!image.defined() || image.dim() != 3 || image.numel() == 0)
      throw std::invalid_argument("tp::data::transforms::then: the function must return a non-empty image [C, H, W], got " +
                                  (image.defined() ? std::to_string(image.dim()) + " dimensions" : std::string("no tensor")) +
                                  " (" + path_ + ")");
    if (image.size(0) > max_channels)
      throw std::invalid_argument("tp::data::transforms::then: at most " + std::to_string(max_channels) + " channels, got " +
                                  std::to_string(image.size(0)) + " (" + path_ + ")");
    floats_ = image.scalar_type() != torch::kUInt8;
    image = image.to(torch::kCPU, floats_ ? torch::kFloat : torch::kUInt8).contiguous();
    channels_ = image.size(0);
    rebase(image);
  }

 private:
  bool resampling() const noexcept { return box_w_ != double(out_w_) || box_h_ != double(out_h_); }
  // The image is tensor_ as it is (a hook's result, with nothing after it).
  bool unchanged() const noexcept {
    return tensor_.defined() && !resampling() && !flip_ && box_x_ == 0 && box_y_ == 0 && out_h_ == src_h_ && out_w_ == src_w_ &&
           identity_affine();
  }
  // One resample.hpp pass from the source into `memory` ([C, H, W] of type()).
  void render(void* memory) const {
    std::array<float, max_channels> scale, offset;  // channels_ of each are read: not zeroed (512 bytes per image)
    for (std::int64_t c = 0; c < channels_; ++c) scale[c] = float(scale_[c]), offset[c] = float(offset_[c]);
    auto run = [&](const auto& src) {
      if (floats_) resample(src, box_x_, box_y_, box_w_, box_h_, out_h_, out_w_, flip_, scale.data(), offset.data(), channels_, static_cast<float*>(memory));
      else resample(src, box_x_, box_y_, box_w_, box_h_, out_h_, out_w_, flip_, scale.data(), offset.data(), channels_, static_cast<std::uint8_t*>(memory));
    };
    if (source_u8_) run(pixels<std::uint8_t>{source_u8_, src_h_, src_w_, src_channels_, stride_y_, stride_x_, stride_c_});
    else run(pixels<float>{source_f32_, src_h_, src_w_, src_channels_, stride_y_, stride_x_, stride_c_});
  }
  bool identity_affine() const noexcept {
    for (std::int64_t c = 0; c < channels_; ++c)
      if (scale_[c] != 1.0 || offset_[c] != 0.0) return false;
    return true;
  }

  void set_source(std::int64_t h, std::int64_t w) {
    src_h_ = out_h_ = h;
    src_w_ = out_w_ = w;
    box_x_ = box_y_ = 0;
    box_w_ = double(w);
    box_h_ = double(h);
    flip_ = false;
    scale_.fill(1.0);  // arrays, not vectors: no allocation per image
    offset_.fill(0.0);
  }

  void rebase(torch::Tensor image) {
    tensor_ = image;
    source_u8_ = nullptr;
    source_f32_ = nullptr;
    if (image.scalar_type() == torch::kUInt8) source_u8_ = image.data_ptr<std::uint8_t>();
    else source_f32_ = image.data_ptr<float>();
    set_source(image.size(1), image.size(2));
    src_channels_ = image.size(0);
    stride_c_ = image.size(1) * image.size(2);
    stride_y_ = image.size(2);
    stride_x_ = 1;
  }

  // Decodes the file; a JPEG at the smallest scale that keeps the pending resize from enlarging,
  // and only the rows and columns the resampling reads (jpeg_decode), whatever libjpeg must
  // decode around them.
  void decode() {
    thread_local std::vector<std::uint8_t> buffer;  // reused: no allocation per image
    if (!jpeg_) {
      const auto d = decode_hwc(bytes_, path_, color_, std::nullopt, buffer, /*keep_grey=*/true);
      use_decoded(d, buffer, 1.0, 1.0);
      return;
    }
    std::optional<std::array<std::int64_t, 2>> at_least;
    if (scaled_decode_ && (box_w_ > double(out_w_) || box_h_ > double(out_h_)))
      at_least = std::array<std::int64_t, 2>{static_cast<std::int64_t>(std::ceil(double(src_h_) * double(out_h_) / box_h_)),
                                             static_cast<std::int64_t>(std::ceil(double(src_w_) * double(out_w_) / box_w_))};
    const int num = jpeg_scale(*jpeg_, at_least);
    const double fx = double(jpeg_scaled(src_w_, num)) / double(src_w_), fy = double(jpeg_scaled(src_h_, num)) / double(src_h_);
    // The filter reaches max(shrinking factor, 1) pixels beyond the box; 2 more for rounding.
    const double reach_x = std::ceil(std::max(box_w_ * fx / double(out_w_), 1.0)) + 2;
    const double reach_y = std::ceil(std::max(box_h_ * fy / double(out_h_), 1.0)) + 2;
    const auto outward = [](double v, bool up) { return static_cast<std::int64_t>(up ? std::ceil(v) : std::floor(v)); };
    const pixel_region region{outward(box_y_ * fy - reach_y, false), outward(box_x_ * fx - reach_x, false),
                              outward((box_y_ + box_h_) * fy + reach_y, true), outward((box_x_ + box_w_) * fx + reach_x, true)};
    const bool rgb = color_ == color::rgb && !jpeg_->grey;
    use_decoded(jpeg_decode(bytes_, path_, *jpeg_, num, rgb, region, buffer), buffer, fx, fy);
  }

  // The decoded pixels become the source: the box, in the file's pixels so far, moves to theirs.
  void use_decoded(const decoded& d, const std::vector<std::uint8_t>& buffer, double fx, double fy) {
    src_channels_ = d.channels;
    box_x_ = box_x_ * fx - double(d.left), box_w_ *= fx;
    box_y_ = box_y_ * fy - double(d.top), box_h_ *= fy;
    src_h_ = d.height, src_w_ = d.width;
    source_u8_ = buffer.data();
    stride_y_ = d.width * d.channels, stride_x_ = d.channels, stride_c_ = 1;
  }

  std::span<const std::uint8_t> bytes_;
  const std::string& path_;
  color color_;
  bool scaled_decode_;
  std::optional<jpeg_info> jpeg_;  // a JPEG's header
  std::int64_t channels_ = 0, src_channels_ = 0;  // of the image, and of its source (1 for a grey file)
  bool floats_ = false;  // the values are floats (normalized, or a hook returned floats)
  // The source: the decoded pixels (interleaved) or a tensor [C, H, W].
  const std::uint8_t* source_u8_ = nullptr;
  const float* source_f32_ = nullptr;
  torch::Tensor tensor_;
  std::int64_t src_h_ = 0, src_w_ = 0, stride_y_ = 0, stride_x_ = 0, stride_c_ = 0;
  // The current image: box [x, x + w) x [y, y + h) of the source, resampled to out_h x out_w.
  double box_x_ = 0, box_y_ = 0, box_w_ = 0, box_h_ = 0;
  std::int64_t out_h_ = 0, out_w_ = 0;
  bool flip_ = false;
  std::array<double, max_channels> scale_{}, offset_{};  // value = scale * source + offset, per channel (floats only)
};

}  // namespace tp::data::detail
