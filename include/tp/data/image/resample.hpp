#pragma once
// The one pixel loop of the image transforms: bilinear resampling of a box of a source image to
// an output size, with the horizontal flip and a per-channel affine map (Normalize) folded in,
// written straight into a [C, H, W] buffer. A crop, a resize, a flip and a normalization of one
// image cost one pass over the output instead of one LibTorch op (and one tensor) each.
//
// Filter: PIL's bilinear resampling (ImagingResample): a triangle filter, stretched by the
// shrinking factor when shrinking (antialiasing), sampling positions at pixel centres, the box
// given in fractional source pixels, source pixels outside the box but inside the image used by
// the filter. torchvision's ImageFolder yields PIL images, so this is what its RandomResizedCrop
// and Resize do there; their tensor path without antialias (torchvision 0.14's default for
// tensors) aliases when shrinking and would be cheaper only by the taps it skips. Computing in
// float, with one rounding at the end, the result is within one step of PIL's uint8 result
// (PIL rounds after each pass).
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <type_traits>
#include <vector>

namespace tp::data::detail {

// Along one axis: for each output pixel, the first source pixel and its weights.
struct filter_taps {
  std::vector<std::int32_t> first, count;
  std::vector<float> weights;  // `stride` per output pixel
  std::int64_t stride = 0;
  std::int64_t lo = 0, hi = 0;  // the source pixels any output pixel reads: [lo, hi)
};

// Output pixel o in [0, out) samples the box [start, start + length) of an axis of `in` pixels;
// `reverse` mirrors the output (output o takes the taps of out - 1 - o).
inline void bilinear_taps(double start, double length, std::int64_t in, std::int64_t out, bool reverse, filter_taps& t) {
  const double scale = length / double(out);
  const double filter_scale = std::max(scale, 1.0), support = filter_scale;
  t.stride = static_cast<std::int64_t>(std::ceil(support)) * 2 + 1;
  t.first.assign(out, 0);
  t.count.assign(out, 0);
  t.weights.assign(out * t.stride, 0.0f);
  t.lo = in;
  t.hi = 0;
  thread_local std::vector<double> w;
  w.resize(t.stride + 1);
  for (std::int64_t o = 0; o < out; ++o) {
    const double centre = start + (double(o) + 0.5) * scale;
    std::int64_t lo = std::max<std::int64_t>(static_cast<std::int64_t>(centre - support + 0.5), 0);
    std::int64_t hi = std::min<std::int64_t>(static_cast<std::int64_t>(centre + support + 0.5), in);
    hi = std::min(hi, lo + t.stride);  // rounding can reach one more; its weight is 0
    double total = 0;
    for (std::int64_t i = lo; i < hi; ++i) {
      const double x = std::abs((double(i) - centre + 0.5) / filter_scale);
      total += (w[i - lo] = x < 1 ? 1 - x : 0);
    }
    // Zero weights at either end (a pixel centre exactly one support away) are not taps.
    while (hi > lo + 1 && w[hi - 1 - lo] == 0) --hi;
    std::int64_t skip = 0;
    while (lo + skip + 1 < hi && w[skip] == 0) ++skip;
    if (total <= 0) {  // cannot happen for a box inside the image; nearest pixel then
      hi = lo + 1;
      w[0] = total = 1;
    }
    const std::int64_t slot = reverse ? out - 1 - o : o;
    t.first[slot] = static_cast<std::int32_t>(lo + skip);
    t.count[slot] = static_cast<std::int32_t>(hi - lo - skip);
    for (std::int64_t k = skip; k < hi - lo; ++k) t.weights[slot * t.stride + k - skip] = static_cast<float>(w[k] / total);
    t.lo = std::min(t.lo, lo + skip);
    t.hi = std::max(t.hi, hi);
  }
}

// A source image: element (y, x, c) at data[y * stride_y + x * stride_x + c * stride_c].
template <class T>
struct pixels {
  const T* data;
  std::int64_t height, width, channels;
  std::int64_t stride_y, stride_x, stride_c;
};

// out[c][y][x] = scale[c] * bilinear(box of src)(y, x or mirrored x, c) + offset[c]; a uint8
// output is rounded and clamped instead (scale and offset are then unused).
template <class T, class Out>
void resample(const pixels<T>& src, double x0, double y0, double box_w, double box_h, std::int64_t out_h,
              std::int64_t out_w, bool flip, const float* scale, const float* offset, Out* out) {
  thread_local filter_taps tx, ty;
  thread_local std::vector<float> rows, acc;
  bilinear_taps(x0, box_w, src.width, out_w, flip, tx);
  bilinear_taps(y0, box_h, src.height, out_h, false, ty);
  const std::int64_t n_rows = ty.hi - ty.lo;
  rows.resize(n_rows * out_w);
  acc.resize(out_w);
  for (std::int64_t c = 0; c < src.channels; ++c) {
    // Horizontal pass over the source rows the vertical pass reads.
    for (std::int64_t r = 0; r < n_rows; ++r) {
      const T* row = src.data + (ty.lo + r) * src.stride_y + c * src.stride_c;
      float* o = rows.data() + r * out_w;
      for (std::int64_t x = 0; x < out_w; ++x) {
        const T* p = row + tx.first[x] * src.stride_x;
        const float* w = &tx.weights[x * tx.stride];
        float v = 0;
        for (std::int32_t k = 0; k < tx.count[x]; ++k) v += w[k] * float(p[k * src.stride_x]);
        o[x] = v;
      }
    }
    // Vertical pass, a whole output row at a time so that the compiler can vectorize it.
    for (std::int64_t y = 0; y < out_h; ++y) {
      const float* w = &ty.weights[y * ty.stride];
      const float* base = rows.data() + (ty.first[y] - ty.lo) * out_w;
      std::fill(acc.begin(), acc.end(), 0.0f);
      for (std::int32_t k = 0; k < ty.count[y]; ++k) {
        const float wk = w[k];
        const float* in = base + k * out_w;
        for (std::int64_t x = 0; x < out_w; ++x) acc[x] += wk * in[x];
      }
      Out* o = out + (c * out_h + y) * out_w;
      if constexpr (std::is_same_v<Out, std::uint8_t>) {
        for (std::int64_t x = 0; x < out_w; ++x) o[x] = static_cast<std::uint8_t>(std::clamp(acc[x] + 0.5f, 0.0f, 255.0f));
      } else {
        const float a = scale[c], b = offset[c];
        for (std::int64_t x = 0; x < out_w; ++x) o[x] = acc[x] * a + b;
      }
    }
  }
}

}  // namespace tp::data::detail
