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

// Every output pixel gets the same number of taps (zero weights fill short ones, moved inward
// at the image's edges), so that the loops below have fixed trip counts the compiler unrolls.
inline void equalize_taps(filter_taps& t, std::int64_t in) {
  std::int32_t taps = 1;
  for (auto n : t.count) taps = std::max(taps, n);
  thread_local std::vector<float> weights;
  weights.assign(t.first.size() * taps, 0.0f);
  for (std::size_t o = 0; o < t.first.size(); ++o) {
    const std::int32_t shift = std::max<std::int32_t>(0, t.first[o] + taps - std::int32_t(in));
    for (std::int32_t k = 0; k < t.count[o]; ++k) weights[o * taps + k + shift] = t.weights[o * t.stride + k];
    t.first[o] -= shift;
    t.count[o] = taps;
    t.lo = std::min<std::int64_t>(t.lo, t.first[o]);
    t.hi = std::max<std::int64_t>(t.hi, t.first[o] + taps);
  }
  t.weights.swap(weights);
  t.stride = taps;
}

// A source image: element (y, x, c) at data[y * stride_y + x * stride_x + c * stride_c].
template <class T>
struct pixels {
  const T* data;
  std::int64_t height, width, channels;
  std::int64_t stride_y, stride_x, stride_c;
};

// Horizontal pass over one source row, already in floats and interleaved (x * C + c, from
// column tx.lo): planes[c][x] for each channel c.
template <int C, int K>
void horizontal(const float* row, const filter_taps& tx, std::int64_t channels, std::int64_t out_w, float* planes, std::int64_t plane) {
  const std::int64_t ch = C > 0 ? C : channels;
  for (std::int64_t x = 0; x < out_w; ++x) {
    const float* p = row + (tx.first[x] - tx.lo) * ch;
    const float* w = &tx.weights[x * K];
    for (std::int64_t c = 0; c < ch; ++c) {
      float v = 0;
      for (int k = 0; k < K; ++k) v += w[k] * p[k * ch + c];
      planes[c * plane + x] = v;
    }
  }
}

template <int C>
void horizontal_taps(const float* row, const filter_taps& tx, std::int64_t channels, std::int64_t out_w, float* planes, std::int64_t plane) {
  switch (tx.stride) {
    case 1: return horizontal<C, 1>(row, tx, channels, out_w, planes, plane);
    case 2: return horizontal<C, 2>(row, tx, channels, out_w, planes, plane);
    case 3: return horizontal<C, 3>(row, tx, channels, out_w, planes, plane);
    case 4: return horizontal<C, 4>(row, tx, channels, out_w, planes, plane);
  }
  const std::int64_t ch = C > 0 ? C : channels, taps = tx.stride;
  for (std::int64_t x = 0; x < out_w; ++x)
    for (std::int64_t c = 0; c < ch; ++c) {
      float v = 0;
      for (std::int64_t k = 0; k < taps; ++k) v += tx.weights[x * taps + k] * row[(tx.first[x] - tx.lo + k) * ch + c];
      planes[c * plane + x] = v;
    }
}

template <class Out>
inline void store(Out* o, const float* v, std::int64_t n, float a, float b) {
  if constexpr (std::is_same_v<Out, std::uint8_t>) {
    // Through int32, which the compiler vectorizes (a direct float to uint8 conversion it does not).
    for (std::int64_t x = 0; x < n; ++x) o[x] = static_cast<std::uint8_t>(static_cast<std::int32_t>(std::min(std::max(v[x] + 0.5f, 0.0f), 255.0f)));
  } else {
    for (std::int64_t x = 0; x < n; ++x) o[x] = v[x] * a + b;
  }
}

// out[c][y][x] = scale[c] * bilinear(box of src)(y, x or mirrored x, c) + offset[c] for c <
// out_channels; a uint8 output is rounded and clamped instead (scale and offset unused). A
// one-channel source fills every output channel (a grey file read as RGB: one channel to
// resample instead of three identical ones).
//
// Two passes, an output row at a time: the source rows it needs are resampled horizontally
// (each source row once, into a ring of `taps` rows that stays in L1), then combined vertically
// into the output row, in loops the compiler vectorizes (all but the horizontal taps: SSE2
// has no gather). The working set stays a few rows, whatever the image's size.
template <class T, class Out>
void resample(const pixels<T>& src, double x0, double y0, double box_w, double box_h, std::int64_t out_h,
              std::int64_t out_w, bool flip, const float* scale, const float* offset, std::int64_t out_channels, Out* out) {
  thread_local filter_taps tx, ty;
  thread_local std::vector<float> row, ring, acc;
  bilinear_taps(x0, box_w, src.width, out_w, flip, tx);
  bilinear_taps(y0, box_h, src.height, out_h, false, ty);
  equalize_taps(tx, src.width);
  equalize_taps(ty, src.height);
  const std::int64_t C = src.channels, n_cols = tx.hi - tx.lo, taps = ty.stride, slot = C * out_w;
  row.resize(n_cols * C);
  ring.resize(taps * slot);
  acc.resize(out_w);
  const bool interleaved = src.stride_c == 1 && src.stride_x == C;
  std::int64_t next = 0;  // the first source row not resampled yet
  for (std::int64_t y = 0; y < out_h; ++y) {
    const std::int64_t first = ty.first[y];
    for (std::int64_t r = std::max(next, first); r < first + taps; ++r) {
      const T* s = src.data + r * src.stride_y + tx.lo * src.stride_x;
      if (interleaved)  // a plain conversion loop: vectorized
        for (std::int64_t i = 0; i < n_cols * C; ++i) row[i] = float(s[i]);
      else
        for (std::int64_t x = 0; x < n_cols; ++x)
          for (std::int64_t c = 0; c < C; ++c) row[x * C + c] = float(s[x * src.stride_x + c * src.stride_c]);
      float* planes = ring.data() + (r % taps) * slot;
      if (C == 3) horizontal_taps<3>(row.data(), tx, C, out_w, planes, out_w);
      else if (C == 1) horizontal_taps<1>(row.data(), tx, C, out_w, planes, out_w);
      else horizontal_taps<0>(row.data(), tx, C, out_w, planes, out_w);
    }
    next = first + taps;
    const float* w = &ty.weights[y * taps];
    for (std::int64_t c = 0; c < C; ++c) {
      const float* in0 = ring.data() + (first % taps) * slot + c * out_w;
      float* v = acc.data();
      if (taps == 1) {
        for (std::int64_t x = 0; x < out_w; ++x) v[x] = w[0] * in0[x];
      } else if (taps == 2) {
        const float* in1 = ring.data() + ((first + 1) % taps) * slot + c * out_w;
        for (std::int64_t x = 0; x < out_w; ++x) v[x] = w[0] * in0[x] + w[1] * in1[x];
      } else {
        for (std::int64_t x = 0; x < out_w; ++x) v[x] = w[0] * in0[x];
        for (std::int64_t k = 1; k < taps; ++k) {
          const float* in = ring.data() + ((first + k) % taps) * slot + c * out_w;
          for (std::int64_t x = 0; x < out_w; ++x) v[x] += w[k] * in[x];
        }
      }
      if (C == out_channels) store(out + (c * out_h + y) * out_w, v, out_w, scale[c], offset[c]);
      else
        for (std::int64_t o = 0; o < out_channels; ++o) store(out + (o * out_h + y) * out_w, v, out_w, scale[o], offset[o]);
    }
  }
}

}  // namespace tp::data::detail
